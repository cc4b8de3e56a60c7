"""`python -m eval`: run a dataset through the real service, gate, report, log to MLflow.

Exit codes: 0 = thresholds met (warnings allowed; LoCoMo is report-only, the curated set is with
--report-only), 1 = a blocking
threshold missed, 2 = bad arguments or settings, 130 = interrupted (Ctrl-C), 143 = SIGTERM.
Either way the throwaway database is stopped and removed before the process exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from app.config import Settings, SettingsError, load_settings
from app.retrieval.presets import PRESETS, RetrievalPreset, get_preset, with_overrides
from eval import curated_run, golden_run, locomo_run
from eval.curated_run import CuratedGate
from eval.dataset_run import DatasetRun
from eval.datasets.curated import load_curated
from eval.datasets.locomo import Conversation
from eval.harness import Harness, running_service
from eval.metrics import (
    MEMORY_THRESHOLDS,
    CaseResult,
    Summary,
    Threshold,
    ThresholdResult,
    check_thresholds,
    summarise,
)
from eval.report import (
    log_to_mlflow,
    plot_latency_histogram,
    plot_recall_curve,
    render_table,
    write_case_csv,
    write_failures,
)

K = 5
REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT_ROOT = Path("eval") / "out"
# The golden gate: the spec's thresholds, plus "no errors": a fail-closed (empty) answer
# would otherwise score as a correct "nothing relevant".
MEMORY_GATE: tuple[Threshold, ...] = (*MEMORY_THRESHOLDS, Threshold("errors", maximum=0.0))
# /work/shared/datasets/locomo/README.md: same protocol, development half, 760 queries.
LOCOMO_REFERENCES: tuple[tuple[str, float, float, float, float], ...] = (
    ("BM25 (rank-bm25 Okapi, stop words removed)", 0.509, 0.559, 0.573, 0.425),
    ("dense all-MiniLM-L6-v2 cosine", 0.416, 0.471, 0.508, 0.321),
    ("equal-weight RRF (k=60) of the two", 0.476, 0.529, 0.548, 0.387),
)


@dataclass(frozen=True)
class Options:
    dataset: str
    path: Path
    preset: str | None
    out: Path | None
    mlflow: bool
    limit: int | None
    min_score: float
    tracking_uri: str | None
    progress: bool = True
    overrides: tuple[str, ...] = ()  # FIELD=VALUE assignments on the preset
    samples: tuple[str, ...] = ()  # LoCoMo: only these conversations (sample ids); () = all
    locomo_import: str = "sessions"  # LoCoMo: eval.locomo_run.IMPORTS
    curated_gate: CuratedGate = field(default_factory=CuratedGate)  # the curated set's targets
    split: str = ""  # curated: only the people of this corpus split ("" = all)
    first_memories: int | None = None  # curated: each person's first N memories (None = all)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _unit_float(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be within [0, 1]")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line of `python -m eval`."""
    parser = argparse.ArgumentParser(
        prog="python -m eval",
        description="Evaluate pgrecall's retrieval on a dataset, through the real service.",
    )
    parser.add_argument(
        "--dataset",
        choices=("memory", "curated", "locomo"),
        default="memory",
        help="memory = the golden set (gated); curated = the curated-memory "
        "development set (gated, see --report-only); locomo = LoCoMo "
        "(report only)",
    )
    parser.add_argument(
        "--path",
        type=Path,
        help="dataset file (memory default: eval/memory_golden_dataset.json, "
        "curated default: eval/curated_dev.json; curated also takes a directory of such "
        "files, e.g. the corpus eval/corpus)",
    )
    parser.add_argument(
        "--split",
        choices=("train", "calibration", "validation", "test"),
        default="",
        help="curated only: the people of this corpus split (eval/corpus: split by person)",
    )
    parser.add_argument(
        "--first-memories",
        type=_positive_int,
        metavar="N",
        help="curated only: each person's first N memories (a new user's store) and the "
        "questions they still answer, with every question nothing answers",
    )
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="retrieval preset (default: PGRECALL_RETRIEVAL_PRESET or 'default')",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one RetrievalPreset field for this run (repeatable), "
        "e.g. --set cutoff_exempt_ranks=2; logged with the preset",
    )
    parser.add_argument(
        "--out", type=Path, help="artifacts directory (default: eval/out/<dataset>-<timestamp>)"
    )
    parser.add_argument(
        "--no-mlflow", dest="mlflow", action="store_false", help="do not log the run to MLflow"
    )
    parser.add_argument(
        "--tracking-uri",
        help="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else "
        "sqlite:///./mlruns/mlflow.db)",
    )
    parser.add_argument(
        "--limit",
        type=_positive_int,
        help="only the first N cases (LoCoMo: questions), for quick runs",
    )
    parser.add_argument(
        "--min-score",
        type=_unit_float,
        help="LoCoMo only: min_score of each query (default 0.0, so the full "
        "ranking is measured, not the relevance cut-off)",
    )
    parser.add_argument(
        "--samples",
        nargs="+",
        metavar="SAMPLE_ID",
        default=[],
        help="LoCoMo only: only these conversations (e.g. conv-26 conv-42), to "
        "judge a change on a held-out part of the set",
    )
    parser.add_argument(
        "--import",
        dest="locomo_import",
        choices=locomo_run.IMPORTS,
        default="sessions",
        help="LoCoMo: one conversation per session with "
        "speakers (the documented import), or one conversation without speakers",
    )
    parser.add_argument(
        "--no-progress", dest="progress", action="store_false", help="no progress bars"
    )
    curated_run.add_arguments(parser)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Validated options; argparse exits with status 2 on bad arguments."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.dataset == "locomo" and args.path is None:
        parser.error(
            "--dataset locomo needs --path FILE (e.g. ../shared/datasets/locomo/locomo-dev.json)"
        )
    if args.dataset != "locomo" and args.samples:
        parser.error("--samples applies to --dataset locomo only")
    if args.dataset != "locomo" and args.min_score is not None:
        parser.error(
            "--min-score applies to --dataset locomo only (the golden and curated sets "
            "use the service's own min_relevance, as agents do)"
        )
    if args.dataset != "curated" and curated_run.gate_options_given(args):
        parser.error(
            f"{', '.join(curated_run.gate_options_given(args))} apply to --dataset curated only"
        )
    default = curated_run.DEFAULT_PATH if args.dataset == "curated" else golden_run.DEFAULT_PATH
    path = args.path or default
    if args.dataset != "curated" and (args.split or args.first_memories):
        parser.error("--split and --first-memories apply to --dataset curated only")
    if not (path.is_file() or (args.dataset == "curated" and path.is_dir())):
        parser.error(f"dataset file not found: {path}")
    if args.dataset == "curated":
        try:
            load_curated(path, args.split)
        except ValueError as exc:
            parser.error(f"{path}: {exc}")
    if args.samples:
        try:
            _only_samples(locomo_run.load(path), args.samples)
        except ValueError as exc:
            parser.error(f"--samples: {exc}")
    try:
        with_overrides(get_preset(args.preset or "default"), args.overrides)
    except ValueError as exc:
        parser.error(f"--set: {exc}")
    return Options(
        dataset=args.dataset,
        path=path,
        preset=args.preset,
        out=args.out,
        mlflow=args.mlflow,
        limit=args.limit,
        min_score=args.min_score if args.min_score is not None else 0.0,
        tracking_uri=args.tracking_uri,
        progress=args.progress,
        overrides=tuple(args.overrides),
        samples=tuple(args.samples),
        locomo_import=args.locomo_import,
        curated_gate=curated_run.gate_from(args),
        split=args.split,
        first_memories=args.first_memories,
    )


