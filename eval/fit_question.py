"""`python -m eval.fit_question DUMP`: fit the question-level abstention model of an embedder.

DUMP is what `python -m eval.fit_relevance --curated eval/corpus --samples conv-41 conv-42
conv-43 --objective absolute --depth 20 --variant answers --dump DUMP` collected: every
candidate's relevance features and answer-head logit for the corpus's train people
("curated"), calibration people ("calibration"), validation people ("validation") and LoCoMo's
training conversations; the test people are never in it. For each curated question, the first
DEPTH candidates by the `answers` relevance model's logit (with the head, as the pipeline
orders them) give its QUESTION_FEATURES (app/retrieval/abstention.py); the label is whether the
question has an answer. LoCoMo's questions all have one and are left out (a question-level
model needs questions without an answer) unless `--locomo` fits on them too (dialogue, and
questions that share their answers' words, beside the corpus's written ones).

Fit: logistic regression on the calibration people (`--fit-on calibration`, the default: the
embedder never trained on them, so their cosines are as a new user's; `--fit-on curated` fits
on the train people, whose answers the embedder learnt to place high) (standardised features,
L2 1.0, Newton's method; deterministic). Printed: the AUC of each question's probability
(answerable over none) on the people fitted on and the validation people beside the best item's
logit's, and, for the validation people, the share of questions without an answer that clear
the floor at each share of answerable questions left under it, and the validation AUC of a
refit without each feature in turn. `--floor-empty SHARE` sets the operating point at the
probability under which that share of the validation people's answerable questions falls (in
the dump); `--floor-probability P` sets it at P, a point chosen through the agent tool on the
validation people (how the default's was chosen: docs/retrieval.md, "The operating point").
`--variant` names the relevance model whose logit it reads (default `answers`; '' the
embedder's plain model, as the default preset reads it; an embedder without one reads the
default's, as the service does). `--signs` holds each weight to the sign of SIGNS. `--write`
writes
app/retrieval/question_models/<embedder>[.<variant>].json.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np

from app.embedding_models import DEFAULT_MODEL_ID
from app.retrieval.abstention import (
    DEPTH,
    QUESTION_FEATURES,
    QuestionModel,
    question_features,
    question_file,
)
from app.retrieval.relevance import RelevanceModel, model_for
from eval.curated_metrics import auc
from eval.datasets.curated import load_curated, some_people
from eval.datasets.locomo import load_locomo
from eval.fit_relevance import DEFAULT_LOCOMO, Question, load, logistic

L2 = 1.0
DEFAULT_CORPUS = Path("eval/corpus")
# Whose questions a model is fitted on: the dump's sets (eval.fit_relevance's Question.dataset).
# "calibration" by default: the embedder trained on the train people ("curated") and places
# their answers higher than a new user's, so a model fitted on them reads their cosines as
# surer than they are (docs/retrieval.md, "Calibration people").
FIT_SETS = ("calibration", "curated")


# The text of every candidate a dump can name: (its group, its key) -> the stored text.
Texts = Mapping[tuple[str, str], str]


def candidate_texts(corpus: Path = DEFAULT_CORPUS, locomo: Path = DEFAULT_LOCOMO) -> Texts:
    """The corpus's memories by (user, key) and LoCoMo's turns by (conversation, dia_id), as
    the service stores them: the text the question model's answer-type features read (a dump
    keeps candidates' keys, not their texts)."""
    texts = {(u.id, m.key): m.content for u in load_curated(corpus).users for m in u.memories}
    if locomo.exists():
        for conversation in load_locomo(locomo):
            for turn in conversation.turns:
                texts[(conversation.sample_id, turn.dia_id)] = turn.content
    return texts


def _texts(q: Question, texts: Texts, order: Sequence[int]) -> list[str]:
    """The texts of `q`'s candidates at `order`; SystemExit for a question of a dump that
    kept no keys (its texts are unknown, and the answer-type features would read "")."""
    if not q.keys:
        raise SystemExit(f"{q.qid}: the dump kept no candidate keys: collect it again")
    missing = [q.keys[i] for i in order if (q.group, q.keys[i]) not in texts]
    if missing:
        raise SystemExit(f"{q.qid}: no text for {missing[:3]}: a dump of another corpus?")
    return [texts[(q.group, q.keys[i])] for i in order]


def _features(q: Question, model: RelevanceModel, texts: Texts) -> list[float]:
    """The question's QUESTION_FEATURES as the pipeline computes them: its first DEPTH
    candidates by the relevance model's logit (with the head's when the model weighs it; a
    model without a head weight is read without the answer head, as its preset runs)."""
    n = len(model.weights)
    memory = q.memories()
    logits = [model.logit(list(x[:n]), bool(m)) for x, m in zip(q.x, memory, strict=True)]
    heads = [float(x[n]) if model.head_weight and len(x) > n else 0.0 for x in q.x]
    scores = [-(lg + model.head_weight * h) for lg, h in zip(logits, heads, strict=True)]
    order = np.argsort(scores, kind="stable")[:DEPTH]
    return question_features(
        [logits[i] for i in order],
        [list(q.x[i][:n]) for i in order],
        [heads[i] for i in order] if model.head_weight else [],
        q.query,
        _texts(q, texts, order),
    )


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    return auc(scores[labels == 1].tolist(), scores[labels == 0].tolist())


