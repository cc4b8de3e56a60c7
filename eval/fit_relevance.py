"""`python -m eval.fit_relevance`: fit the relevance model (app/retrieval/relevance.py).

1. Collect: load the labelled sets into a throwaway service (LoCoMo's development half as the
   docs import it, and the curated development set: memories with their ages, questions with
   their answer keys, questions with none), ask every question once through the service's own
   ranking (`QueryService.explain`, min_score 0) and keep every candidate's features and label
   (1: it answers the question). `--dump FILE` saves them, `--from-dump FILE` skips this step.
2. Fit: L2-regularised logistic regression by Newton's method (numpy, deterministic). Every
   question weighs the same within its set and each set weighs the same in total, so 760
   LoCoMo questions do not drown 200 curated ones.
3. Check: cross-validation by group (a LoCoMo conversation or a curated user is one group;
   folds are fixed by a seeded shuffle): held-out AUC, first-place accuracy and, per threshold,
   presence of an answer and abstention on questions without one.
4. Write the model fitted on everything to the file of the embedder the command runs with
   (`--write`; PGRECALL_EMBEDDING_MODEL as the service reads it): app/retrieval/
   relevance_model.json for the default embedder, else app/retrieval/relevance_models/
   <embedder>.json (relevance.model_file). A dump records its embedder, and fitting on a dump
   of another embedder than the environment's stops (the cosines are on another scale).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from app.retrieval.relevance import (
    FEATURES,
    ITEM_FEATURES,
    SPEC_FLOOR,
    RelevanceModel,
    model_file,
)
from eval.datasets.curated import CuratedDataset, load_curated

DEFAULT_LOCOMO = Path("../shared/datasets/locomo/locomo-dev.json")
DEFAULT_CURATED = Path("eval/curated_dev.json")
SEED = 29
FOLDS = 5
CALIBRATION_DEPTH = 5
# What a dump holds per candidate: the relevance model's features, then the answer head's logit
# (the pipeline's `answer` stage adds it, weighted by RelevanceModel.head_weight).
COLUMNS = (*FEATURES, "answer_head")
L2 = 1.0  # on the summed (weighted) log-loss of a set of unit total weight per set
# The memory-specific weights (RelevanceModel.memory_weights) are penalised MEMORY_L2 times as
# much as the shared ones: they stay near the shared weights unless the curated set insists
# (cross-validated by user and conversation, docs/retrieval.md). 0: no memory weights.
MEMORY_L2 = 9.0


@dataclass
class Question:
    dataset: str  # "locomo" | "curated" | "calibration" | "validation"
    group: str  # conversation or user: the unit of cross-validation
    qid: str
    shape: str  # LoCoMo category or curated shape
    x: np.ndarray  # candidates x features
    y: np.ndarray  # 1 = answers the question
    keys: tuple[str, ...] = ()  # the candidates' dialogue ids or memory keys (for replays)
    query: str = ""
    memory: np.ndarray | None = None  # 1 = the candidate is a curated memory (None: none is)

    def memories(self) -> np.ndarray:
        return self.memory if self.memory is not None else np.zeros(len(self.y))


def logits(model: RelevanceModel, q: Question) -> np.ndarray:
    """The model's logit of every candidate of `q` (RelevanceModel.logit, vectorised, with the
    answer head's column when the model weighs it)."""
    width = len(model.weights)
    z = q.x[:, :width] @ np.array(model.weights) + model.bias
    if model.head_weight and q.x.shape[1] > width:
        z = z + model.head_weight * q.x[:, width]
    if model.memory_weights:
        z = z + q.memories() * (q.x[:, : len(ITEM_FEATURES)] @ np.array(model.memory_weights))
    return np.asarray(z)


# --------------------------------------------------------------------------- collect


async def collect(
    locomo: Path | None, curated: CuratedDataset | None, samples: Sequence[str]
) -> list[Question]:
    from eval import locomo_run
    from eval.harness import running_service
    from eval.runner import eval_settings

    questions: list[Question] = []
    async with running_service(eval_settings(None)) as harness:
        if curated is not None:
            kept = tuple(u for u in curated.users if u.split != "test")
            questions += await _collect_curated(harness, replace(curated, users=kept))
        if locomo is not None:
            conversations = locomo_run.load(locomo)
            if samples:
                conversations = [c for c in conversations if c.sample_id in samples]
            id_to_dia = await locomo_run.load_into(harness, conversations)
            for conv in conversations:
                mapping = id_to_dia[conv.user_id]
                for q in conv.questions:
                    feats = await _explain(harness, conv.user_id, q.question)
                    keys = list(feats)
                    questions.append(
                        Question(
                            "locomo",
                            conv.sample_id,
                            f"{conv.sample_id}-q{q.qa_index}",
                            str(q.category),
                            np.array([feats[k] for k in keys], dtype=float).reshape(
                                -1, len(COLUMNS)
                            ),
                            np.array(
                                [mapping.get(str(k[1])) in q.evidence for k in keys], dtype=float
                            ),
                            tuple(mapping.get(str(k[1]), "") for k in keys),
                            q.question,
                            _memories(keys),
                        )
                    )
    return questions


