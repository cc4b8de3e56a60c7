"""Fine-tune all-MiniLM-L6-v2 as a bi-encoder whose cosine says "this memory answers this question".

Run by scripts/train_embedder.py inside its throwaway venv (torch CPU, transformers, onnx,
onnxruntime, tqdm: pinned there), with the repository root on sys.path for the project's pure
data loaders. Pure torch + transformers; the service never imports any of it.

The model is the service's: MiniLM, mean pooling over the real tokens, L2 norm, tokenised by the
default model's tokenizer.json (the same file, sha256-pinned by app/adapters/embedder.py).

A curated step takes PERSONS_PER_STEP people and QUESTIONS_PER_PERSON of each one's questions,
and embeds every memory of those people: each question meets all of its own person's other
memories (the hardest negatives there are: same topic, name-trap look-alikes) and the other
people's (in-batch negatives). A LoCoMo step takes BATCH questions of one conversation with
their evidence turns and LOCOMO_NEGATIVES turns mined once with the base model (the most
cosine-similar non-evidence turns, and random ones): every turn of the step is a negative for
every question it does not answer. Two losses on one cosine matrix:

- InfoNCE (scale SCALE) of each (question, answer) against every item of the step that is not
  one of the question's answers;
- pointwise (curated steps): sigmoid(a * cos + b), a and b learned, label 1 for (question,
  answer) and 0 for (question, one of the POINTWISE_NEGATIVES most cosine-similar other memories
  of its person, chosen in the step with the model as it is), balanced halves. Questions with no
  answer (no_answer, unanswerable name_trap) have no InfoNCE term: their top-cosine memories are
  0s. So the cosine itself learns where "answers" begins, for every question, not only which
  item comes first.

A newer_wins question's stale memory is on topic: it is neither answer nor negative (ranking the
newer first is the service's recency stage's job). With `--revision-weight`, a third term pulls the
two memories of such a pair together against the person's other memories (the cosine between two
stored vectors is what links one topic in the service). After every epoch the validation figures
(base model first) are printed; the epoch with the best SELECTION sum is kept, exported
(scripts/train/export_onnx.py) and measured again as the int8 graph the service will run.

    python finetune.py --checkpoint DIR --tokenizer tokenizer.json --out DIR \
        --corpus eval/corpus/personas-*.json --locomo locomo-dev.json [--dev]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from tqdm import tqdm
from transformers import AutoModel, get_linear_schedule_with_warmup

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

import export_onnx  # noqa: E402
from training_data import Data, Group, Query, load_data  # noqa: E402

# Hyper-parameters (chosen on the validation people; the report prints them).
SEED = 20261205
EPOCHS = 5
PERSONS_PER_STEP = 2
QUESTIONS_PER_PERSON = 16
BATCH = 32  # questions per LoCoMo step
LOCOMO_NEGATIVES = (3, 1)  # (most similar, random) non-evidence turns per LoCoMo question
LOCOMO_PER_EPOCH = 160  # LoCoMo training questions sampled per epoch (of 529)
POINTWISE_NEGATIVES = 5  # a question's most similar non-answers labelled 0
# 5e-5 and a pointwise weight of 5 (v1 was trained with 3e-5 and 1): validation people, cosine
# alone, best epoch: AUC of the best cosine 0.653 -> 0.756 at the same paraphrase-first and
# present@5 (docs/retrieval.md, "Models of our own").
LEARNING_RATE = 5e-5
HEAD_LEARNING_RATE = 1e-2  # a and b of sigmoid(a * cos + b)
WARMUP = 0.1
SCALE = 20.0  # InfoNCE temperature 0.05
POINTWISE_WEIGHT = 5.0
# A person's old/new decision pairs (a newer_wins question's answer and stale memory) are one
# topic: InfoNCE over the memory-to-memory cosines of the person's memories, each memory of a
# pair against all the others (0 = off). It trains the link the service's near-tie rule reads
# (app/retrieval/topics.py) apart from two look-alike facts about two people.
REVISION_WEIGHT = 1.0
MAX_TOKENS = 256  # sentence-transformers' max_seq_length, as the service truncates
THREADS = 2
CHUNK = 32  # texts per forward pass inside a step (sorted by length)
# What picks the epoch: the sum of these validation figures.
SELECTION = ("paraphrase_first", "present@5", "auc_best_cosine", "locomo_recall@5")


class Encoder:
    """MiniLM with the service's tokenisation, pooling and norm."""

    def __init__(self, checkpoint: Path, tokenizer: Path) -> None:
        self.model = AutoModel.from_pretrained(str(checkpoint), local_files_only=True)
        self.tokenizer = Tokenizer.from_file(str(tokenizer))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        # The same without padding: forward() pads each length-sorted chunk itself.
        self._unpadded = Tokenizer.from_file(str(tokenizer))
        self._unpadded.enable_truncation(max_length=MAX_TOKENS)
        self._unpadded.no_padding()

    def forward(self, texts: list[str], chunk: int = CHUNK) -> torch.Tensor:
        """Unit vectors of `texts`, in order, with gradients when training. Texts run in chunks
        of similar token length: one long LoCoMo turn does not pad a whole batch."""
        ids = [e.ids for e in self._unpadded.encode_batch(texts)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        pieces = []
        for start in range(0, len(order), chunk):
            part = [ids[i] for i in order[start : start + chunk]]
            width = max(len(row) for row in part)
            tokens = torch.zeros((len(part), width), dtype=torch.long)
            mask = torch.zeros_like(tokens)
            for row, values in enumerate(part):
                tokens[row, : len(values)] = torch.tensor(values)
                mask[row, : len(values)] = 1
            hidden = self.model(
                input_ids=tokens, attention_mask=mask, token_type_ids=torch.zeros_like(tokens)
            ).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            pieces.append(F.normalize(pooled, dim=-1))
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.tensor(order)] = torch.arange(len(order))
        return torch.cat(pieces)[inverse]

    @torch.inference_mode()
    def embed(self, texts: list[str] | tuple[str, ...]) -> np.ndarray:
        was_training = self.model.training
        self.model.eval()
        out = self.forward(list(texts), chunk=64).numpy()
        self.model.train(was_training)
        return out


