"""`python -m eval.fit_question DUMP`: fit the question-level abstention model of an embedder.

DUMP is what `python -m eval.fit_relevance --curated eval/corpus --samples conv-41 conv-42
conv-43 --objective absolute --depth 20 --variant answers --dump DUMP` collected: every
candidate's relevance features and answer-head logit for the corpus's train people
("curated"), validation people ("validation") and LoCoMo's training conversations; the test
people are never in it. For each curated question, the first DEPTH candidates by the `answers`
relevance model's logit (with the head, as the pipeline orders them) give its
QUESTION_FEATURES (app/retrieval/abstention.py); the label is whether the question has an
answer. LoCoMo's questions all have one and are left out (a question-level model needs
questions without an answer).

Fit: logistic regression on the train people (standardised features, L2 1.0, Newton's
method; deterministic). Printed: the AUC of each question's probability (answerable over
none) on the train and validation people beside the best item's logit's, and, for the
validation people, the share of questions without an answer that clear the floor at each
share of answerable questions left under it, and the validation AUC of a refit without each
feature in turn. `--floor-empty SHARE` sets the operating point:
the probability under which that share of the validation people's answerable questions falls.
`--write` writes app/retrieval/question_models/<embedder>.json.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
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
from app.retrieval.relevance import RelevanceModel, load_model, model_file
from eval.curated_metrics import auc
from eval.fit_relevance import Question, load

L2 = 1.0


def _features(q: Question, model: RelevanceModel) -> list[float]:
    n = len(model.weights)
    memory = q.memories()
    logits = [model.logit(list(x[:n]), bool(m)) for x, m in zip(q.x, memory, strict=True)]
    heads = [float(x[n]) for x in q.x]
    scores = [-(lg + model.head_weight * h) for lg, h in zip(logits, heads, strict=True)]
    order = np.argsort(scores, kind="stable")[:DEPTH]
    return question_features(
        [logits[i] for i in order], [list(q.x[i][:n]) for i in order], [heads[i] for i in order]
    )


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    return auc(scores[labels == 1].tolist(), scores[labels == 0].tolist())


def _fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    design = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(design.shape[1])
    penalty = L2 * np.eye(len(w))
    penalty[-1, -1] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(design @ w)))
        gradient = design.T @ (p - y) + penalty @ w
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty
        w -= np.linalg.solve(hessian, gradient)
    return w


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument("--floor-empty", type=float, default=0.12)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    embedder = os.environ.get("PGRECALL_EMBEDDING_MODEL", DEFAULT_MODEL_ID)
    model = load_model(model_file(embedder, variant="answers"))
    questions = [q for q in load(args.dump, embedder) if q.dataset in ("curated", "validation")]
    rows = {"curated": ([], [], []), "validation": ([], [], [])}
    for q in questions:
        if len(q.x) == 0:
            continue  # nothing to read: the pipeline returns nothing either
        f = _features(q, model)
        xs, ys, best = rows[q.dataset]
        xs.append(f)
        ys.append(1.0 if q.y.sum() > 0 else 0.0)  # an answer among its candidates
        best.append(f[0])
    xt, yt, bt = (np.asarray(v) for v in rows["curated"])
    xv, yv, bv = (np.asarray(v) for v in rows["validation"])
    mean, scale = xt.mean(axis=0), xt.std(axis=0) + 1e-9
    zt, zv = (xt - mean) / scale, (xv - mean) / scale
    w = _fit(zt, yt)
    qm = QuestionModel(tuple(mean), tuple(scale), tuple(w[:-1]), float(w[-1]), 0.5, "v1")
    pt = np.array([qm.probability(x) for x in xt])
    pv = np.array([qm.probability(x) for x in xv])
    print(f"{len(yt)} train questions ({yt.mean():.3f} answerable), {len(yv)} validation")
    print(f"{'':<24} {'train AUC':>10} {'validation AUC':>15}")
    print(f"{'best item logit':<24} {_auc(bt, yt):>10.3f} {_auc(bv, yv):>15.3f}")
    print(f"{'question model':<24} {_auc(pt, yt):>10.3f} {_auc(pv, yv):>15.3f}")
    print(
        "weights: " + ", ".join(f"{n} {v:+.2f}" for n, v in zip(QUESTION_FEATURES, w, strict=False))
    )
    print("validation AUC with one feature left out:")
    for i, name in enumerate(QUESTION_FEATURES):
        rest = [j for j in range(len(QUESTION_FEATURES)) if j != i]
        wi = _fit(zt[:, rest], yt)
        scores = zv[:, rest] @ wi[:-1] + wi[-1]
        print(f"  without {name:<14} {_auc(scores, yv):.3f}")
    print("validation: answerable left under the floor -> no-answer over it")
    answerable = np.sort(pv[yv == 1])
    for empty in (0.05, 0.08, 0.10, 0.12, 0.15, 0.20):
        t = float(answerable[int(empty * len(answerable))])
        print(f"  {empty:.2f} (P {t:.3f}) -> {np.mean(pv[yv == 0] >= t):.3f}")
    floor = float(answerable[int(args.floor_empty * len(answerable))])
    print(f"operating point: P {floor:.4f} (validation answerable under it {args.floor_empty})")
    if args.write:
        chosen = replace(qm, floor_probability=round(floor, 4))
        path = question_file(embedder)
        path.write_text(
            chosen.to_json(
                {
                    "embedder": embedder,
                    "command": "python -m eval.fit_question DUMP --floor-empty "
                    f"{args.floor_empty} --write",
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