# With `--signs`, the sign each feature's weight may take: more evidence of an answer never
# lowers P(an answer) (0: either sign). Without it the fit may learn how a corpus was written
# instead: its paraphrases share no word with their answers by construction, so a keyword
# match "means" no answer there, which is not so where people write as they speak.
SIGNS = {
    "best_logit": 1,
    "best_cosine": 1,
    "cosine_z": 0,
    "best_head": 1,
    "second_head": 0,
    "best_keyword": 1,
    "best_plain": 1,
    "name_missing": -1,
    "type_missing": -1,
    "qualifier_conflict": -1,
}


def _fit(
    x: np.ndarray, y: np.ndarray, signs: Sequence[int] = (), held: Sequence[int] = ()
) -> np.ndarray:
    """L2 logistic regression (eval.fit_relevance.logistic; the bias last). The features in
    `held` keep a weight of 0, and so does a weight whose sign `signs` forbids, the rest
    refitted until every weight has its sign (an active set; deterministic)."""
    free = [i for i in range(x.shape[1]) if i not in held]
    while True:
        w = np.zeros(x.shape[1] + 1)
        w[[*free, -1]] = logistic(x[:, free], y, np.ones(len(y)), L2)
        wrong = [i for i in free if signs and signs[i] * w[i] < 0]
        if not wrong:
            return w
        free.remove(min(wrong, key=lambda i: signs[i] * w[i]))


@dataclass(frozen=True)
class Fit:
    """A question model and the data it was fitted and validated on: for each split the
    features, labels (1: the question has an answer), the best item's logit and the
    standardised features."""

    model: QuestionModel
    train: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    validation: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    signs: list[int]
    held: list[int]

    @cached_property
    def probabilities(self) -> np.ndarray:
        """The model's probability of each validation question."""
        return np.array([self.model.probability(x) for x in self.validation[0]])

    def validation_auc(self) -> float:
        return _auc(self.probabilities, self.validation[1])

    def floor_at(self, empty: float) -> float:
        """The probability under which `empty` of the answerable validation questions fall."""
        answerable = np.sort(self.probabilities[self.validation[1] == 1])
        return float(answerable[int(empty * len(answerable))])

    def under(self, floor: float) -> float:
        """The share of the answerable validation questions under `floor`: `floor_at`'s
        inverse, for an operating point given as a probability (`--floor-probability`)."""
        return float(np.mean(self.probabilities[self.validation[1] == 1] < floor))

    def answered_at(self, empty: float) -> float:
        """The share of the validation questions without an answer over `floor_at(empty)`."""
        none = self.probabilities[self.validation[1] == 0]
        return float(np.mean(none >= self.floor_at(empty)))