# --------------------------------------------------------------------------- validation


def auc(positive: list[float], negative: list[float]) -> float:
    """P(a positive's score > a negative's), ties counted half (Mann-Whitney)."""
    if not positive or not negative:
        return math.nan
    pos, neg = np.asarray(positive)[:, None], np.asarray(negative)[None, :]
    return float(((pos > neg).sum() + 0.5 * (pos == neg).sum()) / (pos.size * neg.size))


def group_cosines(embed: object, group: Group) -> np.ndarray:
    items = embed(group.items)  # type: ignore[operator]
    queries = embed([q.text for q in group.queries])  # type: ignore[operator]
    return queries @ items.T


def curated_figures(
    embed: object, groups: tuple[Group, ...], head: tuple[float, float] | None
) -> dict[str, float]:
    """Each question ranked against all of its person's memories by cosine."""
    shares: dict[str, list[float]] = {}
    best_answerable: list[float] = []
    best_unanswerable: list[float] = []

    def add(name: str, value: bool) -> None:
        shares.setdefault(name, []).append(float(value))

    between: list[tuple[Group, np.ndarray]] = []  # each person's memory-to-memory cosines
    for group in groups:
        items = embed(group.items)  # type: ignore[operator]
        between.append((group, items @ items.T))
        cosines = embed([q.text for q in group.queries]) @ items.T  # type: ignore[operator]
        for row, query in zip(cosines, group.queries, strict=True):
            order = list(np.argsort(-row, kind="stable"))
            best = float(row.max())
            if not query.answers:
                best_unanswerable.append(best)
                if head is not None:
                    add("unanswerable_answered@0.5", _probability(best, head) >= 0.5)
                continue
            best_answerable.append(best)
            first = order[0] in query.answers
            top5 = set(order[:5])
            add("present@5", any(a in top5 for a in query.answers))
            add("answerable_first", first)
            if query.shape == "paraphrase":
                add("paraphrase_first", first)
                add("paraphrase_present@5", any(a in top5 for a in query.answers))
            elif query.shape == "shared_word":
                add("shared_word_first", first)
            elif query.shape == "two_memories":
                add("two_memories_both@5", all(a in top5 for a in query.answers))
            elif query.shape == "name_trap":
                add("name_trap_answerable_first", first)
            elif query.shape == "newer_wins":
                add("newer_wins_newer_above_stale", row[query.answers[0]] > row[query.ignore].max())
            if head is not None:
                add("answerable_answered@0.5", _probability(best, head) >= 0.5)
    figures = {name: float(np.mean(values)) for name, values in sorted(shares.items())}
    figures |= revision_figures(between)
    figures["auc_best_cosine"] = auc(best_answerable, best_unanswerable)
    figures["questions"] = float(len(best_answerable) + len(best_unanswerable))
    figures["unanswerable"] = float(len(best_unanswerable))
    return figures