def eval_settings(preset: str | None) -> Settings:
    """Service settings for a run: the environment's, but always a throwaway embedded
    database, no Redis (no shared cache or rate limit to skew results) and migrations on."""
    overrides: dict[str, object] = {
        "database_url": None,
        "redis_url": None,
        "migrate_on_start": True,
    }
    if preset is not None:
        overrides["retrieval_preset"] = preset
    return load_settings(**overrides)


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def git_commit() -> str:
    """HEAD of the repository, or "unknown" outside a git checkout."""
    return _git("rev-parse", "HEAD") or "unknown"


def git_dirty() -> str:
    """Whether tracked files differ from HEAD ("True"/"False"), or "unknown"."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return "unknown" if status is None else str(bool(status))


def _file_digest(path: Path) -> str:
    """The dataset's sha256 (a directory's: of its *.json files in name order)."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def run_preset(options: Options, settings: Settings) -> RetrievalPreset:
    """The preset the run measures: the settings' named preset with the --set overrides."""
    return with_overrides(get_preset(settings.retrieval_preset), options.overrides)


def _apply_preset(harness: Harness, preset: RetrievalPreset) -> None:
    harness.use_preset(preset)


def base_params(options: Options, settings: Settings) -> dict[str, object]:
    """Parameters every run logs: preset fields, embedder, service limits, code version."""
    preset = run_preset(options, settings)
    return {
        "dataset": options.dataset,
        "dataset_path": str(options.path),
        "dataset_sha256": _file_digest(options.path),
        **preset.as_params(),
        "embedder_provider": settings.embedding_provider.value,
        "embedder_model": settings.embedding_model,
        "embedding_dimension": settings.embedding_dimension,
        "max_results": settings.max_results,
        "git_commit": git_commit(),
        "git_dirty": git_dirty(),
        "limit": options.limit if options.limit is not None else "all",
        "samples": ",".join(options.samples) or "all",
    }