def fit(
    questions: Sequence[Question],
    model: RelevanceModel,
    texts: Texts,
    signs: bool = False,
    locomo: bool = False,
    train_people: int | None = None,
    fit_on: str = "calibration",
) -> Fit:
    """The question model of a dump's questions (see the module), fitted on the people of
    `fit_on` ("calibration": those the embedder never trained on; "curated": its train people)
    and with `locomo` the LoCoMo conversations', or only `train_people` of those people
    (eval.datasets.curated.some_people); validated on the validation people."""
    if fit_on not in FIT_SETS:
        raise ValueError(f"fit_on {fit_on!r} is not one of {FIT_SETS}")
    kept = (fit_on, "validation", *(("locomo",) if locomo else ()))
    questions = [q for q in questions if q.dataset in kept]
    if not any(q.dataset == fit_on for q in questions):
        raise SystemExit(f"the dump has no {fit_on} people: collect it from a corpus with them")
    if train_people is not None:
        people = some_people({q.group for q in questions if q.dataset == fit_on}, train_people)
        questions = [q for q in questions if q.dataset != fit_on or q.group in people]
    rows: dict[str, tuple[list[list[float]], list[float], list[float]]]
    rows = {"fit": ([], [], []), "validation": ([], [], [])}
    for q in questions:
        if len(q.x) == 0:
            continue  # nothing to read: the pipeline returns nothing either
        f = _features(q, model, texts)
        xs, ys, best = rows["validation" if q.dataset == "validation" else "fit"]
        xs.append(f)
        ys.append(1.0 if q.y.sum() > 0 else 0.0)  # an answer among its candidates
        best.append(f[0])
    xt, yt, bt = (np.asarray(v) for v in rows["fit"])
    xv, yv, bv = (np.asarray(v) for v in rows["validation"])
    mean, scale = xt.mean(axis=0), xt.std(axis=0)
    # A feature that never varies (no answer head: its logits) reads nothing.
    constant = scale < 1e-9
    scale[constant] = 1.0
    zt, zv = (xt - mean) / scale, (xv - mean) / scale
    held_signs = [SIGNS[name] for name in QUESTION_FEATURES] if signs else []
    held = [i for i in range(len(QUESTION_FEATURES)) if constant[i]]
    w = _fit(zt, yt, held_signs, held)
    qm = QuestionModel(tuple(mean), tuple(scale), tuple(w[:-1]), float(w[-1]), 0.5, "v1")
    return Fit(qm, (xt, yt, bt, zt), (xv, yv, bv, zv), held_signs, held)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path)
    point = parser.add_mutually_exclusive_group()
    point.add_argument("--floor-empty", type=float, default=0.12)
    point.add_argument(
        "--floor-probability",
        type=float,
        default=None,
        help="the operating point as a probability, chosen through the tool on the validation "
        'people (docs/retrieval.md, "The operating point"); the fit\'s validation share under it '
        "is printed",
    )
    parser.add_argument(
        "--variant",
        default="answers",
        help="the relevance model whose logit it reads (relevance.model_file; '': the "
        "embedder's plain model, as the default preset reads it)",
    )
    parser.add_argument("--signs", action="store_true", help="hold each weight to SIGNS' sign")
    parser.add_argument(
        "--locomo",
        action="store_true",
        help="fit on the dump's LoCoMo questions too (all answerable: dialogue, and questions "
        "whose words are their answers')",
    )
    parser.add_argument(
        "--train-people",
        type=int,
        default=None,
        help="fit on this many of the --fit-on people (eval.datasets.curated.some_people): "
        "what more people buy; not with --write",
    )
    parser.add_argument(
        "--fit-on",
        choices=FIT_SETS,
        default="calibration",
        help="whose questions it is fitted on: the calibration people (the embedder never saw "
        "them) or the train people (the embedder's own)",
    )
    parser.add_argument(
        "--corpus", type=Path, default=DEFAULT_CORPUS, help="the corpus the dump was collected on"
    )
    parser.add_argument(
        "--locomo-path", type=Path, default=DEFAULT_LOCOMO, help="the LoCoMo file it read"
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    if args.write and args.train_people is not None:
        parser.error("--train-people measures; a model fitted on fewer people is not written")
    embedder = os.environ.get("PGRECALL_EMBEDDING_MODEL", DEFAULT_MODEL_ID)
    model = model_for(embedder, variant=args.variant)  # as the service reads it
    questions = load(args.dump, embedder)
    texts = candidate_texts(args.corpus, args.locomo_path)
    f = fit(questions, model, texts, args.signs, args.locomo, args.train_people, args.fit_on)
    qm, (xt, yt, bt, zt), (_, yv, bv, zv) = f.model, f.train, f.validation
    signs, held = f.signs, f.held
    pt, pv = np.array([qm.probability(x) for x in xt]), f.probabilities
    print(f"{len(yt)} {args.fit_on} questions ({yt.mean():.3f} answerable), {len(yv)} validation")
    print(f"{'':<24} {'fit AUC':>10} {'validation AUC':>15}")
    print(f"{'best item logit':<24} {_auc(bt, yt):>10.3f} {_auc(bv, yv):>15.3f}")
    print(f"{'question model':<24} {_auc(pt, yt):>10.3f} {_auc(pv, yv):>15.3f}")
    weights = zip(QUESTION_FEATURES, qm.weights, strict=True)
    print("weights: " + ", ".join(f"{n} {v:+.2f}" for n, v in weights))
    print("validation AUC with one feature left out:")
    for i, name in enumerate(QUESTION_FEATURES):
        rest = [j for j in range(len(QUESTION_FEATURES)) if j != i]
        wi = _fit(
            zt[:, rest],
            yt,
            [signs[j] for j in rest] if signs else [],
            [n for n, j in enumerate(rest) if j in held],
        )
        scores = zv[:, rest] @ wi[:-1] + wi[-1]
        print(f"  without {name:<14} {_auc(scores, yv):.3f}")
    print("validation: answerable left under the floor -> no-answer over it")
    for empty in (0.05, 0.08, 0.10, 0.12, 0.15, 0.20):
        print(f"  {empty:.2f} (P {f.floor_at(empty):.3f}) -> {f.answered_at(empty):.3f}")
    if args.floor_probability is None:
        floor, point = f.floor_at(args.floor_empty), f"--floor-empty {args.floor_empty}"
    else:
        floor, point = args.floor_probability, f"--floor-probability {args.floor_probability}"
    print(f"operating point: P {floor:.4f} (validation answerable under it {f.under(floor):.3f})")
    if args.write:
        chosen = replace(qm, floor_probability=round(floor, 4))
        path = question_file(embedder, args.variant)
        path.write_text(
            chosen.to_json(
                {
                    "embedder": embedder,
                    "relevance_model": args.variant,
                    "command": f"python -m eval.fit_question DUMP {point}"
                    f" --variant '{args.variant}'"
                    + (" --signs" if args.signs else "")
                    + (" --locomo" if args.locomo else "")
                    + f" --fit-on {args.fit_on} --write",
                    "fit_on": args.fit_on,
                    "train_questions": len(yt),
                    "validation_auc": round(_auc(pv, yv), 4),
                    "validation_best_item_auc": round(_auc(bv, yv), 4),
                }
            )
        )
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
