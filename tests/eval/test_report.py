"""Reports: text table, CSV, failures JSON, PNG plots and MLflow logging into sqlite."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from eval.metrics import (
    MEMORY_THRESHOLDS,
    CaseResult,
    Summary,
    check_thresholds,
    summarise,
)
from eval.report import (
    default_tracking_uri,
    log_to_mlflow,
    mlflow_metric_name,
    plot_latency_histogram,
    plot_recall_curve,
    render_table,
    write_case_csv,
    write_failures,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _results() -> list[CaseResult]:
    return [
        CaseResult("conv-1:0", "multi-hop", ("D1:1", "D1:2"), frozenset({"D1:1"}), 12.0, 80, 100),
        CaseResult(
            "conv-1:1", "temporal", ("D2:1", "D2:2"), frozenset({"D2:2", "D3:1"}), 40.0, 90, 100
        ),
        CaseResult(
            "conv-1:2",
            "single-hop",
            (),
            frozenset({"D4:4"}),
            300.0,
            0,
            100,
            cross_user_leak=True,
            error="HTTP 500",
        ),
        CaseResult("conv-1:3", "single-hop", ("D5:5",), frozenset({"D5:5"}), 20.0, 50, 100),
    ]


@pytest.fixture
def summary() -> Summary:
    return summarise(_results())


# --------------------------------------------------------------------------- table


def test_render_table_contents(summary: Summary) -> None:
    text = render_table(summary, check_thresholds(summary, MEMORY_THRESHOLDS), "LoCoMo dev")
    assert text.startswith("LoCoMo dev\n")
    for category in ("multi-hop", "temporal", "single-hop"):
        assert category in text
    for column in ("cases", "recall@5", "precision@5", "hit@5", "mrr@10", "ndcg@5"):
        assert column in text
    for metric in ("latency_p95_ms", "token_compliance", "cross_user_safety"):
        assert metric in text
    assert "FAIL" in text  # recall@5 0.625 < 0.80, a leak
    assert "PASS" in text  # token compliance 1.0
    assert "WARN" in text  # latency p95 over 200 ms is a warning only
    assert "verdict: FAIL" in text
    assert "\x1b" not in text  # no colour codes in CI logs


def test_render_table_category_row(summary: Summary) -> None:
    text = render_table(summary, [], "t")
    (row,) = [line for line in text.splitlines() if line.strip().startswith("single-hop")]
    # 2 cases; recall@5 mean of 0 and 1
    assert row.split()[1:3] == ["2", "0.5000"]
    assert "(none checked)" in text


def test_render_table_all_pass() -> None:
    perfect = CaseResult("c", "x", ("a",), frozenset({"a"}), 5.0, 1, 10)
    summary = summarise([perfect])
    text = render_table(summary, check_thresholds(summary, MEMORY_THRESHOLDS), "ok")
    assert "FAIL" not in text
    assert "WARN" not in text
    assert "verdict: PASS" in text


def test_render_table_empty_run() -> None:
    summary = summarise([])
    text = render_table(summary, check_thresholds(summary, MEMORY_THRESHOLDS), "empty")
    assert "(no cases)" in text
    assert "verdict: FAIL" in text


# --------------------------------------------------------------------------- files


def test_write_case_csv(tmp_path: Path) -> None:
    path = write_case_csv(_results(), tmp_path / "out" / "cases.csv")
    assert path == tmp_path / "out" / "cases.csv"
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["case_id"] for r in rows] == ["conv-1:0", "conv-1:1", "conv-1:2", "conv-1:3"]
    first, second, errored, _ = rows
    assert float(first["recall@5"]) == 1.0
    assert float(first["precision@5"]) == 0.5
    assert float(second["recall@5"]) == 0.5
    assert json.loads(second["ranked"]) == ["D2:1", "D2:2"]
    assert json.loads(second["relevant"]) == ["D2:2", "D3:1"]
    assert float(second["latency_ms"]) == 40.0
    assert second["token_count"] == "90"
    assert second["error"] == ""
    assert errored["error"] == "HTTP 500"
    assert errored["cross_user_leak"] == "True"
    assert {"mrr@10", "ndcg@5", "recall@10", "token_budget"} <= set(first)


def test_write_failures(tmp_path: Path) -> None:
    path = write_failures(_results(), tmp_path / "failures.json")
    failures = json.loads(path.read_text(encoding="utf-8"))
    by_id = {f["case_id"]: f for f in failures}
    # conv-1:3 is perfect; conv-1:0 returned an irrelevant second item.
    assert list(by_id) == ["conv-1:0", "conv-1:1", "conv-1:2"]
    assert by_id["conv-1:0"]["reasons"] == ["precision@5 < 1"]
    assert by_id["conv-1:0"]["irrelevant_at_k"] == ["D1:2"]
    assert by_id["conv-1:1"]["missing_at_k"] == ["D3:1"]
    assert by_id["conv-1:2"]["reasons"] == [
        "recall@5 < 1",
        "precision@5 < 1",
        "cross-user leak",
        "error",
    ]
    assert by_id["conv-1:2"]["error"] == "HTTP 500"


def test_plots_are_png(tmp_path: Path, summary: Summary) -> None:
    curve = plot_recall_curve(summary, tmp_path / "plots" / "recall.png")
    histogram = plot_latency_histogram(_results(), tmp_path / "plots" / "latency.png")
    for path in (curve, histogram):
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert len(data) > 1000


def test_plots_of_an_empty_run(tmp_path: Path) -> None:
    curve = plot_recall_curve(summarise([]), tmp_path / "recall.png")
    histogram = plot_latency_histogram([], tmp_path / "latency.png")
    assert curve.read_bytes().startswith(PNG_MAGIC)
    assert histogram.read_bytes().startswith(PNG_MAGIC)


# --------------------------------------------------------------------------- MLflow


def test_mlflow_metric_name() -> None:
    assert mlflow_metric_name("recall@5") == "recall_at_5"
    assert mlflow_metric_name("cat_multi-hop_mrr@10") == "cat_multi-hop_mrr_at_10"
    assert mlflow_metric_name("odd:name!") == "odd_name_"


def test_default_tracking_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert default_tracking_uri() == f"sqlite:///{tmp_path.resolve()}/mlruns/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.internal:5000")
    assert default_tracking_uri() == "http://mlflow.internal:5000"


def _artifacts(tmp_path: Path, summary: Summary) -> list[Path]:
    out = tmp_path / "report"
    return [
        write_case_csv(_results(), out / "cases.csv"),
        write_failures(_results(), out / "failures.json"),
        plot_recall_curve(summary, out / "recall_curve.png"),
    ]


def test_log_to_mlflow_round_trip(tmp_path: Path, summary: Summary) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/store/mlflow.db"
    params = {"dataset": "locomo-dev", "k": 5, "long": "x" * 800, "weights": {"bm25": 0.7}}
    run_id = log_to_mlflow(
        experiment="pgrecall-eval",
        run_name="unit-test",
        params=params,
        summary=summary,
        artifacts=_artifacts(tmp_path, summary),
        tracking_uri=uri,
    )

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "unit-test"
    assert run.data.params["dataset"] == "locomo-dev"
    assert run.data.params["k"] == "5"
    assert run.data.params["long"] == "x" * 500
    assert run.data.params["weights"] == "{'bm25': 0.7}"
    metrics = run.data.metrics
    assert metrics["recall_at_5"] == pytest.approx(summary.overall["recall@5"])
    assert metrics["mrr_at_10"] == pytest.approx(summary.overall["mrr@10"])
    assert metrics["latency_p95_ms"] == pytest.approx(summary.overall["latency_p95_ms"])
    assert metrics["cases"] == 4
    assert metrics["cat_single-hop_recall_at_5"] == pytest.approx(0.5)
    assert metrics["cat_temporal_cases"] == 1
    assert not any("@" in name for name in metrics)
    curve = client.get_metric_history(run_id, "recall_curve")
    assert [m.step for m in sorted(curve, key=lambda m: m.step)] == list(range(1, 11))

    names = {a.path for a in client.list_artifacts(run_id)}
    assert names == {"cases.csv", "failures.json", "recall_curve.png"}
    experiment = client.get_experiment(run.info.experiment_id)
    assert experiment.artifact_location == (tmp_path / "store" / "artifacts").as_uri()
    assert (tmp_path / "store" / "artifacts" / run_id / "artifacts" / "cases.csv").is_file()

    # A second run reuses the experiment.
    again = log_to_mlflow(
        experiment="pgrecall-eval",
        run_name="again",
        params={},
        summary=summary,
        artifacts=[],
        tracking_uri=uri,
    )
    assert client.get_run(again).info.experiment_id == run.info.experiment_id


def test_log_to_mlflow_default_store_in_cwd(
    tmp_path: Path, summary: Summary, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    plot = plot_latency_histogram(_results(), tmp_path / "latency.png")
    run_id = log_to_mlflow(
        experiment="default-store",
        run_name="cwd",
        params={"k": 5},
        summary=summary,
        artifacts=[plot],
    )
    assert (tmp_path / "mlruns" / "mlflow.db").is_file()
    assert (tmp_path / "mlruns" / "artifacts" / run_id / "artifacts" / "latency.png").is_file()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    assert client.get_run(run_id).data.params == {"k": "5"}