# --------------------------------------------------------------------------- datasets


async def run_memory(options: Options, settings: Settings) -> DatasetRun:
    """The golden set through POST /v1/tools/query_memory, gated by MEMORY_GATE."""
    dataset = golden_run.load_golden(options.path)
    cases = dataset.cases[: options.limit] if options.limit else dataset.cases
    async with running_service(settings) as harness:
        _apply_preset(harness, run_preset(options, settings))
        outcomes = await golden_run.run_cases(
            harness, dataset, cases, token_budget=settings.token_budget, progress=options.progress
        )
    failing = [o for o in outcomes if golden_run.failure_reasons(o, K)]
    return DatasetRun(
        name="memory",
        results=[o.result for o in outcomes],
        thresholds=MEMORY_GATE,
        params={
            "dataset_version": dataset.version,
            "cases": len(cases),
            "endpoint": golden_run.TOOL_PATH,
            "token_budget": settings.token_budget,
            "min_relevance": settings.min_relevance,
        },
        breakdown=golden_run.render_breakdown(outcomes, K),
        failure_details={o.case.id: golden_run.failure_details(o, K) for o in failing},
    )


async def run_curated(options: Options, settings: Settings) -> DatasetRun:
    """The curated set through the agent tool and the plain ranking (eval.curated_run)."""
    return await curated_run.run_dataset(
        settings,
        run_preset(options, settings),
        options.path,
        gate=options.curated_gate,
        limit=options.limit,
        progress=options.progress,
        split=options.split,
        memories=options.first_memories,
    )


def _only_samples(
    conversations: Sequence[Conversation], samples: Sequence[str]
) -> list[Conversation]:
    """The conversations named by sample id (all when none are named); ValueError names the
    unknown ones and the known ones."""
    if not samples:
        return list(conversations)
    known = {c.sample_id for c in conversations}
    unknown = sorted(set(samples) - known)
    if unknown:
        raise ValueError(f"unknown LoCoMo samples {unknown}; known: {sorted(known)}")
    return [c for c in conversations if c.sample_id in samples]


def _limit_questions(
    conversations: Sequence[Conversation], limit: int | None
) -> list[Conversation]:
    """The first `limit` questions, keeping only the conversations they come from."""
    if limit is None:
        return list(conversations)
    kept = []
    for conversation in conversations:
        if limit <= 0:
            break
        kept.append(replace(conversation, questions=conversation.questions[:limit]))
        limit -= len(kept[-1].questions)
    return kept


def render_locomo_references() -> str:
    """The README's reference lines, to read beside this run's table."""
    title = "LoCoMo references (development half, 760 queries, same protocol)"
    lines = [
        title,
        "=" * len(title),
        f"  {'method':<45} {'recall@5':>8} {'hit@5':>6} {'recall@10':>9} {'mrr@10':>6}",
    ]
    for name, r5, h5, r10, mrr in LOCOMO_REFERENCES:
        lines.append(f"  {name:<45} {r5:>8.3f} {h5:>6.3f} {r10:>9.3f} {mrr:>6.3f}")
    lines.append(
        "  LoCoMo paper (Table 3), DRAGON over dialog turns, all categories: recall@5 0.567"
    )
    return "\n".join(lines) + "\n"


