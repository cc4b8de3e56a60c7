"""`python -m eval.learning_curve DUMP`: what more written people buy (issue 45).

Two curves over the number of the corpus's train people, both read on the validation people:

- the question model (eval/fit_question.py) fitted on `--people` of the train people of DUMP
  (eval.datasets.curated.some_people: the same people every run, a smaller count's among a
  larger's), with the same options as the shipped one (`--variant`, `--signs`, `--locomo`):
  the AUC of its probability, answerable over none, and the share of questions without an
  answer that clear the floor leaving 5% / 10% of the answerable ones under it;
- the embedder, from the runs `python scripts/train_embedder.py --train-people N --out DIR`
  wrote (`--runs DIR ...`; each DIR's report.json): the kept epoch's validation figures of the
  embedder's cosine alone (the base model's as 0 people).

The DUMP's features come from the shipped embedder (trained on all the train people), so the
first curve holds the embedder fixed and varies the question model's data alone. It fits on
train people, whose cosines the embedder has learnt; `--calibration N ...` draws it again fitted
on N of the calibration people, whom the embedder never saw, as the shipped question model is
(docs/retrieval.md, "Calibration people"). `--plot PNG` draws them all. Deterministic;
seconds for the question model's curves (the runs take minutes each to train).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path

from app.embedding_models import DEFAULT_MODEL_ID
from app.retrieval.relevance import model_for
from eval.fit_question import candidate_texts, fit
from eval.fit_relevance import load

# The embedder's validation figures a curve shows (report.json's names), and their labels.
EMBEDDER_FIGURES = {
    "paraphrase_first": "paraphrase first",
    "present@5": "present in 5",
    "auc_best_cosine": "AUC of the best cosine",
    "locomo_recall@5": "LoCoMo held-out R@5",
}
EMPTY = (0.05, 0.10)


def question_curve(
    dump: Path,
    people: Sequence[int],
    variant: str,
    signs: bool,
    locomo: bool,
    fit_on: str = "curated",
) -> list[dict[str, float]]:
    embedder = os.environ.get("PGRECALL_EMBEDDING_MODEL", DEFAULT_MODEL_ID)
    model = model_for(embedder, variant=variant)
    questions = load(dump, embedder)
    texts = candidate_texts()
    rows = []
    for n in people:
        f = fit(questions, model, texts, signs, locomo, n, fit_on=fit_on)
        row = {"people": float(n), "questions": float(len(f.train[1]))}
        row["auc"] = f.validation_auc()
        row |= {f"answered@{e:.2f}": f.answered_at(e) for e in EMPTY}
        rows.append(row)
    return rows


def embedder_curve(runs: Sequence[Path]) -> list[dict[str, float]]:
    """One row per run (people, the kept epoch's figures), and the base model's (0 people)
    from the first run."""
    rows: list[dict[str, float]] = []
    for run in runs:
        report = json.loads((run / "report.json").read_text())
        people = report["train_people"]
        epochs = {e["epoch"]: e for e in report["validation"]}
        if not rows:
            rows.append({"people": 0.0, **_figures(epochs[0])})
        rows.append({"people": float(people), **_figures(epochs[report["kept_epoch"]])})
    return sorted(rows, key=lambda r: r["people"])


def _figures(epoch: dict[str, float]) -> dict[str, float]:
    return {k: float(epoch[k]) for k in EMBEDDER_FIGURES}


def plot(
    questions: list[dict[str, float]],
    embedder: list[dict[str, float]],
    path: Path,
    calibrated: Sequence[dict[str, float]] = (),
) -> Path:
    from matplotlib.figure import Figure

    panels = 2 if embedder else 1
    figure = Figure(figsize=(5.5 * panels, 4.2), dpi=100, layout="constrained")
    axes = figure.subplots(1, panels, squeeze=False)[0]
    people = [r["people"] for r in questions]
    axes[0].plot(people, [r["auc"] for r in questions], "o-", label="AUC, answerable over none")
    for e in EMPTY:
        axes[0].plot(
            people,
            [r[f"answered@{e:.2f}"] for r in questions],
            "s--",
            label=f"no-answer answered, {e:.0%} of answerable left empty",
        )
    if calibrated:
        axes[0].plot(
            [r["people"] for r in calibrated],
            [r["auc"] for r in calibrated],
            "D-",
            label="AUC, fitted on calibration people instead",
        )
        axes[0].plot(
            [r["people"] for r in calibrated],
            [r[f"answered@{EMPTY[-1]:.2f}"] for r in calibrated],
            "D:",
            label=f"no-answer answered at {EMPTY[-1]:.0%}, calibration people",
        )
    axes[0].set_title("Question model (embedder fixed)")
    if embedder:
        people = [r["people"] for r in embedder]
        for key, label in EMBEDDER_FIGURES.items():
            axes[1].plot(people, [r[key] for r in embedder], "o-", label=label)
        axes[1].set_title("Embedder fine-tuned on N people (cosine alone)")
    for ax in axes:
        ax.set_xlabel("people fitted on (validation people: 8)")
        ax.set_ylim(0.0, 1.0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="center right" if ax is axes[0] else "lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def _print_questions(title: str, rows: Sequence[dict[str, float]]) -> None:
    print(title)
    print(
        f"{'people':>6} {'questions':>9} {'AUC':>6} "
        + " ".join(f"{'ans@' + f'{e:.2f}':>9}" for e in EMPTY)
    )
    for r in rows:
        print(
            f"{r['people']:>6.0f} {r['questions']:>9.0f} {r['auc']:>6.3f} "
            + " ".join(f"{r[f'answered@{e:.2f}']:>9.3f}" for e in EMPTY)
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dump", type=Path)
    parser.add_argument(
        "--people", type=int, nargs="+", default=[3, 6, 12, 24, 48, 80, 112, 144]
    )
    parser.add_argument("--variant", default="", help="as eval.fit_question's (default '')")
    parser.add_argument("--signs", action="store_true")
    parser.add_argument("--locomo", action="store_true")
    parser.add_argument(
        "--calibration",
        type=int,
        nargs="*",
        default=[],
        help="also fit on this many of the calibration people (the embedder never saw them)",
    )
    parser.add_argument("--runs", type=Path, nargs="*", default=[], help="train_embedder --out")
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    questions = question_curve(args.dump, args.people, args.variant, args.signs, args.locomo)
    _print_questions("question model, validation people:", questions)
    calibrated = question_curve(
        args.dump, args.calibration, args.variant, args.signs, args.locomo, "calibration"
    )
    if calibrated:
        _print_questions("fitted on the calibration people instead:", calibrated)
    embedder = embedder_curve(args.runs)
    if embedder:
        print("embedder, validation people (its cosine alone):")
        print(f"{'people':>6} " + " ".join(f"{k:>16}" for k in EMBEDDER_FIGURES))
        for r in embedder:
            print(f"{r['people']:>6.0f} " + " ".join(f"{r[k]:>16.3f}" for k in EMBEDDER_FIGURES))
    if args.plot is not None:
        print(f"plot: {plot(questions, embedder, args.plot, calibrated)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
