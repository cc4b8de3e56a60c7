"""Reports of an evaluation run: console table, per-case CSV, failures, plots, MLflow."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.metrics import (
    CaseResult,
    Summary,
    ThresholdResult,
    metric_names,
    percentile,
    score_case,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "default_tracking_uri",
    "log_to_mlflow",
    "mlflow_metric_name",
    "plot_latency_histogram",
    "plot_recall_curve",
    "render_table",
    "write_case_csv",
    "write_failures",
]

# Overall keys that are not ranking metrics, in display order.
_OPERATIONAL_KEYS = (
    "latency_p50_ms",
    "latency_p95_ms",
    "token_compliance",
    "cross_user_safety",
    "cases",
    "errors",
)
_COUNT_KEYS = frozenset({"cases", "errors"})
_PARAM_MAX_CHARS = 500
_MLFLOW_MAX_PARAMS = 100
_MLFLOW_MAX_METRICS = 1000


# --------------------------------------------------------------------------- table


def _format_value(metric: str, value: float) -> str:
    if metric in _COUNT_KEYS:
        return str(round(value))
    if metric.endswith("_ms"):
        return f"{value:.1f} ms"
    return f"{value:.4f}"


def _format_bound(metric: str, bound: float) -> str:
    if metric.endswith("_ms"):
        return f"{bound:g} ms"
    return f"{bound:.2f}"


def _rule(result: ThresholdResult) -> str:
    threshold = result.threshold
    parts = []
    if threshold.minimum is not None:
        parts.append(f">= {_format_bound(threshold.metric, threshold.minimum)}")
    if threshold.maximum is not None:
        parts.append(f"<= {_format_bound(threshold.metric, threshold.maximum)}")
    return " and ".join(parts) or "(no bound)"


def _grid(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    """Fixed-width columns: the first `left` columns left-aligned (labels), the rest right."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.ljust(width) if column < left else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return "  ".join(padded).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(row) for row in rows)]


def _ranking_keys(metrics: Mapping[str, float]) -> list[str]:
    return [key for key in metrics if key not in _OPERATIONAL_KEYS]


def render_table(summary: Summary, threshold_results: Sequence[ThresholdResult], title: str) -> str:
    """Plain-text report: overall metrics, per-category rows and threshold verdicts."""
    out = [title, "=" * len(title), "", "Overall"]
    overall_keys = [*_ranking_keys(summary.overall)]
    overall_keys += [key for key in _OPERATIONAL_KEYS if key in summary.overall]
    overall_rows = [[key, _format_value(key, summary.overall[key])] for key in overall_keys]
    out += _indent(_grid(["metric", "value"], overall_rows))

    out += ["", "By category"]
    if summary.by_category:
        first = next(iter(summary.by_category.values()))
        columns = _ranking_keys(first)
        rows = [
            [name, _format_value("cases", row.get("cases", 0.0))]
            + [_format_value(column, row.get(column, math.nan)) for column in columns]
            for name, row in summary.by_category.items()
        ]
        out += _indent(_grid(["category", "cases", *columns], rows))
    else:
        out.append("  (no cases)")

    out += ["", "Thresholds"]
    if threshold_results:
        rows = [
            [
                result.status,
                result.threshold.metric,
                _rule(result),
                _format_value(result.threshold.metric, result.value),
            ]
            for result in threshold_results
        ]
        out += _indent(_grid(["status", "metric", "rule", "value"], rows, left=3))
        out.append("")
        out.append(f"  verdict: {_verdict(threshold_results)}")
    else:
        out.append("  (none checked)")
    return "\n".join(out) + "\n"


def _indent(lines: Sequence[str]) -> list[str]:
    return [f"  {line}" for line in lines]


def _verdict(threshold_results: Sequence[ThresholdResult]) -> str:
    statuses = [result.status for result in threshold_results]
    if "FAIL" in statuses:
        return f"FAIL ({statuses.count('FAIL')} blocking threshold(s) missed)"
    if "WARN" in statuses:
        return f"PASS with {statuses.count('WARN')} warning(s)"
    return "PASS"


# --------------------------------------------------------------------------- files


def _case_record(result: CaseResult, k: int) -> dict[str, Any]:
    return {
        "case_id": result.case_id,
        "category": result.category,
        **score_case(result, k),
        "latency_ms": result.latency_ms,
        "token_count": result.token_count,
        "token_budget": result.token_budget,
        "cross_user_leak": result.cross_user_leak,
        "ranked": list(result.ranked),
        "relevant": sorted(result.relevant),
        "error": result.error,
    }