async def _explain(harness: Any, user_id: str, query: str) -> dict[Any, tuple[float, ...]]:
    from app.services.query import QueryRequest, QueryService

    r = harness.resources
    service = QueryService(r.engine, r.embeddings, r.cache, r.query_config)
    _, trace = await service.explain(
        QueryRequest(user_id=user_id, query=query, limit=50, min_score=0.0)
    )
    # The answer head's logit as the last column: a candidate it did not score counts as the
    # lowest logit it gave (as the pipeline's with_answer_head), 0 when it scored none.
    floor = min(trace.head.values(), default=0.0)
    return {k: (*f, trace.head.get(k, floor)) for k, f in trace.features.items()}


def _memories(keys: Sequence[Any]) -> np.ndarray:
    from app.services.query import Source

    return np.array([k[0] is Source.MEMORY for k in keys], dtype=float)


async def _collect_curated(harness: Any, data: CuratedDataset) -> list[Question]:
    """Every question of the set's people, as the service ranks it. A corpus person's split
    names the question's set: "curated" (train, or a file without splits) is fitted on,
    "calibration" only by the question model, "validation" only chooses; the test split is
    never read (`collect` drops it)."""
    from app.services.memory import MemoryInput

    now = datetime.now(UTC)
    out: list[Question] = []
    for user in data.users:
        user_id = f"fit-{user.id}"
        ids = await harness.add_memories(
            [
                MemoryInput(
                    user_id=user_id,
                    content=m.content,
                    type=m.type,
                    importance=m.importance,
                    created_at=m.created_at(now),
                    source="curated-dev",
                )
                for m in user.memories
            ]
        )
        key_of = {str(i): m.key for i, m in zip(ids, user.memories, strict=True)}
        dataset = user.split if user.split in ("validation", "calibration") else "curated"
        for q in user.questions:
            feats = await _explain(harness, user_id, q.query)
            keys = list(feats)
            answers = set(q.answers)
            out.append(
                Question(
                    dataset,
                    user.id,
                    q.id,
                    q.shape,
                    np.array([feats[k] for k in keys], dtype=float).reshape(-1, len(COLUMNS)),
                    np.array([key_of.get(str(k[1])) in answers for k in keys], dtype=float),
                    tuple(key_of.get(str(k[1]), "") for k in keys),
                    q.query,
                    _memories(keys),
                )
            )
    return out


def save(questions: Sequence[Question], path: Path, embedder: str) -> None:
    rows = [
        {
            "dataset": q.dataset,
            "group": q.group,
            "qid": q.qid,
            "shape": q.shape,
            "x": q.x.round(6).tolist(),
            "y": q.y.tolist(),
            "keys": list(q.keys),
            "query": q.query,
            "memory": q.memories().tolist(),
        }
        for q in questions
    ]
    width = questions[0].x.shape[1] if questions else len(COLUMNS)
    body = {"features": list(COLUMNS[:width]), "embedder": embedder, "questions": rows}
    path.write_text(json.dumps(body))


def load(path: Path, embedder: str) -> list[Question]:
    """The questions of a dump collected with `embedder` (a dump that records none, from before
    dumps did, is taken to be)."""
    body = json.loads(path.read_text())
    known = (list(FEATURES), list(COLUMNS))  # without and with the answer head's column
    if body["features"] not in known or any("memory" not in r for r in body["questions"]):
        raise SystemExit(
            f"{path}: collected by older code (features {body['features']}, this code's "
            f"{list(COLUMNS)}, and each candidate's kind): collect again"
        )
    if body.get("embedder", embedder) != embedder:
        raise SystemExit(
            f"{path}: collected with embedder {body['embedder']}, this run's is {embedder}: "
            "set PGRECALL_EMBEDDING_MODEL (and PGRECALL_EMBEDDING_DIMENSION) to match"
        )
    return [
        Question(
            r["dataset"],
            r["group"],
            r["qid"],
            r["shape"],
            np.array(r["x"], dtype=float).reshape(-1, len(body["features"])),
            np.array(r["y"], dtype=float),
            tuple(r.get("keys", ())),
            r.get("query", ""),
            np.array(r["memory"], dtype=float),
        )
        for r in body["questions"]
    ]


