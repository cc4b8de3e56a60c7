"""`python -m eval.fit_answer_head`: train the answer head of this run's embedder.

The head (app/retrieval/answer_head.py) reads a question's and an item's vectors and says
whether the item answers the question. It is trained here, in numpy, deterministically:

1. Data, embedded with the service's own embedder (PGRECALL_EMBEDDING_MODEL as the service
   reads it): every (question, memory) pair of the corpus's train people (eval/corpus; label 1
   for the question's answers, 0 for the person's other memories, questions with no answer
   all 0), the person's other questions as items (0: a past question is not an answer), and
   the LoCoMo development half's conversations outside LOCOMO_HELD_OUT ((question, evidence
   turn) 1, the conversation's 20 closest other turns 0). The test split is never read; the
   validation split and the held-out conversations only choose the epoch.
2. Fit: one hidden layer, Adam, binary cross-entropy with the positives weighted to half the
   total, a fixed seed; the epoch with the best validation AUC of each question's best score
   (answerable over no-answer questions), ties to the better first place.
3. Write `app/retrieval/answer_heads/<embedder>.npz` with `--write`, and print the validation
   table: per epoch the abstention AUC and first place, beside the cosine's.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from app.retrieval.answer_head import AnswerHead, gelu, head_file, pair_features
from eval.datasets.curated import CORPUS_PATH, load_curated
from eval.datasets.locomo import load_locomo

DEFAULT_LOCOMO = Path("../shared/datasets/locomo/locomo-dev.json")
# The conversations no model of ours is trained on (scripts/train/training_data.py too).
LOCOMO_HELD_OUT = ("conv-26", "conv-30")
SEED = 45
HIDDEN = 64
EPOCHS = 12
BATCH = 256
LEARNING_RATE = 1e-3
WEIGHT_DECAY = 1e-4
LOCOMO_NEGATIVES = 20
# The pipeline scores the first 20 candidates of a ranking (preset answer_depth): the head is
# trained and chosen on each question's closest items, not the easy rest of the store.
DEPTH = 20


@dataclass
class Pairs:
    """Rows of (question vector index, item vector index, label), grouped by question."""

    q: list[int]
    m: list[int]
    y: list[float]
    group: list[str]  # the question's id: its rows are one question's candidates
    shape: list[str]


def _new() -> Pairs:
    return Pairs([], [], [], [], [])


class Texts:
    """Every text once, embedded in one pass."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return self.index.setdefault(text, len(self.index))

    def embed(self, embedder: object) -> np.ndarray:
        texts = list(self.index)
        out = []
        for i in tqdm(range(0, len(texts), 64), desc="embedding", unit="batch"):
            out.extend(embedder.embed_sync(texts[i : i + 64]))  # type: ignore[attr-defined]
        return np.asarray(out, dtype=np.float32)


def corpus_pairs(texts: Texts, path: Path) -> tuple[Pairs, Pairs]:
    """(train, validation) pairs of the corpus (the test split is never read)."""
    train, validation = _new(), _new()
    for user in load_curated(path).users:
        if user.split not in ("train", "validation"):
            continue
        out = train if user.split == "train" else validation
        for question in user.questions:
            qi = texts(question.query)
            items = [(m.content, m.key in question.answers) for m in user.memories]
            if user.split == "train":  # the person's other questions: asked, not told
                items += [(o.query, False) for o in user.questions if o.id != question.id]
            for content, label in items:
                out.q.append(qi)
                out.m.append(texts(content))
                out.y.append(float(label))
                out.group.append(question.id)
                out.shape.append(question.shape)
    return train, validation


def locomo_pairs(texts: Texts, path: Path, vectors_of: object) -> tuple[Pairs, Pairs]:
    """(train, held-out) pairs of the LoCoMo development half: evidence turns 1, the closest
    other turns 0 (closest by the embedder's cosine)."""
    train, held = _new(), _new()
    if not path.exists():
        return train, held
    for conversation in load_locomo(path):
        out = held if conversation.sample_id in LOCOMO_HELD_OUT else train
        turns = list(conversation.turns)
        turn_vectors = vectors_of([t.content for t in turns])  # type: ignore[operator]
        question_vectors = vectors_of([q.question for q in conversation.questions])  # type: ignore[operator]
        for question, qv in zip(conversation.questions, question_vectors, strict=True):
            evidence = set(question.evidence)
            order = np.argsort(-(turn_vectors @ qv))
            negatives = [i for i in order if turns[i].dia_id not in evidence][:LOCOMO_NEGATIVES]
            chosen = [i for i, t in enumerate(turns) if t.dia_id in evidence] + negatives
            qi = texts(question.question)
            for i in chosen:
                out.q.append(qi)
                out.m.append(texts(turns[i].content))
                out.y.append(float(turns[i].dia_id in evidence))
                out.group.append(f"{conversation.sample_id}-{question.qa_index}")
                out.shape.append("locomo")
    return train, held


