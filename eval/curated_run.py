"""The curated development set (eval/curated_dev.json) through the real service.

Each of the set's people becomes one fresh user whose memories are written through the memory
service with `created_at = now - age_days` (the set's reference date moved to the run's clock,
as the golden set does). Every question is then asked twice, as that user: through the agent
tool, POST /v1/tools/query_memory (what an agent gets, after the relevance floor and the cut),
and through the plain ranking, POST /v1/memory/query with min_score 0 and limit 10. Returned
items are judged by memory key; the figures are eval.curated_metrics'.

The gate (CuratedGate) holds the issue's acceptance targets; `--report-only` turns it into
warnings, so `make eval` can print the figures before the ranking meets them.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from tqdm import tqdm

from app.config import Settings
from app.retrieval.presets import RetrievalPreset
from app.services.embedding import Priority
from app.services.memory import MemoryInput
from eval.curated_metrics import (
    RANKING_DEPTH,
    Answer,
    Judged,
    all_present,
    by_cosine,
    cosine_first,
    figures,
    first,
    has_cosine,
    newer_first,
    present,
    shape_rows,
    threshold_sweep,
)
from eval.dataset_run import DatasetRun
from eval.datasets.curated import (
    DEFAULT_PATH,
    SHAPES,
    CuratedDataset,
    CuratedQuestion,
    CuratedUser,
    first_memories,
    load_curated,
)
from eval.golden_run import time_shift
from eval.harness import Harness, running_service
from eval.metrics import CaseResult, Threshold
from pgrecall.client import PgrecallError

__all__ = [
    "DEFAULT_PATH",
    "RANKING_PATH",
    "TOOL_PATH",
    "CuratedGate",
    "CuratedOutcome",
    "CuratedSetupError",
    "add_arguments",
    "case_result",
    "gate_from",
    "render_breakdown",
    "run_dataset",
    "run_questions",
    "write_artifacts",
]

TOOL_PATH = "/v1/tools/query_memory"
RANKING_PATH = "/v1/memory/query"
RANKING_LIMIT = 10
TOKEN_BUDGET_FOR_RANKING = 4000  # ten short memories fit easily: the budget is not measured
SWEEP = tuple(round(0.05 * i, 2) for i in range(21))  # relevance thresholds 0.00 .. 1.00


class CuratedSetupError(RuntimeError):
    """The set could not be seeded as written."""


# --------------------------------------------------------------------------- the gate


@dataclass(frozen=True)
class CuratedGate:
    """Issue 29's acceptance targets on the set, through the agent tool."""

    present: float = 0.85  # paraphrase: the right memory returned at all
    first: float = 0.70  # paraphrase: the right memory first
    empty: float = 0.08  # answerable questions the tool answered with nothing, at most
    abstain: float = 0.30  # questions nothing answers that the tool answered anyway, at most
    newer: float = 0.0  # newer_wins: the newer memory before the stale one, at least (0: off)
    auc: float = 0.0  # the tool's confidence, answerable vs no-answer questions, at least
    blocking: bool = True  # False: print WARN instead of failing the run

    def thresholds(self) -> tuple[Threshold, ...]:
        return (
            Threshold("paraphrase_present", minimum=self.present, blocking=self.blocking),
            Threshold("paraphrase_first", minimum=self.first, blocking=self.blocking),
            Threshold("answerable_empty", maximum=self.empty, blocking=self.blocking),
            Threshold("unanswerable_answered", maximum=self.abstain, blocking=self.blocking),
            *(
                [Threshold("newer_wins_newer_first", minimum=self.newer, blocking=self.blocking)]
                if self.newer > 0.0
                else []
            ),
            *(
                [Threshold("confidence_auc", minimum=self.auc, blocking=self.blocking)]
                if self.auc > 0.0
                else []
            ),
            # A run with errors or a leak measured something else: blocking even as a report.
            Threshold("tool_errors", maximum=0.0),
            Threshold("ranking_errors", maximum=0.0),
            Threshold("cross_user_safety", minimum=1.0),
        )