# --------------------------------------------------------------------------- fit


def _design(questions: Sequence[Question]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stacked features, labels and weights: each question 1 / (questions in its set) in total."""
    per_set: dict[str, int] = {}
    for q in questions:
        per_set[q.dataset] = per_set.get(q.dataset, 0) + 1
    xs, ys, ws = [], [], []
    for q in questions:
        if len(q.y) == 0:
            continue
        xs.append(q.x)
        ys.append(q.y)
        ws.append(np.full(len(q.y), 1.0 / (per_set[q.dataset] * len(q.y))))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def fit(
    questions: Sequence[Question],
    l2: float = L2,
    objective: str = "listwise",
    query_features: bool = False,
    memory_l2: float = MEMORY_L2,
) -> RelevanceModel:
    """The model: "pointwise" is a weighted logistic regression over candidates; "listwise"
    ranks first (a softmax over each question's candidates: the likelihood that the answers
    are picked from them) and then calibrates that score into a probability (a logistic
    regression on the score alone, which keeps the order).

    `query_features`: the calibration also reads the question's features (best cosine,
    cosine_z). Off by default: cosine_z depends on how many items a store has (the best of n
    cosines stands at most sqrt(n - 1) deviations above them), so a calibration fitted on
    stores of 40 and 600 items under-rates every answer of a store of six; their weights are
    then 0.

    `memory_l2` > 0 (listwise only): a curated memory's item features get weights of their own
    (the shared ones plus `memory_weights`, penalised `memory_l2` times as much); the
    calibration is shared, so both kinds land on one probability scale."""
    if objective == "absolute":
        return _absolute_fit(questions, l2)
    if objective == "pointwise":
        model = _pointwise(questions, l2)
        if questions and questions[0].x.shape[1] > len(FEATURES):  # the head's column
            return RelevanceModel(
                model.version,
                model.weights[: len(FEATURES)],
                model.bias,
                head_weight=model.weights[len(FEATURES)],
            )
        return model
    questions = [_without_head(q) for q in questions]
    n = len(ITEM_FEATURES)
    kinds = memory_l2 > 0.0
    expanded = [_with_memory(q) for q in questions] if kinds else list(questions)
    w = _listwise(expanded, l2, memory_l2 if kinds else 1.0)
    w[n : len(FEATURES)] = 0.0  # the same for every candidate: they cannot order them
    # Calibrated where the tool decides: on each question's first CALIBRATION_DEPTH candidates
    # (all candidates would teach it mostly that the hundredth one is not the answer).
    scored = []
    for q, e in zip(questions, expanded, strict=True):
        if not len(q.y):
            continue
        s = e.x @ w
        top = np.argsort(-s)[:CALIBRATION_DEPTH]
        columns = [s[top][:, None]]
        if query_features:
            columns.append(q.x[top][:, len(ITEM_FEATURES) :])
        calib = np.hstack(columns)
        scored.append(Question(q.dataset, q.group, q.qid, q.shape, calib, q.y[top]))
    platt = _pointwise(scored, l2)
    a = platt.weights[0]
    query_weights = list(platt.weights[1:]) or [0.0] * (len(FEATURES) - len(ITEM_FEATURES))
    weights = [a * v for v in w[:n]] + query_weights
    memory = tuple(float(a * v) for v in w[len(FEATURES) :]) if kinds else ()
    return RelevanceModel(
        "fitted", tuple(float(v) for v in weights), platt.bias, memory_weights=memory
    )


def _top(q: Question, scores: np.ndarray, depth: int) -> Question:
    """`q` with only its `depth` best-scored candidates."""
    keep = np.sort(np.argsort(-scores, kind="stable")[:depth])
    memory = q.memory[keep] if q.memory is not None else None
    keys = tuple(q.keys[i] for i in keep) if q.keys else ()
    return Question(q.dataset, q.group, q.qid, q.shape, q.x[keep], q.y[keep], keys, q.query, memory)


# What the "absolute" objective reads of a candidate: only the pair's own evidence, nothing
# that depends on the question's other candidates (its cosine, not its gap to the best one),
# so the probability of a (question, item) pair is the same whatever else the store holds.
ABSOLUTE = ("cosine", "keyword", "plain", "name_only", "name_missing")


def _absolute_fit(questions: Sequence[Question], l2: float) -> RelevanceModel:
    """Pointwise over ABSOLUTE (and the head's column), written back as a RelevanceModel:
    the cosine's weight on both cosine_gap and best_cosine (their sum is the cosine), 0 on
    what depends on the other candidates (cosine_z, keyword_top)."""
    col = {name: i for i, name in enumerate(FEATURES)}

    def columns(q: Question) -> Question:
        x = q.x
        picked = [x[:, col["cosine_gap"]] + x[:, col["best_cosine"]]]
        picked += [x[:, col[name]] for name in ABSOLUTE[1:]]
        if x.shape[1] > len(FEATURES):
            picked.append(x[:, len(FEATURES)])
        return Question(q.dataset, q.group, q.qid, q.shape, np.column_stack(picked), q.y)

    fitted = _pointwise([columns(q) for q in questions if len(q.y)], l2)
    w = fitted.weights
    weights = [0.0] * len(FEATURES)
    weights[col["cosine_gap"]] = weights[col["best_cosine"]] = w[0]
    for i, name in enumerate(ABSOLUTE[1:], start=1):
        weights[col[name]] = w[i]
    head = w[len(ABSOLUTE)] if len(w) > len(ABSOLUTE) else 0.0
    return RelevanceModel(fitted.version, tuple(weights), fitted.bias, head_weight=head)


def _without_head(q: Question) -> Question:
    """`q` without the answer head's column (the listwise fit does not weigh it)."""
    return Question(
        q.dataset, q.group, q.qid, q.shape, q.x[:, : len(FEATURES)], q.y, q.keys, q.query,
        q.memory,
    )  # fmt: skip


def _with_memory(q: Question) -> Question:
    """`q` with the memory columns appended: the item features of its memories, 0 for turns."""
    extra = q.memories()[:, None] * q.x[:, : len(ITEM_FEATURES)]
    return Question(q.dataset, q.group, q.qid, q.shape, np.hstack([q.x, extra]), q.y)


def _listwise(questions: Sequence[Question], l2: float, memory_l2: float = 1.0) -> np.ndarray:
    """argmin over w of the weighted sum over questions with an answer of
    -log(sum_answers softmax(X w)) + l2/2 |w|^2, by damped Newton steps on its convex part.
    Columns past FEATURES (the memory columns, `_with_memory`) are penalised `memory_l2` times
    as much."""
    per_set: dict[str, int] = {}
    usable = [q for q in questions if len(q.y) and q.y.sum() > 0]
    for q in usable:
        per_set[q.dataset] = per_set.get(q.dataset, 0) + 1
    sets = len(per_set)
    weight = {q.qid: 1.0 / (per_set[q.dataset] * sets) for q in usable}
    d = usable[0].x.shape[1]
    w = np.zeros(d)
    lam = np.full(d, l2 * 1e-3)
    lam[len(FEATURES) :] *= memory_l2

    def loss_grad_hess(w: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        loss, grad, hess = float(lam @ (w * w)) / 2, lam * w, np.diag(lam)
        for q in usable:
            s = q.x @ w
            s = s - s.max()
            p = np.exp(s) / np.exp(s).sum()
            pos = q.y == 1
            pi = np.where(pos, p, 0.0) / p[pos].sum()
            c = weight[q.qid]
            loss += c * -np.log(p[pos].sum())
            grad += c * q.x.T @ (p - pi)
            xc = q.x - p @ q.x
            hess += c * (xc * p[:, None]).T @ xc
        return float(loss), grad, hess

    for _ in range(60):
        loss, grad, hess = loss_grad_hess(w)
        step = np.linalg.solve(hess + 1e-9 * np.eye(d), grad)
        t = 1.0
        while t > 1e-4 and loss_grad_hess(w - t * step)[0] > loss - 1e-4 * t * grad @ step:
            t /= 2
        w = w - t * step
        if np.abs(t * step).max() < 1e-7:
            break
    return w


def logistic(x: np.ndarray, y: np.ndarray, weights: np.ndarray, l2: float) -> np.ndarray:
    """Weighted L2 logistic regression of `y` on `x` plus a bias (the last coefficient,
    unpenalised), Newton's method to convergence; deterministic."""
    a = np.hstack([x, np.ones((len(x), 1))])
    beta = np.zeros(a.shape[1])
    penalty = np.full(a.shape[1], l2)
    penalty[-1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ beta, -30, 30)))
        grad = a.T @ (weights * (p - y)) + penalty * beta
        hess = (a * (weights * p * (1 - p))[:, None]).T @ a
        step = np.linalg.solve(hess + np.diag(penalty) + 1e-9 * np.eye(len(beta)), grad)
        beta -= step
        if np.abs(step).max() < 1e-8:
            break
    return beta


