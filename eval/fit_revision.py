"""`python -m eval.fit_revision`: fit the newer-wins pair model of the service's embedder.

The model (app/retrieval/revision.py) says whether the newer of two memories a question found
revises the older ranked above it. Its data are the corpus's own rankings: the tool's plain
ranking (`python -m eval --dataset curated --path eval/corpus --split S`, every topic link off:
`--set decision_link=0 --set tie_link=0 --set revision_threshold=0`), run here for the
calibration people (fitted on; the embedder never trained on them, so their cosines are as a
new user's) and the validation people (read). For each question, every pair of memories among
its first TOPIC_DEPTH ranked memories whose lower one is the newer (by the corpus's ages; two of
one age are never paired) is an example:

- 1: the newer is the question's answer and the older one of its stale memories (newer_wins);
- 0: the older is an answer and the newer is not (lifting the newer would put a wrong memory
  first);
- other pairs are not counted (neither order is wrong).

The pair's cosine is read from the stored vectors of the service's embedder (the memories'
texts embedded here by the same local model, as the service stores them).

Fit: L2 logistic regression (eval.fit_relevance.logistic, standardised features folded back
into raw weights; deterministic). Printed, for thresholds 0.5-0.9, the lifts each would make
(right: a stale memory the newer answer passes; wrong: an answer a newer non-answer passes):
on the calibration people out of fold (grouped by person, 8 folds), on the validation people
with the fit on every calibration person, and, on both, the lifts of the near-tie rule and the
decision link that stay beside it (`tie_link`, `tie_ratio`, `decision_link`). `--write`
writes app/retrieval/revision_models/<embedder>.json; the thresholds are the preset's
(`revision_threshold`: the newer first; `revision_outdates`: the older marked too), chosen
through the tool on the validation people (docs/retrieval.md, "Newer wins by a pair model").
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.adapters.embedder import LocalEmbedder
from app.embedding_models import DEFAULT_MODEL_ID
from app.retrieval.presets import DEFAULT
from app.retrieval.relevance import SPEC_FLOOR
from app.retrieval.revision import (
    DECISION,
    REVISION_FEATURES,
    MemoryText,
    RevisionModel,
    memory_text,
    revision_features,
    revision_file,
)
from eval.datasets.curated import CuratedMemory, CuratedUser, load_curated
from eval.fit_relevance import logistic
from eval.runner import main as run_eval

CORPUS = Path(__file__).with_name("corpus")
TOPIC_DEPTH = DEFAULT.topic_depth
L2 = 1.0
FOLDS = 8
THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
LINKS_OFF = ("decision_link=0", "tie_link=0", "revision_threshold=0")


@dataclass(frozen=True)
class Pair:
    """One example: a question's older memory ranked above a newer one."""

    person: str
    label: int
    x: list[float]
    # what today's rules would do with it: the near tie (tie_link, tie_ratio), the decision link
    tie: bool
    decision: bool
    words: int = 0  # the longer memory's words


def scored(model: RevisionModel, p: Pair) -> float:
    """The model's probability of a pair, 0 for one longer than it reads (RevisionModel.reads)."""
    return model.probability(p.x) if model.reads(p.words) else 0.0


def ranking(split: str, out: Path, corpus: Path) -> Path:
    """The plain ranking of `split`'s people with every topic link off (the eval's CSV)."""
    args = ["--dataset", "curated", "--path", str(corpus), "--split", split, "--no-mlflow"]
    args += ["--report-only", "--no-progress", "--out", str(out)]
    for setting in LINKS_OFF:
        args += ["--set", setting]
    if run_eval(args) != 0:
        raise SystemExit(f"the {split} run failed")
    return out / "curated_questions.csv"


def pairs(csv_path: Path, users: dict[str, CuratedUser], embedder: LocalEmbedder) -> list[Pair]:
    """Every example of one run's rankings (see the module)."""
    vectors: dict[str, np.ndarray] = {}

    def vector(text: str) -> np.ndarray:
        if text not in vectors:
            vectors[text] = np.asarray(embedder.embed_sync([text])[0], dtype=np.float32)
        return vectors[text]

    texts: dict[str, MemoryText] = {}

    def text(m: CuratedMemory) -> MemoryText:
        if m.content not in texts:
            texts[m.content] = memory_text(m.content, m.type)
        return texts[m.content]

    out: list[Pair] = []
    with csv_path.open() as f:
        for row in csv.DictReader(f):
            user = users[row["user"]]
            memories = {m.key: m for m in user.memories}
            answers, stale = set(row["answers"].split()), set(row["stale"].split())
            ranked = []
            for cell in row["ranking_keys"].split():
                key, _, relevance = cell.partition(":")
                if key in memories:
                    ranked.append((memories[key], float(relevance)))
            ranked = ranked[:TOPIC_DEPTH]
            for i, (older, r_old) in enumerate(ranked):
                for newer, r_new in ranked[i + 1 :]:
                    if newer.age_days >= older.age_days:
                        continue  # not newer (or of one age: never paired)
                    if newer.key in answers and older.key in stale:
                        label = 1
                    elif older.key in answers and newer.key not in answers:
                        label = 0
                    else:
                        continue
                    cosine = float(vector(older.content) @ vector(newer.content))
                    a, b = text(older), text(newer)
                    x = revision_features(cosine, r_old, r_new, a, b)
                    tie = cosine >= DEFAULT.tie_link and r_new >= DEFAULT.tie_ratio * r_old > 0
                    decision = (
                        older.type == newer.type == DECISION
                        and cosine >= DEFAULT.decision_link
                        and min(r_old, r_new) >= SPEC_FLOOR
                    )
                    out.append(Pair(user.id, label, x, tie, decision, max(a.words, b.words)))
    return out