# The service's near-tie link (app/retrieval/presets.py DEFAULT.tie_link).
TIE_LINK = 0.5


def revision_figures(between: list[tuple[Group, np.ndarray]]) -> dict[str, float]:
    """How the cosine between two memories of a person (`between`: each person's memory-to-
    memory cosines) tells a revision pair (a newer_wins question's two memories) from every
    other pair of the person's memories: the AUC, and the shares of each at TIE_LINK or over."""
    linked: list[float] = []
    other: list[float] = []
    for group, cosines in between:
        pairs = {frozenset(pair) for pair in revisions(group)}
        if not pairs:
            continue
        for i in range(len(group.items)):
            for j in range(i + 1, len(group.items)):
                (linked if frozenset((i, j)) in pairs else other).append(float(cosines[i, j]))
    if not linked:
        return {}
    return {
        "revision_auc": auc(linked, other),
        "revision_linked@0.5": float(np.mean(np.asarray(linked) >= TIE_LINK)),
        "other_linked@0.5": float(np.mean(np.asarray(other) >= TIE_LINK)),
    }


def locomo_recall(embed: object, groups: tuple[Group, ...], k: int = 5) -> float:
    """Recall@k of the held-out conversations' evidence turns, by cosine over all their turns."""
    recalls = []
    for group in groups:
        cosines = group_cosines(embed, group)
        for row, query in zip(cosines, group.queries, strict=True):
            top = set(np.argsort(-row, kind="stable")[:k])
            recalls.append(sum(1 for a in query.answers if a in top) / len(query.answers))
    return float(np.mean(recalls)) if recalls else math.nan


def _probability(cosine: float, head: tuple[float, float]) -> float:
    return 1.0 / (1.0 + math.exp(-(head[0] * cosine + head[1])))


def validate(embed: object, data: Data, head: tuple[float, float] | None) -> dict[str, float]:
    figures = curated_figures(embed, data.validation, head)
    if data.locomo_validation:
        figures["locomo_recall@5"] = locomo_recall(embed, data.locomo_validation)
    figures["selection"] = float(sum(figures.get(name, 0.0) for name in SELECTION))
    return figures


SHOWN = (
    "paraphrase_first",
    "present@5",
    "answerable_first",
    "auc_best_cosine",
    "locomo_recall@5",
    "shared_word_first",
    "name_trap_answerable_first",
    "two_memories_both@5",
    "newer_wins_newer_above_stale",
    "revision_auc",
    "revision_linked@0.5",
    "other_linked@0.5",
    "answerable_answered@0.5",
    "unanswerable_answered@0.5",
)


def show(label: str, figures: dict[str, float]) -> None:
    cells = " ".join(f"{name}={figures[name]:.3f}" for name in SHOWN if name in figures)
    print(f"[validation] {label}: {cells}", flush=True)


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class Step:
    source: str  # "curated" or "locomo"
    questions: tuple[tuple[int, Query], ...]  # (training group, question)
    items: tuple[tuple[int, int], ...]  # (training group, item): the step's columns