def _pointwise(questions: Sequence[Question], l2: float) -> RelevanceModel:
    """Weighted L2 logistic regression (bias unpenalised), Newton's method to convergence."""
    x, y, w = _design(questions)
    beta = logistic(x, y, w / w.sum(), l2 * 1e-3)
    return RelevanceModel("fitted", tuple(float(b) for b in beta[:-1]), float(beta[-1]))


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def evaluate(
    model: RelevanceModel, questions: Sequence[Question], thresholds: Sequence[float]
) -> dict[str, Any]:
    """Per set: AUC over candidates, first place right, and per threshold the share of
    answerable questions with an answer at or above it and of no-answer ones with anything."""
    out: dict[str, Any] = {}
    for dataset in sorted({q.dataset for q in questions}):
        qs = [q for q in questions if q.dataset == dataset]
        scores = [1 / (1 + np.exp(-logits(model, q))) if len(q.y) else np.zeros(0) for q in qs]
        answerable = [(q, s) for q, s in zip(qs, scores, strict=True) if q.y.sum() > 0]
        unanswerable = [(q, s) for q, s in zip(qs, scores, strict=True) if q.y.sum() == 0]
        allx = np.concatenate([s for _, s in answerable]) if answerable else np.zeros(0)
        ally = np.concatenate([q.y for q, _ in answerable]) if answerable else np.zeros(0)
        row: dict[str, Any] = {
            "questions": len(qs),
            "auc": round(_auc(allx, ally), 4),
            "first": round(float(np.mean([q.y[np.argmax(s)] for q, s in answerable])), 4),
            "recall@5": round(
                float(np.mean([q.y[np.argsort(-s)[:5]].sum() / q.y.sum() for q, s in answerable])),
                4,
            ),
        }
        if unanswerable:
            tops = [float(s.max()) if len(s) else 0.0 for _, s in unanswerable]
            answer_tops = [float(s[q.y == 1].max()) for q, s in answerable]
            # what the tool keeps of a paraphrase's answer at threshold t (the floor on the
            # question's best, then the reported relevance relative to it: _kept)
            paraphrases = [
                (float(s[q.y == 1].max()), float(s.max()))
                for q, s in answerable
                if q.shape == "paraphrase"
            ] or [(a, a) for a in answer_tops]
            row["no_answer_auc"] = round(
                _auc(
                    np.array([float(s.max()) for _, s in answerable] + tops),
                    np.array([1.0] * len(answerable) + [0.0] * len(tops)),
                ),
                4,
            )
            row["by_threshold"] = {
                f"{t:.2f}": {
                    "present": round(float(np.mean([a >= t for a in answer_tops])), 4),
                    "paraphrase_kept": round(
                        float(np.mean([_kept(a, b, t) for a, b in paraphrases])), 4
                    ),
                    "answerable_empty": round(
                        float(np.mean([float(s.max()) < t for _, s in answerable])), 4
                    ),
                    "no_answer_answered": round(float(np.mean([m >= t for m in tops])), 4),
                }
                for t in thresholds
            }
        out[dataset] = row
    return out