def _gelu(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GELU (tanh form, as app/retrieval/answer_head.gelu) and its derivative."""
    c = math.sqrt(2.0 / math.pi)
    inner = c * (x + 0.044715 * x**3)
    t = np.tanh(inner)
    value = 0.5 * x * (1.0 + t)
    grad = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t**2) * c * (1.0 + 3 * 0.044715 * x**2)
    return value, grad


def hardest(vectors: np.ndarray, pairs: Pairs, depth: int) -> Pairs:
    """Each question's answers and its `depth` items of highest cosine: what the head sees in
    the service (the first candidates of a ranking), without the easy rest."""
    if depth <= 0:
        return pairs
    cosine = (vectors[np.array(pairs.q)] * vectors[np.array(pairs.m)]).sum(axis=1)
    rows: dict[str, list[int]] = {}
    for i, g in enumerate(pairs.group):
        rows.setdefault(g, []).append(i)
    keep: list[int] = []
    for members in rows.values():
        ranked = sorted(members, key=lambda i: -cosine[i])
        keep += sorted(set(ranked[:depth]) | {i for i in members if pairs.y[i] > 0})
    return Pairs(
        [pairs.q[i] for i in keep],
        [pairs.m[i] for i in keep],
        [pairs.y[i] for i in keep],
        [pairs.group[i] for i in keep],
        [pairs.shape[i] for i in keep],
    )


def features(vectors: np.ndarray, pairs: Pairs) -> np.ndarray:
    """The head's input of every pair (the service's own pair_features, row by row)."""
    return pair_features(vectors[np.array(pairs.q)], vectors[np.array(pairs.m)])


def _auc(pos: Sequence[float], neg: Sequence[float]) -> float:
    if not pos or not neg:
        return float("nan")
    p, n = np.asarray(pos)[:, None], np.asarray(neg)[None, :]
    return float((p > n).mean() + 0.5 * (p == n).mean())


def judge(scores: np.ndarray, pairs: Pairs) -> dict[str, float]:
    """Per question: its best score (abstention AUC, answerable over none) and whether its
    best item answers (first place, answerable questions)."""
    groups: dict[str, list[int]] = {}
    for i, g in enumerate(pairs.group):
        groups.setdefault(g, []).append(i)
    y = np.asarray(pairs.y)
    best_pos, best_neg, first = [], [], []
    for rows in groups.values():
        s, labels = scores[rows], y[rows]
        if labels.max() > 0:
            best_pos.append(float(s.max()))
            first.append(float(labels[int(np.argmax(s))]))
        else:
            best_neg.append(float(s.max()))
    return {
        "abstain_auc": _auc(best_pos, best_neg),
        "first": float(np.mean(first)) if first else float("nan"),
    }


def train(
    x: np.ndarray, y: np.ndarray, checks: dict[str, tuple[np.ndarray, Pairs]], epochs: int
) -> tuple[AnswerHead, list[dict[str, float]]]:
    """Adam on the weighted log-loss; the epoch whose first check is best is kept."""
    rng = np.random.default_rng(SEED)
    d = x.shape[1]
    params = {
        "w1": (rng.standard_normal((d, HIDDEN)) * math.sqrt(1.0 / d)).astype(np.float32),
        "b1": np.zeros(HIDDEN, np.float32),
        "w2": (rng.standard_normal(HIDDEN) * math.sqrt(1.0 / HIDDEN)).astype(np.float32),
        "b2": np.zeros(1, np.float32),
    }
    moments = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in params.items()}
    positive_weight = (1.0 - y.mean()) / max(y.mean(), 1e-9)
    weights = np.where(y > 0, positive_weight, 1.0).astype(np.float32)
    weights /= weights.mean()
    step = 0
    history: list[dict[str, float]] = []
    best: tuple[tuple[float, float], AnswerHead] | None = None
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x))
        for start in range(0, len(order), BATCH):
            b = order[start : start + BATCH]
            xb, yb, wb = x[b], y[b], weights[b]
            pre = xb @ params["w1"] + params["b1"]
            hidden, dhidden = _gelu(pre)
            logit = hidden @ params["w2"] + params["b2"][0]
            p = 1.0 / (1.0 + np.exp(-np.clip(logit, -30, 30)))
            g = (wb * (p - yb) / len(b)).astype(np.float32)
            grads = {
                "w2": hidden.T @ g,
                "b2": np.array([g.sum()], np.float32),
            }
            dpre = np.outer(g, params["w2"]) * dhidden
            grads["w1"] = xb.T @ dpre
            grads["b1"] = dpre.sum(axis=0)
            step += 1
            for k, grad in grads.items():
                m, v = moments[k]
                m[...] = 0.9 * m + 0.1 * grad
                v[...] = 0.999 * v + 0.001 * grad**2
                m_hat, v_hat = m / (1 - 0.9**step), v / (1 - 0.999**step)
                params[k] -= LEARNING_RATE * (m_hat / (np.sqrt(v_hat) + 1e-8))
                if k.startswith("w"):
                    params[k] -= LEARNING_RATE * WEIGHT_DECAY * params[k]
        head = AnswerHead(
            params["w1"].copy(),
            params["b1"].copy(),
            params["w2"].copy(),
            float(params["b2"][0]),
            f"epoch {epoch}",
        )
        row: dict[str, float] = {"epoch": float(epoch)}
        for name, (cx, cpairs) in checks.items():
            scores = _head_scores(head, cx)
            for metric, value in judge(scores, cpairs).items():
                row[f"{name}_{metric}"] = value
        history.append(row)
        first_check = next(iter(checks))
        key = (row[f"{first_check}_abstain_auc"], row[f"{first_check}_first"])
        if best is None or key > best[0]:
            best = (key, head)
        print(" ".join(f"{k}={v:.3f}" for k, v in row.items()), flush=True)
    assert best is not None
    return best[1], history


def _head_scores(head: AnswerHead, x: np.ndarray) -> np.ndarray:
    return np.asarray(gelu((x @ head.w1 + head.b1).astype(np.float32)) @ head.w2 + head.b2)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS_PATH)
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--no-locomo", action="store_true")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument(
        "--depth",
        type=int,
        default=DEPTH,
        help="train and validate on each question's answers and N closest items (0: all)",
    )
    parser.add_argument("--write", action="store_true", help="write the embedder's head file")
    args = parser.parse_args(argv)
    from app.adapters.embedder import LocalEmbedder
    from eval.runner import eval_settings

    model = eval_settings(None).embedding_model
    print(f"embedder: {model}", file=sys.stderr)
    embedder = LocalEmbedder(model=model)

    def vectors_of(items: list[str]) -> np.ndarray:
        return np.asarray(embedder.embed_sync(items), dtype=np.float32)

    texts = Texts()
    corpus_train, corpus_validation = corpus_pairs(texts, args.corpus)
    locomo_train, locomo_held = (
        (_new(), _new()) if args.no_locomo else locomo_pairs(texts, args.locomo, vectors_of)
    )
    vectors = texts.embed(embedder)
    train_pairs = hardest(vectors, _concat(corpus_train, locomo_train), args.depth)
    corpus_validation = hardest(vectors, corpus_validation, args.depth)
    x, y = features(vectors, train_pairs), np.asarray(train_pairs.y, np.float32)
    checks = {"validation": (features(vectors, corpus_validation), corpus_validation)}
    if locomo_held.q:
        checks["locomo_held_out"] = (features(vectors, locomo_held), locomo_held)
    for name, (cx, cpairs) in checks.items():
        cosine = judge(cx[:, -1], cpairs)
        print(f"{name}: cosine alone abstain_auc={cosine['abstain_auc']:.3f} "
              f"first={cosine['first']:.3f}")  # fmt: skip
    print(f"train: {len(y)} pairs, {int(y.sum())} answers; {len(checks)} checks", flush=True)
    head, _ = train(x, y, checks, args.epochs)
    print(f"kept: {head.version}")
    if args.write:
        path = head_file(model)
        head.save(path)
        print(f"wrote {path}")
    return 0


def _concat(a: Pairs, b: Pairs) -> Pairs:
    return Pairs(a.q + b.q, a.m + b.m, a.y + b.y, a.group + b.group, a.shape + b.shape)


if __name__ == "__main__":
    raise SystemExit(main())