def fit(examples: Sequence[Pair], max_words: int = 0) -> RevisionModel:
    """L2 logistic regression on standardised features, folded back into raw weights;
    `max_words`: the longest memory of the people fitted on (what the model may read)."""
    x = np.array([p.x for p in examples])
    y = np.array([float(p.label) for p in examples])
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    beta = logistic((x - mean) / scale, y, np.ones(len(y)), L2)
    weights = beta[:-1] / scale
    bias = float(beta[-1] - (beta[:-1] * mean / scale).sum())
    return RevisionModel(tuple(float(w) for w in weights), bias, max_words, "v1")


def out_of_fold(examples: Sequence[Pair], max_words: int) -> np.ndarray:
    """Each example's probability from a fit on the other folds' people."""
    people = sorted({p.person for p in examples})
    fold = {person: n % FOLDS for n, person in enumerate(people)}
    out = np.zeros(len(examples))
    for k in range(FOLDS):
        train = [p for p in examples if fold[p.person] != k]
        model = fit(train, max_words)
        for n, p in enumerate(examples):
            if fold[p.person] == k:
                out[n] = scored(model, p)
    return out


def table(name: str, examples: Sequence[Pair], probabilities: np.ndarray) -> None:
    """Right and wrong lifts per threshold, and those of today's rules."""
    y = np.array([p.label for p in examples])
    right, wrong = int((y == 1).sum()), int((y == 0).sum())

    def cell(lifted: np.ndarray) -> str:
        return f"{int((lifted & (y == 1)).sum()):>4} / {int((lifted & (y == 0)).sum()):<4}"

    tie = np.array([p.tie for p in examples])
    decision = np.array([p.decision for p in examples])
    print(f"\n{name}: {len(examples)} pairs ({right} to lift, {wrong} to keep); right / wrong")
    print(f"  {'near tie (tie_link, tie_ratio)':<34} {cell(tie)}")
    print(f"  {'decision link':<34} {cell(decision)}")
    print(f"  {'near tie or decision link':<34} {cell(tie | decision)}")
    for t in THRESHOLDS:
        model = probabilities >= t
        both = cell(model | decision)
        print(f"  {f'model >= {t}':<20}{cell(model)}   with the decision link {both}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--work", type=Path, default=None, help="keep the runs here")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    embedder = LocalEmbedder()
    if embedder.model != DEFAULT_MODEL_ID:
        print(f"note: fitting for {embedder.model}", file=sys.stderr)
    users = {u.id: u for u in load_curated(args.corpus).users}
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        examples = {
            split: pairs(ranking(split, work / split, args.corpus), users, embedder)
            for split in ("calibration", "validation")
        }
    calibration, validation = examples["calibration"], examples["validation"]
    if not calibration or not any(p.label for p in calibration):
        raise SystemExit("no calibration pairs to fit: the corpus needs calibration people")
    fitted_on = [u for u in users.values() if u.split == "calibration"]
    longest = max(len(m.content.split()) for u in fitted_on for m in u.memories)
    model = fit(calibration, longest)
    print("features:", ", ".join(REVISION_FEATURES), f"(memories of up to {longest} words)")
    print("weights: ", ", ".join(f"{w:+.3f}" for w in model.weights), f"bias {model.bias:+.3f}")
    table("calibration people, out of fold", calibration, out_of_fold(calibration, longest))
    table(
        "validation people, fitted on the calibration people",
        validation,
        np.array([scored(model, p) for p in validation]),
    )
    if args.write:
        path = revision_file(embedder.model)
        path.parent.mkdir(exist_ok=True)
        extra = {"embedder": embedder.model, "fitted_on": "calibration", "pairs": len(calibration)}
        path.write_text(model.to_json(extra))
        print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