def evidence(x: np.ndarray) -> np.ndarray:
    """Which candidates the default preset scores at all (app/retrieval/scoring._learned): a
    cosine over `vector_floor`, or a keyword match on a non-name word in an item whose cosine
    is over `keyword_cosine_floor`."""
    from app.retrieval.presets import DEFAULT

    col = {name: i for i, name in enumerate(FEATURES)}
    cosine = x[:, col["best_cosine"]] + x[:, col["cosine_gap"]]
    keyword = (x[:, col["plain"]] > 0.0) & (cosine > DEFAULT.keyword_cosine_floor)
    return np.asarray((cosine > DEFAULT.vector_floor) | keyword)


def _kept(answer: float, best: float, threshold: float) -> bool:
    """Whether the tool keeps an answer of probability `answer` in a question whose best
    candidate has `best`, at the operating point `threshold`: the reported relevance
    (RelevanceModel.relevance with the default preset's relative exponent) over the spec's
    floor and within the relative cut of the best."""
    from app.retrieval.presets import DEFAULT

    model = RelevanceModel("t", (0.0,) * len(FEATURES), 0.0, floor_probability=threshold)
    rel = model.relevance(answer, best, DEFAULT.relative_exponent)
    top = model.relevance(best)
    return rel >= SPEC_FLOOR and rel >= DEFAULT.relative_cutoff * top