def mine_locomo(
    encoder: Encoder, groups: tuple[Group, ...], rng: random.Random
) -> list[tuple[int, Query, tuple[int, ...]]]:
    """Every LoCoMo training question with its negative turns under the base model."""
    hard, extra = LOCOMO_NEGATIVES
    mined = []
    chosen = [(i, g) for i, g in enumerate(groups) if g.source == "locomo"]
    for index, group in tqdm(chosen, desc="mining LoCoMo negatives", leave=False):
        cosines = group_cosines(encoder.embed, group)
        for row, query in zip(cosines, group.queries, strict=True):
            answers = set(query.answers)
            ranked = [int(j) for j in np.argsort(-row, kind="stable") if j not in answers]
            rest = ranked[hard:]
            mined.append((index, query, tuple(ranked[:hard] + rng.sample(rest, extra))))
    return mined


def plan_epoch(
    groups: tuple[Group, ...],
    locomo: list[tuple[int, Query, tuple[int, ...]]],
    rng: random.Random,
) -> list[Step]:
    """One epoch's steps: every curated question once, LOCOMO_PER_EPOCH LoCoMo ones; shuffled."""
    pieces = []
    for index, group in enumerate(groups):
        if group.source != "curated":
            continue
        queries = list(group.queries)
        rng.shuffle(queries)
        for start in range(0, len(queries), QUESTIONS_PER_PERSON):
            pieces.append([(index, q) for q in queries[start : start + QUESTIONS_PER_PERSON]])
    rng.shuffle(pieces)
    steps = []
    for start in range(0, len(pieces), PERSONS_PER_STEP):
        questions = [pair for piece in pieces[start : start + PERSONS_PER_STEP] for pair in piece]
        people = sorted({index for index, _ in questions})
        items = [(index, item) for index in people for item in range(len(groups[index].items))]
        steps.append(Step("curated", tuple(questions), tuple(items)))
    sample = rng.sample(locomo, min(LOCOMO_PER_EPOCH, len(locomo)))
    for conversation in sorted({index for index, _, _ in sample}):
        mine = [entry for entry in sample if entry[0] == conversation]
        for start in range(0, len(mine), BATCH):
            chunk = mine[start : start + BATCH]
            items: dict[tuple[int, int], None] = {}
            for index, query, negatives in chunk:
                for item in (*query.answers, *negatives):
                    items[(index, item)] = None
            steps.append(Step("locomo", tuple((i, q) for i, q, _ in chunk), tuple(items)))
    rng.shuffle(steps)
    return steps


def steps_per_epoch(groups: tuple[Group, ...]) -> int:
    """An upper bound of plan_epoch's steps (the learning-rate schedule's length)."""
    pieces = sum(
        math.ceil(len(g.queries) / QUESTIONS_PER_PERSON) for g in groups if g.source == "curated"
    )
    conversations = sum(1 for g in groups if g.source == "locomo")
    locomo = math.ceil(LOCOMO_PER_EPOCH / BATCH) + conversations if conversations else 0
    return math.ceil(pieces / PERSONS_PER_STEP) + locomo


def revisions(group: Group) -> tuple[tuple[int, int], ...]:
    """The (newer, older) memory pairs of a person's newer_wins questions."""
    pairs = {
        (query.answers[0], older)
        for query in group.queries
        if query.shape == "newer_wins" and query.answers
        for older in query.ignore
    }
    return tuple(sorted(pairs))


def revision_loss(
    items: torch.Tensor, groups: tuple[Group, ...], step: Step
) -> torch.Tensor | None:
    """InfoNCE of each memory of a revision pair towards the other, against every other
    memory of its person in the step (None: the step's people have no pair)."""
    columns = {key: column for column, key in enumerate(step.items)}
    anchors, partners = [], []
    for index in sorted({g for g, _ in step.items}):
        for newer, older in revisions(groups[index]):
            a, b = columns[(index, newer)], columns[(index, older)]
            anchors += [a, b]
            partners += [b, a]
    if not anchors:
        return None
    item_groups = torch.tensor([g for g, _ in step.items])
    rows = items[anchors] @ items.T * SCALE  # anchors x items
    mask = item_groups[anchors][:, None] != item_groups[None, :]
    mask[torch.arange(len(anchors)), torch.tensor(anchors)] = True  # not itself
    rows = rows.masked_fill(mask, float("-inf"))
    return F.cross_entropy(rows, torch.tensor(partners))