def _share_arg(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be within [0, 1]")
    return value


GATE_OPTIONS = (
    "gate_present",
    "gate_first",
    "gate_empty",
    "gate_abstain",
    "gate_newer",
    "gate_auc",
    "report_only",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The curated set's gate options (defaults: the issue's targets)."""
    gate = CuratedGate()
    group = parser.add_argument_group("curated set gate (--dataset curated)")
    group.add_argument(
        "--gate-present",
        type=_share_arg,
        metavar="SHARE",
        help=f"paraphrase: right memory in the tool's answer, at least (default {gate.present})",
    )
    group.add_argument(
        "--gate-first",
        type=_share_arg,
        metavar="SHARE",
        help=f"paraphrase: right memory first, at least (default {gate.first})",
    )
    group.add_argument(
        "--gate-empty",
        type=_share_arg,
        metavar="SHARE",
        help=f"answerable questions answered with nothing, at most (default {gate.empty})",
    )
    group.add_argument(
        "--gate-abstain",
        type=_share_arg,
        metavar="SHARE",
        help=f"questions with no answer that the tool answered, at most (default {gate.abstain})",
    )
    group.add_argument(
        "--gate-newer",
        type=_share_arg,
        metavar="SHARE",
        help="newer_wins: the newer memory returned before the stale one, at least (default off)",
    )
    group.add_argument(
        "--gate-auc",
        type=_share_arg,
        metavar="SHARE",
        help="AUC of the tool's confidence, answerable vs no-answer questions (default off)",
    )
    group.add_argument(
        "--report-only",
        action="store_true",
        help="missed targets warn instead of failing (errors still fail)",
    )


def gate_from(args: argparse.Namespace) -> CuratedGate:
    """The gate the command line asks for."""
    gate = CuratedGate()
    return CuratedGate(
        present=gate.present if args.gate_present is None else args.gate_present,
        first=gate.first if args.gate_first is None else args.gate_first,
        empty=gate.empty if args.gate_empty is None else args.gate_empty,
        abstain=gate.abstain if args.gate_abstain is None else args.gate_abstain,
        newer=gate.newer if args.gate_newer is None else args.gate_newer,
        auc=gate.auc if args.gate_auc is None else args.gate_auc,
        blocking=not args.report_only,
    )


def gate_options_given(args: argparse.Namespace) -> list[str]:
    """The gate options set on the command line (they apply to --dataset curated only)."""
    return [
        "--" + name.replace("_", "-")
        for name in GATE_OPTIONS
        if getattr(args, name) not in (None, False)
    ]


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Seeded:
    user: CuratedUser
    user_id: str  # the service's user id
    keys: Mapping[str, str]  # memory id -> key


@dataclass(frozen=True)
class CuratedOutcome:
    judged: Judged
    user_id: str
    token_count: int  # reported by the tool
    leak: bool  # an item of another user came back (through either endpoint)


async def seed(harness: Harness, dataset: CuratedDataset, shift: timedelta) -> list[Seeded]:
    """Write every person's memories as one fresh user, ages kept relative to now."""
    seeded = []
    for user in dataset.users:
        user_id = f"curated-{user.id}-{uuid.uuid4().hex[:12]}"
        inputs = [
            MemoryInput(
                user_id=user_id,
                content=m.content,
                type=m.type,
                importance=m.importance,
                created_at=m.created_at(dataset.reference_now) + shift,
                source="curated-set",
            )
            for m in user.memories
        ]
        ids = await harness.add_memories(inputs)
        if len(ids) != len(inputs):
            raise CuratedSetupError(
                f"{user.id}: {len(inputs) - len(ids)} memories were deduplicated away"
            )
        keys = {str(i): m.key for i, m in zip(ids, user.memories, strict=True)}
        seeded.append(Seeded(user, user_id, keys))
    return seeded


def _error_of(metadata: Mapping[str, Any]) -> str | None:
    # A fail-closed, degraded or rate-limited answer is not the retrieval being measured.
    for key in ("error", "degraded"):
        if metadata.get(key):
            return f"{key}: {metadata[key]}"
    return "rate_limited" if metadata.get("rate_limited") else None


def _answer(
    items: Sequence[Mapping[str, Any]],
    relevance: str,
    keys: Mapping[str, str],
    error: str | None,
    latency_ms: float,
) -> Answer:
    return Answer(
        keys=tuple(keys.get(str(item["id"])) for item in items),
        relevances=tuple(float(item[relevance]) for item in items),
        error=error,
        latency_ms=latency_ms,
    )


async def _tool(harness: Harness, who: Seeded, query: str) -> tuple[Answer, list[str], int]:
    started = time.perf_counter()
    try:
        body = await harness.tool_query(who.user_id, query)
    except PgrecallError as exc:
        latency = (time.perf_counter() - started) * 1000
        return Answer((), (), f"HTTP {exc.status}: {exc.detail[:200]}", latency), [], 0
    latency = (time.perf_counter() - started) * 1000
    items = body["memories"]
    answer = _answer(items, "relevance", who.keys, _error_of(body["metadata"]), latency)
    answer = replace(
        answer,
        confidence=float(body["metadata"].get("confidence") or 0.0),
        outdated=tuple(
            who.keys.get(str(i["id"])) for i in items if "possibly outdated" in i["context"]
        ),
    )
    return answer, [str(i["id"]) for i in items], int(body["metadata"]["token_count"])


async def _ranking(harness: Harness, who: Seeded, query: str) -> tuple[Answer, list[str]]:
    started = time.perf_counter()
    try:
        body = await harness.query(
            who.user_id,
            query,
            limit=RANKING_LIMIT,
            min_score=0.0,
            token_budget=TOKEN_BUDGET_FOR_RANKING,
        )
    except PgrecallError as exc:
        latency = (time.perf_counter() - started) * 1000
        return Answer((), (), f"HTTP {exc.status}: {exc.detail[:200]}", latency), []
    latency = (time.perf_counter() - started) * 1000
    items = body["items"]
    answer = _answer(items, "relevance_score", who.keys, _error_of(body), latency)
    return answer, [str(i["id"]) for i in items]


async def cosine_answers(
    harness: Harness, asked: Sequence[tuple[Seeded, CuratedQuestion]]
) -> dict[str, Answer]:
    """question id -> the service's embedder's ranking of the user's memories by cosine alone
    (`by_cosine`), computed in-process on the texts as written: the ceiling beside the tool.
    The memories are embedded again (the eval runs without the cache, and the stored vectors
    are half precision); the questions bypass the cache so the tool's timings stay its own."""
    embeddings = harness.resources.embeddings
    by_user: dict[str, tuple[Seeded, list[CuratedQuestion]]] = {}
    for who, question in asked:
        by_user.setdefault(who.user_id, (who, []))[1].append(question)
    out: dict[str, Answer] = {}
    for who, questions in by_user.values():
        memories = who.user.memories
        vectors = await embeddings.embed([m.content for m in memories], priority=Priority.BULK)
        queries = await embeddings.embed(
            [q.query for q in questions], priority=Priority.BULK, cached=False
        )
        keys = [m.key for m in memories]
        for question, vector in zip(questions, queries, strict=True):
            out[question.id] = by_cosine(vector, vectors, keys)
    return out


async def run_questions(
    harness: Harness,
    dataset: CuratedDataset,
    *,
    limit: int | None = None,
    progress: bool = True,
) -> list[CuratedOutcome]:
    """Seed the set, then ask its (first `limit`) questions one after another."""
    seeded = await seed(harness, dataset, time_shift(dataset.reference_now))
    asked = [(s, q) for s in seeded for q in s.user.questions][:limit]
    ceiling = await cosine_answers(harness, asked)
    # One untimed query first: the first request pays one-off costs (embedder session,
    # connection pool, statement preparation) that are not what latency should measure.
    await harness.tool_query(seeded[0].user_id, "warm-up")
    outcomes = []
    for who, question in tqdm(asked, desc="curated questions", unit="q", disable=not progress):
        tool, tool_ids, tokens = await _tool(harness, who, question.query)
        ranking, ranking_ids = await _ranking(harness, who, question.query)
        judged = Judged(
            question_id=question.id,
            user=who.user.id,
            shape=question.shape,
            query=question.query,
            answers=question.answers,
            stale=question.stale,
            tool=tool,
            ranking=ranking,
            cosine=ceiling.get(question.id),
        )
        # The user owns only its seeded memories: any other id is someone else's.
        leak = any(i not in who.keys for i in [*tool_ids, *ranking_ids])
        outcomes.append(CuratedOutcome(judged, who.user_id, tokens, leak))
    return outcomes


def case_result(outcome: CuratedOutcome, token_budget: int) -> CaseResult:
    """The tool's answer as a generic case (shape = category), for the house table and CSV."""
    q = outcome.judged
    return CaseResult(
        case_id=q.question_id,
        category=q.shape,
        ranked=tuple(k if k is not None else f"other:{n}" for n, k in enumerate(q.tool.keys)),
        relevant=frozenset(q.answers),
        latency_ms=q.tool.latency_ms,
        token_count=outcome.token_count,
        token_budget=token_budget,
        cross_user_leak=outcome.leak,
        error=q.tool.error,
    )


# --------------------------------------------------------------------------- reporting


def _cell(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _shape_cell(heading: str, value: float) -> str:
    if heading == "questions":
        return str(round(value))
    if heading == "returned" and not math.isnan(value):
        return f"{value:.2f}"
    return _cell(value)


def render_shapes(judged: Sequence[Judged]) -> str:
    """Per shape: what the tool returned beside the plain ranking."""
    rows = shape_rows(judged, SHAPES)
    headings = list(rows[0][1])
    title = (
        f"Curated set by shape: agent tool ({TOOL_PATH}), plain ranking "
        f"({RANKING_PATH}, min_score 0, top {RANKING_LIMIT})"
        + (" and the embedder's cosine alone" if has_cosine(judged) else "")
    )
    lines = [
        title,
        "=" * len(title),
        "  " + f"{'shape':<20}" + "".join(f" {h:>6}" for h in headings),
    ]
    for name, row in rows:
        cells = "".join(f" {_shape_cell(h, row[h]):>{max(len(h), 6)}}" for h in headings)
        lines.append(f"  {name:<20}{cells}")
    return "\n".join(lines) + "\n"


def render_sweep(judged: Sequence[Judged]) -> str:
    """Presence against abstention if the plain ranking were cut at a relevance floor."""
    title = "Plain ranking cut at a relevance floor: answerable present vs unanswerable answered"
    lines = [title, "=" * len(title), f"  {'floor':>5} {'present':>8} {'answered':>8}"]
    for t, kept, answered in threshold_sweep(judged, SWEEP[2:13]):
        lines.append(f"  {t:>5.2f} {_cell(kept):>8} {_cell(answered):>8}")
    return "\n".join(lines) + "\n"


def render_breakdown(outcomes: Sequence[CuratedOutcome]) -> str:
    judged = [o.judged for o in outcomes]
    return render_shapes(judged) + "\n" + render_sweep(judged)


def _keys_text(answer: Answer) -> str:
    return " ".join(
        f"{k or '?'}:{r:.3f}" for k, r in zip(answer.keys, answer.relevances, strict=True)
    )


CSV_COLUMNS = (
    "question_id",
    "user",
    "shape",
    "query",
    "answers",
    "stale",
    "tool_keys",
    "tool_outdated",
    "tool_present",
    "tool_first",
    "tool_empty",
    "tool_confidence",
    "newer_first",
    "both_present",
    "ranking_keys",
    "ranking_present@10",
    "ranking_first",
    "ranking_top_relevance",
    "cosine_keys",
    "cosine_first",
    "tool_latency_ms",
    "ranking_latency_ms",
    "tool_error",
    "ranking_error",
)


def _csv_row(q: Judged) -> dict[str, object]:
    def flag(value: bool) -> int:
        return int(value)

    answerable = q.answerable
    return {
        "question_id": q.question_id,
        "user": q.user,
        "shape": q.shape,
        "query": q.query,
        "answers": " ".join(q.answers),
        "stale": " ".join(q.stale),
        "tool_keys": _keys_text(q.tool),
        "tool_outdated": " ".join(k for k in q.tool.outdated if k),
        "tool_present": flag(present(q.tool.keys, q.answers)) if answerable else "",
        "tool_first": flag(first(q.tool.keys, q.answers)) if answerable else "",
        "tool_empty": flag(q.tool.empty),
        "tool_confidence": f"{q.tool.confidence:.4f}",
        "newer_first": flag(newer_first(q.tool.keys, q.answers[0], q.stale)) if q.stale else "",
        "both_present": flag(all_present(q.tool.keys, q.answers)) if len(q.answers) > 1 else "",
        "ranking_keys": _keys_text(q.ranking),
        "ranking_present@10": (
            flag(present(q.ranking.keys, q.answers, RANKING_DEPTH)) if answerable else ""
        ),
        "ranking_first": flag(first(q.ranking.keys, q.answers)) if answerable else "",
        "ranking_top_relevance": f"{max(q.ranking.relevances, default=0.0):.4f}",
        "cosine_keys": _keys_text(q.cosine) if q.cosine else "",
        "cosine_first": flag(cosine_first(q)) if q.cosine and answerable else "",
        "tool_latency_ms": f"{q.tool.latency_ms:.1f}",
        "ranking_latency_ms": f"{q.ranking.latency_ms:.1f}",
        "tool_error": q.tool.error or "",
        "ranking_error": q.ranking.error or "",
    }


def write_questions_csv(judged: Sequence[Judged], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for q in judged:
            writer.writerow(_csv_row(q))
    return path


def plot_shapes(judged: Sequence[Judged], path: Path) -> Path:
    """Grouped bars per shape: tool present/first/answered beside the ranking's present/first."""
    from matplotlib.figure import Figure

    rows = shape_rows(judged, SHAPES)
    series = ("tool present", "tool first", "tool answered", "rank present@10", "rank first")
    figure = Figure(figsize=(10, 4.8), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    width = 0.8 / len(series)
    for n, name in enumerate(series):
        values = [0.0 if math.isnan(row[name]) else row[name] for _, row in rows]
        axes.bar([i + n * width for i in range(len(rows))], values, width, label=name)
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))])
    axes.set_xticklabels([name for name, _ in rows], rotation=20, ha="right", fontsize=8)
    axes.set_ylim(0.0, 1.05)
    axes.set_ylabel("share of questions")
    axes.set_title("Curated set by shape (answered: tool returned anything)")
    figure.legend(loc="outside lower center", fontsize=8, ncols=len(series))
    axes.grid(True, axis="y", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def plot_sweep(judged: Sequence[Judged], path: Path) -> Path:
    """Presence and abstention against a relevance floor, on the ranking and on the tool."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    for tool, style in ((False, "-"), (True, "--")):
        points = threshold_sweep(judged, SWEEP, tool=tool)
        label = "tool + extra floor" if tool else "plain ranking, top 10"
        axes.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            style,
            color="tab:green",
            label=f"answerable present ({label})",
        )
        axes.plot(
            [p[0] for p in points],
            [p[2] for p in points],
            style,
            color="tab:red",
            label=f"unanswerable answered ({label})",
        )
    axes.axhline(0.85, color="tab:green", alpha=0.3, linestyle=":")
    axes.axhline(0.30, color="tab:red", alpha=0.3, linestyle=":")
    axes.set_xlabel("relevance floor")
    axes.set_ylabel("share of questions")
    axes.set_ylim(0.0, 1.05)
    axes.set_title("Presence vs abstention against a relevance floor")
    axes.legend(fontsize=7)
    axes.grid(True, alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def write_artifacts(outcomes: Sequence[CuratedOutcome], out: Path) -> list[Path]:
    """The set's own artifacts beside the house ones: per-question CSV and two plots."""
    judged = [o.judged for o in outcomes]
    return [
        write_questions_csv(judged, out / "curated_questions.csv"),
        plot_shapes(judged, out / "curated_shapes.png"),
        plot_sweep(judged, out / "curated_threshold_sweep.png"),
    ]


def run_figures(outcomes: Sequence[CuratedOutcome]) -> dict[str, float]:
    return figures([o.judged for o in outcomes])


async def run_dataset(
    settings: Settings,
    preset: RetrievalPreset,
    path: Path,
    *,
    gate: CuratedGate,
    limit: int | None = None,
    progress: bool = True,
    split: str = "",
    memories: int | None = None,
) -> DatasetRun:
    """The whole run for `python -m eval --dataset curated`: a throwaway service, the set's
    questions, the house cases (shape = category) and the set's own figures and artifacts.
    `path` may be a corpus directory; `split` keeps the people of one split; `memories` keeps
    each person's first memories only (datasets.curated.first_memories: new users' stores)."""
    dataset = load_curated(path, split)
    if memories is not None:
        dataset = first_memories(dataset, memories)
    async with running_service(settings) as harness:
        harness.use_preset(preset)
        outcomes = await run_questions(harness, dataset, limit=limit, progress=progress)
    return DatasetRun(
        name="curated",
        results=[case_result(o, settings.token_budget) for o in outcomes],
        thresholds=gate.thresholds(),
        params={
            "dataset_version": dataset.version,
            "split": split or "all",
            "first_memories": memories or "all",
            "cases": len(outcomes),
            "endpoint": TOOL_PATH,
            "token_budget": settings.token_budget,
            "min_relevance": settings.min_relevance,
            "gate_blocking": gate.blocking,
        },
        breakdown=render_breakdown(outcomes),
        figures=run_figures(outcomes),
        write_extra=lambda out: write_artifacts(outcomes, out),
    )