def write_case_csv(results: Sequence[CaseResult], path: Path, *, k: int = 5) -> Path:
    """One row per case: metrics, latency, tokens, ranked and relevant ids (JSON lists), error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = [
        "case_id",
        "category",
        *metric_names(k),
        "latency_ms",
        "token_count",
        "token_budget",
        "cross_user_leak",
        "ranked",
        "relevant",
        "error",
    ]
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for result in results:
            record = _case_record(result, k)
            # JSON lists keep ids containing spaces or commas unambiguous.
            record["ranked"] = json.dumps(record["ranked"])
            record["relevant"] = json.dumps(record["relevant"])
            record["error"] = record["error"] or ""
            writer.writerow(record)
    return path


def _failure_reasons(result: CaseResult, scores: Mapping[str, float], k: int) -> list[str]:
    reasons = []
    if scores[f"recall@{k}"] < 1.0:
        reasons.append(f"recall@{k} < 1")
    if scores[f"precision@{k}"] < 1.0:
        reasons.append(f"precision@{k} < 1")
    if result.cross_user_leak:
        reasons.append("cross-user leak")
    if result.error is not None:
        reasons.append("error")
    return reasons


def write_failures(results: Sequence[CaseResult], path: Path, k: int = 5) -> Path:
    """JSON list of cases with recall@k < 1, precision@k < 1, a cross-user leak or an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for result in results:
        record = _case_record(result, k)
        reasons = _failure_reasons(result, record, k)
        if not reasons:
            continue
        top = set(result.ranked[:k])
        record["reasons"] = reasons
        record["missing_at_k"] = sorted(result.relevant - top)
        record["irrelevant_at_k"] = [i for i in result.ranked[:k] if i not in result.relevant]
        failures.append(record)
    path.write_text(json.dumps(failures, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- plots


def _new_figure() -> Figure:
    # A bare Figure renders through Agg without touching pyplot's global backend
    # or figure registry, so it is safe in headless CI and leaks no figures.
    from matplotlib.figure import Figure

    return Figure(figsize=(7, 4.5), dpi=100, layout="constrained")


def _save(figure: Figure, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def plot_recall_curve(summary: Summary, path: Path) -> Path:
    """PNG of mean Recall@k for k = 1..10."""
    figure = _new_figure()
    axes = figure.add_subplot()
    depths = list(range(1, len(summary.recall_curve) + 1))
    axes.plot(depths, summary.recall_curve, marker="o")
    for depth, value in zip(depths, summary.recall_curve, strict=True):
        axes.annotate(
            f"{value:.2f}",
            (depth, value),
            textcoords="offset points",
            xytext=(0, 6),
            ha="center",
            fontsize=8,
        )
    axes.set_xlabel("k")
    axes.set_ylabel("mean Recall@k")
    axes.set_title("Recall@k")
    axes.set_xticks(depths or [1])
    axes.set_ylim(0.0, 1.05)
    axes.grid(True, alpha=0.3)
    return _save(figure, path)


def plot_latency_histogram(results: Sequence[CaseResult], path: Path) -> Path:
    """PNG histogram of per-case latency with p50 and p95 lines."""
    figure = _new_figure()
    axes = figure.add_subplot()
    latencies = [r.latency_ms for r in results]
    if latencies:
        axes.hist(latencies, bins="auto", color="tab:blue", alpha=0.75)
        for p, style in ((50, "--"), (95, ":")):
            value = percentile(latencies, p)
            axes.axvline(value, color="tab:red", linestyle=style, label=f"p{p} = {value:.1f} ms")
        axes.legend()
    else:
        axes.text(0.5, 0.5, "no cases", ha="center", va="center", transform=axes.transAxes)
    axes.set_xlabel("latency (ms)")
    axes.set_ylabel("cases")
    axes.set_title("Query latency")
    return _save(figure, path)


# --------------------------------------------------------------------------- MLflow

# MLflow accepts letters, digits, "_", "-", ".", " " and "/" in metric and param keys.
_MLFLOW_UNSAFE = re.compile(r"[^A-Za-z0-9_\-./ ]")


def mlflow_metric_name(name: str) -> str:
    """MLflow-safe key: "@" becomes "_at_", other disallowed characters become "_"."""
    return _MLFLOW_UNSAFE.sub("_", name.replace("@", "_at_"))


def default_tracking_uri() -> str:
    """MLFLOW_TRACKING_URI if set, else a sqlite store at ./mlruns/mlflow.db."""
    # MLflow 3 refuses its plain file store by default, so the fallback is sqlite.
    configured = os.environ.get("MLFLOW_TRACKING_URI")
    if configured:
        return configured
    return f"sqlite:///{(Path.cwd() / 'mlruns' / 'mlflow.db').as_posix()}"


def _sqlite_path(tracking_uri: str) -> Path | None:
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return None
    raw = tracking_uri[len(prefix) :].split("?", 1)[0]
    if not raw or raw == ":memory:":
        return None
    # "sqlite:////abs/db" leaves "/abs/db"; "sqlite:///rel/db" leaves a relative path.
    return Path(raw).resolve()


def _experiment_id(client: Any, name: str, artifact_location: str | None) -> str:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        return client.create_experiment(name, artifact_location=artifact_location)
    if experiment.lifecycle_stage == "deleted":
        # Names stay reserved by deleted experiments; reusing one needs a restore.
        client.restore_experiment(experiment.experiment_id)
    return experiment.experiment_id


def _summary_metrics(summary: Summary) -> dict[str, float]:
    metrics = {mlflow_metric_name(k): float(v) for k, v in summary.overall.items()}
    for category, row in summary.by_category.items():
        for key, value in row.items():
            metrics[mlflow_metric_name(f"cat_{category}_{key}")] = float(value)
    return metrics


def log_to_mlflow(
    *,
    experiment: str,
    run_name: str,
    params: Mapping[str, object],
    summary: Summary,
    artifacts: Sequence[Path],
    tracking_uri: str | None = None,
    extra_metrics: Mapping[str, float] | None = None,
) -> str:
    """Log params, summary metrics, recall curve and artifacts as one MLflow run; return its id."""
    # Imported lazily: mlflow is slow to import and only this function needs it.
    from mlflow.entities import Metric, Param, RunStatus
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or default_tracking_uri()
    db_path = _sqlite_path(uri)
    artifact_location = None
    if db_path is not None:
        db_path.parent.mkdir(parents=True, exist_ok=True)
        artifact_root = db_path.parent / "artifacts"
        artifact_root.mkdir(parents=True, exist_ok=True)
        artifact_location = artifact_root.as_uri()

    # An explicit client keeps the caller's global mlflow state (active run, URI) untouched.
    client = MlflowClient(tracking_uri=uri)
    experiment_id = _experiment_id(client, experiment, artifact_location)
    run_id = client.create_run(experiment_id, run_name=run_name).info.run_id
    try:
        now = int(time.time() * 1000)
        # Keyed by the sanitised name: log_batch rejects duplicate keys in one call.
        safe_params = {
            mlflow_metric_name(str(key)): str(value)[:_PARAM_MAX_CHARS]
            for key, value in params.items()
        }
        param_entities = [Param(key, value) for key, value in safe_params.items()]
        metric_entities = [
            Metric(key, value, now, 0) for key, value in _summary_metrics(summary).items()
        ]
        metric_entities += [
            Metric(mlflow_metric_name(key), float(value), now, 0)
            for key, value in (extra_metrics or {}).items()
        ]
        # The curve as one series (step = k) draws as a line in the MLflow UI.
        metric_entities += [
            Metric("recall_curve", float(value), now, depth)
            for depth, value in enumerate(summary.recall_curve, start=1)
        ]
        # MLflow caps one batch at 100 params and 1000 metrics.
        for start in range(0, len(param_entities), _MLFLOW_MAX_PARAMS):
            client.log_batch(run_id, params=param_entities[start : start + _MLFLOW_MAX_PARAMS])
        for start in range(0, len(metric_entities), _MLFLOW_MAX_METRICS):
            client.log_batch(run_id, metrics=metric_entities[start : start + _MLFLOW_MAX_METRICS])
        for artifact in artifacts:
            artifact = Path(artifact)
            if artifact.is_dir():
                client.log_artifacts(run_id, str(artifact), artifact_path=artifact.name)
            else:
                client.log_artifact(run_id, str(artifact))
    except BaseException:
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
    return run_id