def step_loss(
    encoder: Encoder,
    head: torch.nn.Parameter,
    groups: tuple[Group, ...],
    step: Step,
    pointwise_weight: float = POINTWISE_WEIGHT,
    revision_weight: float = REVISION_WEIGHT,
) -> tuple[torch.Tensor, float, float]:
    columns = {key: column for column, key in enumerate(step.items)}
    queries = encoder.forward([q.text for _, q in step.questions])
    items = encoder.forward([groups[g].items[i] for g, i in step.items])
    cosines = queries @ items.T  # questions x items
    positive = torch.zeros_like(cosines, dtype=torch.bool)
    ignored = torch.zeros_like(positive)
    same_person = torch.zeros_like(positive)
    item_groups = torch.tensor([g for g, _ in step.items])
    for row, (index, query) in enumerate(step.questions):
        same_person[row] = item_groups == index
        for item in query.answers:
            positive[row, columns[(index, item)]] = True
        for item in query.ignore:
            ignored[row, columns[(index, item)]] = True
    # InfoNCE: each (question, answer) against every item that is neither an answer of the
    # question nor its stale memory.
    logits = cosines * SCALE
    negative_lse = torch.logsumexp(
        logits.masked_fill(positive | ignored, float("-inf")), dim=1, keepdim=True
    )
    if bool(positive.any()):
        contrastive = F.softplus(negative_lse - logits)[positive].mean()
    else:  # every question of the step unanswerable
        contrastive = cosines.sum() * 0.0
    if step.source != "curated":
        return contrastive, float(contrastive.detach()), math.nan
    # Pointwise: sigmoid(a * cos + b); answers 1, the question's most similar other memories
    # of its person 0 (balanced halves).
    with torch.no_grad():
        candidates = cosines.detach().masked_fill(~same_person | positive | ignored, float("-inf"))
        top = candidates.topk(POINTWISE_NEGATIVES, dim=1).indices
        negative = torch.zeros_like(positive).scatter_(1, top, True) & same_person
        negative &= ~(positive | ignored)
    z = head[0] * cosines + head[1]
    pointwise = F.softplus(z[negative]).mean()
    if bool(positive.any()):
        pointwise = 0.5 * (F.softplus(-z[positive]).mean() + pointwise)
    loss = contrastive + pointwise_weight * pointwise
    if revision_weight:
        revision = revision_loss(items, groups, step)
        if revision is not None:
            loss = loss + revision_weight * revision
    return loss, float(contrastive.detach()), float(pointwise.detach())


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)