TOOL_METRICS = ("recall@5", "precision@5", "hit@5", "mrr@10")


def tool_metrics(summary: Summary, results: Sequence[CaseResult]) -> dict[str, float]:
    """The agent tool's figures, prefixed `tool_`, overall and per category (for MLflow)."""
    metrics = {f"tool_{m}": summary.overall[m] for m in TOOL_METRICS}
    metrics["tool_latency_p95_ms"] = summary.overall["latency_p95_ms"]
    metrics["tool_returned"] = mean_returned(results)
    for category, row in summary.by_category.items():
        metrics.update({f"tool_cat_{category}_{m}": row[m] for m in TOOL_METRICS})
    return metrics


def mean_returned(results: Sequence[CaseResult], category: str | None = None) -> float:
    """Average number of items returned (at most K), overall or in one category."""
    sizes = [min(len(r.ranked), K) for r in results if category in (None, r.category)]
    return sum(sizes) / len(sizes) if sizes else 0.0


def render_tool_path(tool: Summary, ranking: Summary, tool_results: Sequence[CaseResult]) -> str:
    """The agent tool (floor, relative cut, limit, budget) beside the plain ranking."""
    title = "Agent tool path (/v1/tools/query_memory) vs plain ranking (/v1/memory/query)"
    lines = [
        title,
        "=" * len(title),
        f"  {'category':<12} {'tool r@5':>8} {'rank r@5':>8} {'gap':>6} "
        f"{'tool p@5':>8} {'returned':>8}",
    ]
    rows = [("all", tool.overall, ranking.overall)] + [
        (c, tool.by_category[c], ranking.by_category[c]) for c in sorted(tool.by_category)
    ]
    for name, t, r in rows:
        lines.append(
            f"  {name:<12} {t['recall@5']:>8.3f} {r['recall@5']:>8.3f} "
            f"{r['recall@5'] - t['recall@5']:>6.3f} {t['precision@5']:>8.3f}"
            f" {mean_returned(tool_results, None if name == 'all' else name):>8.2f}"
        )
    lines.append(
        f"  tool latency p95 {tool.overall['latency_p95_ms']:.1f} ms, "
        f"ranking p95 {ranking.overall['latency_p95_ms']:.1f} ms"
    )
    return "\n".join(lines) + "\n"


async def run_locomo(options: Options, settings: Settings) -> DatasetRun:
    """LoCoMo through POST /v1/memory/query; report only (no blocking gate)."""
    conversations = _limit_questions(
        _only_samples(locomo_run.load(options.path), options.samples), options.limit
    )
    questions = sum(len(c.questions) for c in conversations)
    async with running_service(settings) as harness:
        _apply_preset(harness, run_preset(options, settings))
        id_to_dia = await locomo_run.load_into(harness, conversations, options.locomo_import)
        tool_results: list[CaseResult] = []
        results = await locomo_run.ask_all(
            harness,
            conversations,
            id_to_dia,
            min_score=options.min_score,
            progress=options.progress,
            tool_results=tool_results,
            tool_budget=settings.token_budget,
        )
    tool_summary = summarise(tool_results, k=K)
    return DatasetRun(
        name="locomo",
        results=results,
        thresholds=(),
        params={
            "dataset_version": _file_digest(options.path),
            "cases": questions,
            "conversations": len(conversations),
            "endpoint": "/v1/memory/query",
            "token_budget": locomo_run.TOKEN_BUDGET_FOR_RANKING,
            "min_relevance": options.min_score,
            "import": options.locomo_import,
        },
        breakdown=render_tool_path(tool_summary, summarise(results, k=K), tool_results)
        + "\n"
        + render_locomo_references(),
        extra_metrics=tool_metrics(tool_summary, tool_results),
    )


# --------------------------------------------------------------------------- reporting


