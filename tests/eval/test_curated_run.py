"""`python -m eval --dataset curated`: options, seeding with ages, judging by key, the gate and
its report mode, artifacts and MLflow, on the real service with a small hand-made set."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.retrieval.presets import PRESETS
from eval import curated_run
from eval.curated_run import CuratedGate
from eval.datasets.curated import load_curated
from eval.harness import running_service
from eval.runner import eval_settings, main, parse_args, run

TINY: dict[str, Any] = {
    "version": "0.0.1",
    "description": "two people for the runner's tests",
    "reference_date": "2026-11-26",
    "users": [
        {
            "id": "tiny-baker",
            "persona": "a baker",
            "memories": [
                {
                    "key": "m01",
                    "content": "I bake rye loaves every Tuesday at the market stall.",
                    "type": "fact",
                    "importance": 0.6,
                    "age_days": 30,
                },
                {
                    "key": "m02",
                    "content": "My oven is a wood-fired Alfa Forni installed last year.",
                    "type": "fact",
                    "importance": 0.5,
                    "age_days": 200,
                },
                {
                    "key": "m03",
                    "content": "Decided to sell at the Saturday farmers market.",
                    "type": "decision",
                    "importance": 0.5,
                    "age_days": 90,
                },
                {
                    "key": "m04",
                    "content": "Moved the stall to the Sunday market instead.",
                    "type": "decision",
                    "importance": 0.6,
                    "age_days": 5,
                },
                {
                    "key": "m05",
                    "content": "My brother Anton repairs bicycles in Leipzig.",
                    "type": "fact",
                    "importance": 0.4,
                    "age_days": 60,
                },
            ],
            "questions": [
                {
                    "id": "tiny-baker-q01",
                    "query": "Which oven was installed last year?",
                    "shape": "shared_word",
                    "answers": ["m02"],
                    "stale": [],
                },
                {
                    "id": "tiny-baker-q02",
                    "query": "What does my sibling fix for a living?",
                    "shape": "paraphrase",
                    "answers": ["m05"],
                    "stale": [],
                },
                {
                    "id": "tiny-baker-q03",
                    "query": "What's my accountant's phone number?",
                    "shape": "no_answer",
                    "answers": [],
                    "stale": [],
                },
                {
                    "id": "tiny-baker-q04",
                    "query": "How old is Anton?",
                    "shape": "name_trap",
                    "answers": [],
                    "stale": [],
                },
                {
                    "id": "tiny-baker-q05",
                    "query": "Which market day is my stall on now?",
                    "shape": "newer_wins",
                    "answers": ["m04"],
                    "stale": ["m03"],
                },
                {
                    "id": "tiny-baker-q06",
                    "query": "Which oven and which market stall do I have?",
                    "shape": "two_memories",
                    "answers": ["m02", "m04"],
                    "stale": [],
                },
            ],
        },
        {
            "id": "tiny-potter",
            "persona": "a potter",
            "memories": [
                {
                    "key": "m01",
                    "content": "My kiln is a Skutt electric kiln in the garage.",
                    "type": "fact",
                    "importance": 0.5,
                    "age_days": 10,
                },
                {
                    "key": "m02",
                    "content": "I glaze with a celadon I mix myself.",
                    "type": "preference",
                    "importance": 0.5,
                    "age_days": 400,
                },
            ],
            "questions": [
                {
                    "id": "tiny-potter-q01",
                    "query": "Which kiln do I fire in?",
                    "shape": "shared_word",
                    "answers": ["m01"],
                    "stale": [],
                },
            ],
        },
    ],
}


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


# --------------------------------------------------------------------------- options


def test_curated_defaults_to_the_committed_set_and_the_issues_targets() -> None:
    options = parse_args(["--dataset", "curated"])
    assert options.path == curated_run.DEFAULT_PATH
    assert options.curated_gate == CuratedGate(0.85, 0.70, 0.08, 0.30, blocking=True)
    gate = parse_args([
        "--dataset", "curated", "--gate-first", "0.5", "--gate-abstain", "0.4", "--report-only",
    ]).curated_gate  # fmt: skip
    assert (gate.present, gate.first, gate.abstain, gate.blocking) == (0.85, 0.5, 0.4, False)
    metrics = {t.metric: t for t in gate.thresholds()}
    assert metrics["paraphrase_first"].minimum == 0.5
    assert not metrics["paraphrase_first"].blocking and metrics["tool_errors"].blocking


@pytest.mark.parametrize(
    "argv",
    [
        ["--dataset", "memory", "--gate-first", "0.5"],
        ["--dataset", "memory", "--report-only"],
        ["--dataset", "curated", "--gate-present", "1.5"],
        ["--dataset", "curated", "--min-score", "0.2"],
        ["--dataset", "curated", "--samples", "x"],
    ],
)
def test_bad_curated_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_a_broken_set_is_refused_before_anything_starts(tiny: Path) -> None:
    data = json.loads(tiny.read_text(encoding="utf-8"))
    data["users"][0]["questions"][0]["answers"] = ["m99"]
    tiny.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        parse_args(["--dataset", "curated", "--path", str(tiny)])
    assert exc.value.code == 2


# --------------------------------------------------------------------------- seeding, asking


async def test_seeding_keeps_ages_and_questions_are_judged_by_key(tiny: Path) -> None:
    dataset = load_curated(tiny)
    async with running_service(eval_settings(None)) as harness:
        outcomes = await curated_run.run_questions(harness, dataset, progress=False)
        baker = outcomes[0].user_id
        listed = await harness.query(baker, "oven market stall brother", limit=10, min_score=0.0)
    now = datetime.now(UTC)
    ages = {
        item["content"]: (now - datetime.fromisoformat(item["created_at"])).days
        for item in listed["items"]
    }
    stored = {m.content: m.age_days for m in dataset.users[0].memories}
    assert ages == {content: stored[content] for content in ages} and len(ages) == 5

    assert [o.judged.question_id for o in outcomes] == [
        q.id for u in dataset.users for q in u.questions
    ]
    assert not any(o.leak for o in outcomes)
    assert outcomes[0].user_id != outcomes[-1].user_id
    by_id = {o.judged.question_id: o.judged for o in outcomes}
    # A shared word and a distinctive noun: the ranking finds it, under its own key.
    assert by_id["tiny-potter-q01"].ranking.keys[0] == "m01"
    assert by_id["tiny-baker-q01"].ranking.keys[0] == "m02"
    # Every item either endpoint returned is one of the asking user's keys.
    for o in outcomes:
        owner = next(u for u in dataset.users if u.id == o.judged.user)
        keys = {m.key for m in owner.memories}
        assert set(o.judged.tool.keys) <= keys and set(o.judged.ranking.keys) <= keys
        assert len(o.judged.ranking.keys) <= 10
        # The embedder's ranking alone: every one of the user's memories, by cosine.
        assert o.judged.cosine is not None and set(o.judged.cosine.keys) == keys
        assert list(o.judged.cosine.relevances) == sorted(o.judged.cosine.relevances)[::-1]


# --------------------------------------------------------------------------- whole runs


async def test_report_run_prints_figures_writes_artifacts_and_logs(
    tiny: Path, tmp_path: Path, mlflow_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.tracking import MlflowClient

    out = tmp_path / "out"
    options = parse_args([
        "--dataset", "curated", "--path", str(tiny), "--out", str(out), "--report-only",
        "--gate-present", "1.0", "--gate-first", "1.0", "--gate-empty", "0.0",
        "--gate-abstain", "0.0", "--tracking-uri", mlflow_uri, "--no-progress",
    ])  # fmt: skip
    code = await run(options, eval_settings(None))
    printed = capsys.readouterr().out

    assert code == 0
    assert "Curated set by shape" in printed and "name_trap (none)" in printed
    assert "paraphrase_present" in printed and "unanswerable_answered" in printed
    assert "Plain ranking cut at a relevance floor" in printed
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    checks = {c["metric"]: c for c in summary["thresholds"]}
    assert checks["tool_errors"]["status"] == "PASS"
    assert summary["overall"]["cases"] == 7
    # The no-answer questions' share is measured, whatever it is.
    assert 0.0 <= summary["overall"]["unanswerable_answered"] <= 1.0
    with (out / "curated_questions.csv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["question_id"] for r in rows][:2] == ["tiny-baker-q01", "tiny-baker-q02"]
    assert rows[0]["ranking_keys"].startswith("m02:") and rows[0]["answers"] == "m02"
    assert rows[2]["tool_present"] == "" and rows[4]["newer_first"] in {"0", "1"}
    assert rows[0]["cosine_first"] in {"0", "1"} and rows[2]["cosine_first"] == ""
    # each answer's confidence, from which confidence_auc is computed
    assert all(0.0 <= float(r["tool_confidence"]) <= 1.0 for r in rows)
    assert "cosine_paraphrase_first" in printed and "cosine first" in printed
    assert {p.name for p in out.iterdir()} >= {
        "curated_questions.csv",
        "curated_shapes.png",
        "curated_threshold_sweep.png",
        "cases.csv",
        "summary.json",
        "report.txt",
    }
    (line,) = [x for x in printed.splitlines() if x.startswith("mlflow run: ")]
    found = MlflowClient(tracking_uri=mlflow_uri).get_run(line.removeprefix("mlflow run: "))
    assert found.data.params["dataset"] == "curated"
    assert found.data.params["gate_blocking"] == "False"
    assert found.data.metrics["paraphrase_present"] == summary["overall"]["paraphrase_present"]


@pytest.mark.parametrize("report_only", [False, True])
async def test_a_ranking_that_returns_nothing_fails_the_gate_unless_reporting(
    tiny: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    report_only: bool,
) -> None:
    """Vector arm only with a floor no text reaches: the tool answers nothing."""
    broken = PRESETS["vector_only"].with_(
        name="broken_vector", vector_floor=0.95, vector_ceiling=0.99
    )
    monkeypatch.setitem(PRESETS, "broken_vector", broken)
    options = parse_args([
        "--dataset", "curated", "--path", str(tiny), "--preset", "broken_vector",
        "--out", str(tmp_path / "out"), "--no-mlflow", "--no-progress",
        *(["--report-only"] if report_only else []),
    ])  # fmt: skip
    code = await run(options, eval_settings(options.preset))
    printed = capsys.readouterr().out

    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["overall"]["answerable_empty"] == 1.0
    assert summary["overall"]["paraphrase_present"] == 0.0
    if report_only:
        assert code == 0 and "WARN    paraphrase_present" in printed
    else:
        assert code == 1
        assert "FAIL: blocking threshold(s) missed: paraphrase_present" in printed