def train(args: argparse.Namespace) -> None:
    started = time.monotonic()
    seed_everything(args.seed)
    data = load_data(args.corpus, args.locomo, args.dev, args.train_people)
    print(data.summary(), flush=True)
    encoder = Encoder(args.checkpoint, args.tokenizer)
    rng = random.Random(args.seed)
    # a and b start where cos 0.45 is an even bet, 10 logits per unit of cosine.
    head = torch.nn.Parameter(torch.tensor([10.0, -4.5]))
    optimiser = torch.optim.AdamW(
        [
            {"params": encoder.model.parameters(), "lr": args.learning_rate, "weight_decay": 0.01},
            {"params": [head], "lr": HEAD_LEARNING_RATE, "weight_decay": 0.0},
        ]
    )
    total = steps_per_epoch(data.train) * args.epochs
    schedule = get_linear_schedule_with_warmup(optimiser, int(WARMUP * total), total)

    table: list[dict[str, object]] = []
    base = validate(encoder.embed, data, None)
    show("base", base)
    table.append({"epoch": 0, "label": "base", **base})
    locomo = mine_locomo(encoder, data.train, rng)
    best_state, best_epoch, best_score, best_head = None, 0, -math.inf, (0.0, 0.0)
    for epoch in range(1, args.epochs + 1):
        epoch_started = time.monotonic()
        encoder.model.train()
        progress = tqdm(plan_epoch(data.train, locomo, rng), desc=f"epoch {epoch}/{args.epochs}")
        losses: dict[str, list[float]] = {"nce": [], "pointwise": []}
        for step in progress:
            loss, contrastive, pointwise = step_loss(
                encoder, head, data.train, step, args.pointwise_weight, args.revision_weight
            )
            optimiser.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(encoder.model.parameters(), 1.0)
            optimiser.step()
            schedule.step()
            losses["nce"].append(contrastive)
            if not math.isnan(pointwise):
                losses["pointwise"].append(pointwise)
            progress.set_postfix(nce=f"{contrastive:.3f}", pointwise=f"{pointwise:.3f}")
        a, b = (float(v) for v in head.detach())
        figures = validate(encoder.embed, data, (a, b))
        nce, bce = (float(np.mean(values)) for values in losses.values())
        figures |= {"loss_nce": nce, "loss_pointwise": bce, "head_a": a, "head_b": b}
        figures["seconds"] = time.monotonic() - epoch_started
        show(f"epoch {epoch} (nce {nce:.3f}, pointwise {bce:.3f}, a {a:.2f}, b {b:.2f})", figures)
        table.append({"epoch": epoch, "label": f"epoch {epoch}", **figures})
        if figures["selection"] > best_score:
            best_score, best_epoch = figures["selection"], epoch
            best_state = {k: v.detach().clone() for k, v in encoder.model.state_dict().items()}
            best_head = (a, b)
    assert best_state is not None
    encoder.model.load_state_dict(best_state)
    train_seconds = time.monotonic() - started
    print(f"kept epoch {best_epoch} (selection {best_score:.3f}); {train_seconds:.0f} s")

    args.out.mkdir(parents=True, exist_ok=True)
    check_texts = sorted(
        {t for g in data.validation for t in (*g.items, *(q.text for q in g.queries))}
    )
    export = export_onnx.export(encoder.model, encoder.tokenizer, args.out, check_texts)
    int8_session = export_onnx.session(args.out / "model-int8.onnx")

    def int8_embed(texts: list[str] | tuple[str, ...]) -> np.ndarray:
        return export_onnx.embed_onnx(int8_session, encoder.tokenizer, texts)

    int8_figures = validate(int8_embed, data, best_head)
    show(f"int8 graph of epoch {best_epoch}", int8_figures)
    table.append({"epoch": best_epoch, "label": "int8 graph", **int8_figures})
    report = {
        "seed": args.seed,
        "epochs": args.epochs,
        "kept_epoch": best_epoch,
        "head": {"a": best_head[0], "b": best_head[1], "meaning": "P = sigmoid(a * cos + b)"},
        "hyper_parameters": {
            "persons_per_step": PERSONS_PER_STEP,
            "questions_per_person": QUESTIONS_PER_PERSON,
            "locomo_questions_per_step": BATCH,
            "locomo_negatives": list(LOCOMO_NEGATIVES),
            "pointwise_negatives": POINTWISE_NEGATIVES,
            "learning_rate": args.learning_rate,
            "head_learning_rate": HEAD_LEARNING_RATE,
            "warmup": WARMUP,
            "infonce_scale": SCALE,
            "pointwise_weight": args.pointwise_weight,
            "revision_weight": args.revision_weight,
            "locomo_questions_per_epoch": LOCOMO_PER_EPOCH,
            "max_tokens": MAX_TOKENS,
            "threads": THREADS,
            "selection": list(SELECTION),
        },
        "data": data.summary(),
        "train_people": sum(1 for g in data.train if g.source == "curated"),
        "validation": table,
        "export": export,
        "train_seconds": train_seconds,
        "versions": {
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "tokenizers": __import__("tokenizers").__version__,
            "onnx": export_onnx.onnx.__version__,
            "onnxruntime": export_onnx.onnxruntime.__version__,
        },
    }
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out} in {time.monotonic() - started:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--corpus", type=Path, nargs="+", required=True)
    parser.add_argument("--locomo", type=Path, default=None)
    parser.add_argument("--dev", action="store_true", help="the development set's 4/2 split")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--learning-rate", type=float, default=LEARNING_RATE)
    parser.add_argument("--pointwise-weight", type=float, default=POINTWISE_WEIGHT)
    parser.add_argument("--revision-weight", type=float, default=REVISION_WEIGHT)
    parser.add_argument(
        "--train-people", type=int, default=None, help="only this many curated train people"
    )
    train(parser.parse_args())


if __name__ == "__main__":
    main()