def cross_validate(
    questions: Sequence[Question],
    l2: float,
    thresholds: Sequence[float],
    objective: str,
    query_features: bool = False,
    memory_l2: float = MEMORY_L2,
) -> tuple[dict[str, Any], list[Question]]:
    """Held-out figures: each group's questions scored by a model fitted without that group
    (and those scores, as one-column questions)."""
    groups = sorted({(q.dataset, q.group) for q in questions})
    random.Random(SEED).shuffle(groups)
    fold_of = {g: i % FOLDS for i, g in enumerate(groups)}
    held: list[tuple[RelevanceModel, Question]] = []
    for fold in range(FOLDS):
        train = [q for q in questions if fold_of[(q.dataset, q.group)] != fold]
        test = [q for q in questions if fold_of[(q.dataset, q.group)] == fold]
        model = fit(train, l2, objective, query_features, memory_l2)
        held += [(model, q) for q in test]
    # score every held-out question with its own fold's model, then evaluate the union
    rescored = []
    for model, q in held:
        z = np.where(evidence(q.x), logits(model, q), -50.0)  # what the service drops: p ~ 0
        rescored.append(Question(q.dataset, q.group, q.qid, q.shape, np.hstack([z[:, None]]), q.y))
    identity = RelevanceModel("cv", (1.0,), 0.0)
    return evaluate(identity, rescored, thresholds), rescored


def convex_relevance(x: np.ndarray) -> np.ndarray:
    """The `convex` preset's calibrated relevance of each candidate, from the same features:
    the weighted noisy-OR of BM25 as a share of the ideal (full at 0.6) and cosine mapped from
    0.15 to 0.5 (app/retrieval/scoring.py)."""
    from app.retrieval.presets import CONVEX
    from app.retrieval.scoring import combine_relevance, keyword_relevance, vector_relevance

    col = {name: i for i, name in enumerate(FEATURES)}
    cosine = x[:, col["best_cosine"]] + x[:, col["cosine_gap"]]
    return np.array(
        [
            combine_relevance(
                keyword_relevance(kw, 1.0, CONVEX.keyword_saturation),
                vector_relevance(c, CONVEX.vector_floor, CONVEX.vector_ceiling),
                CONVEX.keyword_weight,
                CONVEX.vector_weight,
            )
            for kw, c in zip(x[:, col["keyword"]], cosine, strict=True)
        ]
    )


# A question-level "is the store answering at all" model, tried for abstention and not shipped
# (docs/retrieval.md): features of the question's best candidate with evidence.
SUPPORT_FEATURES = ("best_cosine", "cosine_z", "plain", "name_only", "name_missing")


def support_row(model: RelevanceModel, q: Question) -> np.ndarray | None:
    """SUPPORT_FEATURES of `q`'s best candidate with evidence (None: nothing has evidence).
    cosine_z is capped at 6 (a store's spread of one or two items says little)."""
    ok = evidence(q.x)
    if not ok.any():
        return None
    z = np.where(ok, logits(model, q), -np.inf)
    top = q.x[int(np.argmax(z))]
    col = {name: i for i, name in enumerate(FEATURES)}
    row = np.array([top[col[name]] for name in SUPPORT_FEATURES])
    row[1] = min(row[1], 6.0)
    return row


def support_held_out(
    model: RelevanceModel, questions: Sequence[Question], l2: float
) -> dict[str, float]:
    """Held-out (one curated user out at a time) support probability of every curated
    question; a question without any candidate with evidence gets 0."""
    rows = {
        q.qid: (q, support_row(model, q)) for q in questions if q.dataset == "curated" and len(q.y)
    }
    out: dict[str, float] = {}
    for user in sorted({q.group for q, _ in rows.values()}):
        train = [
            Question("support", q.group, q.qid, q.shape, r[None, :], np.array([float(q.y.any())]))
            for q, r in rows.values()
            if r is not None and q.group != user
        ]
        fitted = _pointwise(train, l2)
        for qid, (q, r) in rows.items():
            if q.group == user:
                out[qid] = 0.0 if r is None else fitted.probability(tuple(r))
    return out