def write_artifacts(
    run: DatasetRun,
    summary: Summary,
    checks: Sequence[ThresholdResult],
    table: str,
    params: dict[str, object],
    out: Path,
) -> list[Path]:
    """Per-case CSV, plots, failures, summary and the printed report, under `out`."""
    out.mkdir(parents=True, exist_ok=True)
    failures = write_failures(run.results, out / "failures.json", k=K)
    if run.failure_details:
        records = json.loads(failures.read_text(encoding="utf-8"))
        for record in records:
            record.update(run.failure_details.get(record["case_id"], {}))
        text = json.dumps(records, indent=2, ensure_ascii=False) + "\n"
        failures.write_text(text, encoding="utf-8")
    summary_path = out / "summary.json"
    summary_path.write_text(
        json.dumps(
            {
                "params": {key: str(value) for key, value in params.items()},
                "overall": summary.overall,
                "by_category": summary.by_category,
                "recall_curve": summary.recall_curve,
                "thresholds": [
                    {
                        "metric": c.threshold.metric,
                        "minimum": c.threshold.minimum,
                        "maximum": c.threshold.maximum,
                        "blocking": c.threshold.blocking,
                        "value": c.value,
                        "status": c.status,
                    }
                    for c in checks
                ],
                "passed": all(c.status != "FAIL" for c in checks),
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    report = out / "report.txt"
    report.write_text(table + "\n" + run.breakdown, encoding="utf-8")
    extra = run.write_extra(out) if run.write_extra else []
    return [
        *extra,
        write_case_csv(run.results, out / "cases.csv", k=K),
        plot_recall_curve(summary, out / "recall_at_k.png"),
        plot_latency_histogram(run.results, out / "latency_histogram.png"),
        failures,
        summary_path,
        report,
    ]


async def run(options: Options, settings: Settings) -> int:
    """Run, gate and report one dataset; returns the exit code."""
    preset = run_preset(options, settings).name
    print(
        f"eval {options.dataset}: {options.path} | preset {preset} | "
        f"token budget {settings.token_budget} | min relevance "
        f"{options.min_score if options.dataset == 'locomo' else settings.min_relevance} | "
        f"embedder {settings.embedding_model}",  # PGRECALL_EMBEDDING_MODEL/_DIMENSION choose it
        file=sys.stderr,
    )
    started = time.perf_counter()
    runners = {"memory": run_memory, "curated": run_curated, "locomo": run_locomo}
    dataset_run = await runners[options.dataset](options, settings)
    wall_s = time.perf_counter() - started

    summary = summarise(dataset_run.results, k=K)
    summary.overall.update(dataset_run.figures)
    checks = check_thresholds(summary, dataset_run.thresholds)
    title = f"pgrecall eval: {dataset_run.name} (preset {preset}, {len(dataset_run.results)} cases)"
    table = render_table(summary, checks, title)
    print()
    print(table)
    failed = [c for c in checks if c.status == "FAIL"]
    print(dataset_run.breakdown)
    print(f"wall time: {wall_s:.1f} s")

    params = {
        **base_params(options, settings),
        **dataset_run.params,
        "wall_time_s": round(wall_s, 1),
    }
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out = options.out or DEFAULT_OUT_ROOT / f"{dataset_run.name}-{stamp}"
    artifacts = write_artifacts(dataset_run, summary, checks, table, params, out)
    print(f"artifacts: {out}")
    if options.mlflow:
        run_id = log_to_mlflow(
            experiment=f"pgrecall-eval-{dataset_run.name}",
            run_name=f"{dataset_run.name}-{preset}-{out.name}",
            params=params,
            summary=summary,
            artifacts=artifacts,
            tracking_uri=options.tracking_uri,
            extra_metrics=dataset_run.extra_metrics,
        )
        print(f"mlflow run: {run_id}")
    if failed:
        names = ", ".join(c.threshold.metric for c in failed)
        print(f"FAIL: blocking threshold(s) missed: {names}")
        return 1
    return 0


async def _run_until_terminated(options: Options, settings: Settings) -> int:
    # SIGTERM (a cancelled CI job) cancels the run like Ctrl-C does, so cleanup still runs.
    task = asyncio.current_task()
    if task is not None:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals here
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run(options, settings)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `python -m eval`; returns the process exit code."""
    options = parse_args(argv)
    try:
        settings = eval_settings(options.preset)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        # asyncio.run cancels the run on Ctrl-C, so running_service stops its database.
        return asyncio.run(_run_until_terminated(options, settings))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except asyncio.CancelledError:
        print("terminated", file=sys.stderr)
        return 143