def tradeoff_plot(
    questions: Sequence[Question],
    held_out: Sequence[Question],
    path: Path,
    support: dict[str, float] | None = None,
) -> None:
    """Presence (an answerable curated question's answer at or over the threshold) and
    abstention failures (a no-answer question with anything over it) against the threshold,
    for the learned model (held-out probabilities, candidates without evidence at 0), the
    convex preset's relevance, cosine alone and, given `support`, a question-level gate.
    Before the service's stages and relative cut."""
    from matplotlib.figure import Figure

    col = {name: i for i, name in enumerate(FEATURES)}
    curated = [q for q in questions if q.dataset == "curated" and len(q.y)]
    by_id = {q.qid: q for q in held_out}
    approaches = {
        "learned (held-out probability)": lambda q: 1 / (1 + np.exp(-by_id[q.qid].x[:, 0])),
        "convex (noisy-OR relevance)": lambda q: convex_relevance(q.x),
        "cosine alone": lambda q: q.x[:, col["best_cosine"]] + q.x[:, col["cosine_gap"]],
    }
    if support is not None:
        # the gate passes every candidate with evidence of a question it finds supported
        approaches["question-level support (held-out, not shipped)"] = lambda q: np.where(
            evidence(q.x), support[q.qid], 0.0
        )
    figure = Figure(figsize=(4 * len(approaches), 3.8))
    axes = figure.subplots(1, len(approaches), sharey=True)
    grid = np.linspace(0.0, 1.0, 101)
    for ax, (name, score) in zip(axes, approaches.items(), strict=True):
        answer_tops, tops = [], []
        for q in curated:
            s = score(q)
            if q.y.sum() > 0:
                answer_tops.append(float(s[q.y == 1].max()))
            else:
                tops.append(float(s.max()))
        present = [np.mean([a >= t for a in answer_tops]) for t in grid]
        answered = [np.mean([m >= t for m in tops]) for t in grid]
        ax.plot(grid, present, label="answerable: answer kept")
        ax.plot(grid, answered, label="no answer: something returned")
        ax.axhline(PRESENT_TARGET, color="C0", linestyle=":", linewidth=1)
        ax.axhline(NO_ANSWER_TARGET, color="C1", linestyle=":", linewidth=1)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("threshold on the approach's score")
    axes[0].set_ylabel("share of curated questions")
    axes[0].legend(fontsize=8, loc="lower left")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def support_report(questions: Sequence[Question], support: dict[str, float]) -> str:
    """The support gate's held-out AUC (answerable over no-answer questions) and what it
    gates at the thresholds that gate out 2, 5 and 8 % of answerable questions."""
    curated = [q for q in questions if q.qid in support]
    pos = np.array([support[q.qid] for q in curated if q.y.any()])
    neg = np.array([support[q.qid] for q in curated if not q.y.any()])
    if not len(pos) or not len(neg):
        return "support: no curated questions"
    auc = _auc(np.concatenate([pos, neg]), np.array([1.0] * len(pos) + [0.0] * len(neg)))
    lines = [f"support gate (held-out by user): AUC {auc:.3f}"]
    for share in (0.02, 0.05, 0.08):
        t = float(np.quantile(pos, share))
        lines.append(
            f"  threshold {t:.3f}: answerable gated out {np.mean(pos < t):.3f}, "
            f"no-answer passed {np.mean(neg >= t):.3f}"
        )
    return "\n".join(lines)


# The targets for the agent tool on curated memories.
PRESENT_TARGET = 0.85
NO_ANSWER_TARGET = 0.30
EMPTY_TARGET = 0.08


def choose_floor(by_threshold: dict[str, dict[str, float]]) -> float:
    """The held-out operating point closest to the targets (paraphrases' answers kept by the
    tool's floor and relative cut >= 0.85, `_kept`; answerable
    questions left empty <= 0.08, no-answer questions answered <= 0.30): the threshold that
    misses fewest of them, then has the smallest sum of shortfalls, then is lowest (answers
    kept). 0.3 when there are no curated questions."""
    if not by_threshold:
        return 0.3

    def miss(t: str) -> tuple[int, float, float]:
        row = by_threshold[t]
        shortfalls = (
            max(0.0, PRESENT_TARGET - row.get("paraphrase_kept", row["present"])),
            max(0.0, row["answerable_empty"] - EMPTY_TARGET),
            max(0.0, row["no_answer_answered"] - NO_ANSWER_TARGET),
        )
        return sum(v > 0 for v in shortfalls), round(sum(shortfalls), 6), float(t)

    return float(min(by_threshold, key=miss))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
    parser.add_argument("--curated", type=Path, default=DEFAULT_CURATED)
    parser.add_argument("--no-locomo", action="store_true")
    parser.add_argument("--samples", nargs="*", default=[], help="LoCoMo sample ids only")
    parser.add_argument("--dump", type=Path, help="save the collected features here")
    parser.add_argument(
        "--from-dump",
        type=Path,
        nargs="+",
        help="fit on features collected before (one or more dumps)",
    )
    parser.add_argument("--l2", type=float, default=L2)
    parser.add_argument(
        "--memory-l2",
        type=float,
        default=MEMORY_L2,
        help="penalty factor of the memory-specific weights (0: one weight vector for all kinds)",
    )
    parser.add_argument(
        "--objective", choices=("listwise", "pointwise", "absolute"), default="listwise"
    )
    parser.add_argument(
        "--query-features",
        action="store_true",
        help="calibrate on the question's features too (best cosine, cosine_z; off: fit.__doc__)",
    )
    parser.add_argument(
        "--variant",
        default="",
        help="write the model as this variant of the embedder's (e.g. answers: the pointwise "
        "model the answers preset reads; relevance.model_file)",
    )
    parser.add_argument(
        "--depth",
        type=int,
        default=0,
        help="pointwise: fit on each question's first N candidates by a first fit (0: all)",
    )
    parser.add_argument("--plot", type=Path, help="presence/abstention vs threshold (PNG)")
    parser.add_argument(
        "--write", action="store_true", help="write the model file of this run's embedder"
    )
    args = parser.parse_args(argv)
    from eval.runner import eval_settings

    embedder = eval_settings(None).embedding_model
    print(f"embedder: {embedder}", file=sys.stderr)
    if args.from_dump:
        questions = [q for path in args.from_dump for q in load(path, embedder)]
    else:
        curated = load_curated(args.curated) if args.curated.exists() else None
        locomo = None if args.no_locomo else args.locomo
        questions = asyncio.run(collect(locomo, curated, args.samples))
        if args.dump:
            save(questions, args.dump, embedder)
    thresholds = [round(0.01 * i, 2) for i in range(1, 96)]
    # A corpus with a validation split: fit on the rest, choose the operating point on it.
    validation = [q for q in questions if q.dataset == "validation"]
    # The calibration people are the question model's alone (eval/fit_question.py).
    questions = [q for q in questions if q.dataset not in ("validation", "calibration")]
    if args.objective in ("pointwise", "absolute") and args.depth > 0:
        # Fitted where the tool decides: each question's first candidates (by a first fit),
        # so the probability is "this one of the top candidates answers", not diluted by the
        # hundredth candidate of both arms.
        first = fit(questions, args.l2, args.objective, args.query_features, args.memory_l2)
        questions = [_top(q, logits(first, q), args.depth) for q in questions]
        validation = [_top(q, logits(first, q), args.depth) for q in validation]
    model = fit(questions, args.l2, args.objective, args.query_features, args.memory_l2)
    if validation:
        rescored = [  # as cross_validate scores: what the service drops has p ~ 0
            Question(
                q.dataset,
                q.group,
                q.qid,
                q.shape,
                np.where(evidence(q.x), logits(model, q), -50.0)[:, None],
                q.y,
            )
            for q in validation
            if len(q.y)
        ]
        held_out = evaluate(RelevanceModel("validation", (1.0,), 0.0), rescored, thresholds)
        held_out["curated"] = held_out["validation"]  # the floor is chosen on it (below)
    else:
        held_out, rescored = cross_validate(
            questions, args.l2, thresholds, args.objective, args.query_features, args.memory_l2
        )
    if args.plot:
        support = support_held_out(model, questions, args.l2)
        tradeoff_plot(questions, rescored, args.plot, support)
        print(support_report(questions, support))
    report = {
        "weights": dict(zip(FEATURES, model.weights, strict=True)),
        "head_weight": model.head_weight,
        "memory_weights": dict(zip(ITEM_FEATURES, model.memory_weights, strict=False)),
        "bias": model.bias,
        "held_out": held_out,
        "in_sample": evaluate(model, questions, thresholds),
    }
    json.dump(report, sys.stdout, indent=1)
    print()
    floor = choose_floor(held_out.get("curated", {}).get("by_threshold", {}))
    z = FEATURES.index("cosine_z")
    neutral_z = float(np.mean([q.x[0, z] for q in questions if len(q.y)]))
    print(f"operating point: probability {floor} (reported as relevance 0.3)")
    if args.write:
        sets = {q.dataset: sum(1 for x in questions if x.dataset == q.dataset) for q in questions}
        stamp = datetime.now(UTC).strftime("%Y-%m-%d")
        final = RelevanceModel(
            f"{stamp}-" + "+".join(f"{k}{v}" for k, v in sorted(sets.items())),
            model.weights,
            model.bias,
            floor,
            neutral_z,
            model.memory_weights,
            model.head_weight,
        )
        path = model_file(embedder, variant=args.variant)
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            final.to_json(
                {
                    "fitted_by": "python -m eval.fit_relevance --write",
                    "embedder": embedder,
                    **({"variant": args.variant} if args.variant else {}),
                    "l2": args.l2,
                    "memory_l2": args.memory_l2,
                    "objective": args.objective,
                    "query_features": args.query_features,
                    "seed": SEED,
                    "questions": sets,
                    "held_out": {
                        k: {m: v for m, v in row.items() if m != "by_threshold"}
                        for k, row in held_out.items()
                    },
                }
            )
        )
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
