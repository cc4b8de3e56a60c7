"""The memory golden set through the agent tool: seed each case in fresh users, query, score.

Every case gets its own user (and its other users their own), so cases cannot see each other
and the whole run shares one database. Returned memories are matched to the case's expected
contents; anything returned that the case's user does not own is a cross-user leak.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tqdm import tqdm

from app.domain import space_owner
from app.retrieval.budget import TRUNCATION_MARK, count_tokens
from app.services.memory import MemoryInput
from eval.datasets.golden import (
    DEFAULT_PATH,
    GoldenCase,
    GoldenDataset,
    GoldenMemory,
    GoldenMessage,
    GoldenToolCall,
    load_golden,
)
from eval.harness import Harness
from eval.metrics import CaseResult
from pgrecall.client import PgrecallError, TimeFilters

__all__ = [
    "DEFAULT_PATH",
    "TOOL_PATH",
    "GoldenOutcome",
    "GoldenSetupError",
    "GoldenToolCall",
    "Returned",
    "apply_tool_calls",
    "expected_key",
    "failure_details",
    "failure_reasons",
    "judge",
    "load_golden",
    "match_expected",
    "ranked_keys",
    "recount_tokens",
    "render_breakdown",
    "run_case",
    "run_cases",
    "seed_user",
    "time_shift",
]

TOOL_PATH = "/v1/tools/query_memory"


class GoldenSetupError(RuntimeError):
    """A case could not be seeded as written (a dataset or write-path defect)."""


# --------------------------------------------------------------------------- matching (pure)


@dataclass(frozen=True)
class Returned:
    """One item the tool returned, as the eval judged it."""

    id: str
    content: str
    source: str
    relevance: float
    match: int | None  # index into the case's expected contents
    foreign: bool  # not owned by the case's user


@dataclass(frozen=True)
class GoldenOutcome:
    case: GoldenCase
    user_id: str  # the case's fresh user, for re-asking while debugging
    result: CaseResult
    returned: tuple[Returned, ...]

    def missing(self, k: int = 5) -> list[str]:
        """Expected contents not found in the top k."""
        found = {r.match for r in self.returned[:k] if r.match is not None}
        return [text for i, text in enumerate(self.case.expected) if i not in found]

    def unexpected(self) -> list[Returned]:
        """Returned items that are not expected (or belong to someone else)."""
        return [r for r in self.returned if r.match is None]


def expected_key(index: int) -> str:
    return f"e{index}"


def match_expected(content: str, expected: Sequence[str], taken: set[int]) -> int | None:
    """Index of the expected text this content is (or, cut by the budget, starts); unused first."""
    prefix = content[: -len(TRUNCATION_MARK)] if content.endswith(TRUNCATION_MARK) else None
    candidates = [
        i
        for i, text in enumerate(expected)
        if text == content or (prefix and text.startswith(prefix))
    ]
    fresh = [i for i in candidates if i not in taken]
    if fresh:
        return fresh[0]
    # A second copy of an already-matched text still names it, so metrics count it once.
    return candidates[0] if candidates else None


def judge(
    items: Sequence[Mapping[str, Any]],
    expected: Sequence[str],
    own_ids: set[str],
    own_contents: set[str],
    foreign_contents: set[str],
) -> tuple[Returned, ...]:
    """Label each returned item: which expected text it is, and whether it leaked across users."""
    taken: set[int] = set()
    judged: list[Returned] = []
    for item in items:
        item_id, content = str(item["id"]), str(item["content"])
        # Every id a case's user may see was created for that user in this run; anything else
        # (another user of this case or of any other case) is a leak.
        foreign = item_id not in own_ids or (
            content in foreign_contents and content not in own_contents
        )
        match = None if foreign else match_expected(content, expected, taken)
        if match is not None:
            taken.add(match)
        judged.append(
            Returned(
                item_id,
                content,
                str(item.get("source", "")),
                float(item.get("relevance", 0.0)),
                match,
                foreign,
            )
        )
    return tuple(judged)


def ranked_keys(returned: Sequence[Returned]) -> tuple[str, ...]:
    """Ranking ids for the metrics: e<i> for expected texts, other:/foreign:<id> otherwise."""
    keys = []
    for r in returned:
        if r.match is not None:
            keys.append(expected_key(r.match))
        else:
            keys.append(("foreign:" if r.foreign else "other:") + r.id)
    return tuple(keys)


def recount_tokens(returned: Sequence[Returned]) -> int:
    """cl100k tokens of the returned contents, each counted alone (as the service packs them)."""
    return sum(count_tokens(r.content) for r in returned)


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Seeded:
    """What one user was given: memory ids in setup order, message ids, all contents."""

    memory_ids: tuple[str, ...]
    message_ids: tuple[str, ...]
    contents: frozenset[str]

    @property
    def ids(self) -> set[str]:
        return {*self.memory_ids, *self.message_ids}


def _shifted(value: datetime | None, shift: timedelta) -> datetime | None:
    return None if value is None else value + shift


async def seed_user(
    harness: Harness,
    user_id: str,
    memories: Sequence[GoldenMemory],
    messages: Sequence[GoldenMessage],
    *,
    shift: timedelta,
    label: str,
) -> Seeded:
    """Store a user's memories (timestamps shifted, deleted ones soft-deleted) and messages."""
    inputs = []
    for m in memories:
        extra: dict[str, Any] = {} if m.importance is None else {"importance": m.importance}
        inputs.append(
            MemoryInput(
                user_id=user_id,
                content=m.content,
                type=m.type,
                source="golden-set",
                created_at=_shifted(m.created_at, shift),
                expires_at=_shifted(m.expires_at, shift),
                **extra,
            )
        )
    ids = await harness.add_memories(inputs)
    if len(ids) != len(inputs):
        raise GoldenSetupError(f"{label}: {len(inputs) - len(ids)} memories were deduplicated away")
    for memory, item_id in zip(memories, ids, strict=True):
        if memory.deleted:
            await harness.set_deleted(user_id, item_id)
    message_ids: list[str] = []
    if messages:
        rows = await harness.add_conversation(user_id, [m.body() for m in messages], title=label)
        message_ids = [str(row["id"]) for row in rows]
    return Seeded(
        memory_ids=tuple(str(i) for i in ids),
        message_ids=tuple(message_ids),
        contents=frozenset(m.content for m in [*memories, *messages]),
    )


def _resolve(value: Any, ids_by_content: Mapping[str, str], label: str) -> Any:
    if isinstance(value, dict) and set(value) == {"ref"}:
        if value["ref"] not in ids_by_content:
            raise GoldenSetupError(f"{label}: no own item with content {value['ref'][:60]!r}")
        return ids_by_content[value["ref"]]
    return value


async def apply_tool_calls(
    harness: Harness,
    user_id: str,
    calls: Sequence[GoldenToolCall],
    own: Seeded,
    contents: Mapping[str, str],
    *,
    label: str,
) -> Seeded:
    """Make the case's agent writes through the HTTP tools; returns what the user now owns."""
    ids_by_content = dict(contents)
    memory_ids, owned = list(own.memory_ids), set(own.contents)
    for n, call in enumerate(calls):
        args = {k: _resolve(v, ids_by_content, label) for k, v in call.args.items()}
        try:
            body = await harness.tool_call(user_id, call.tool, args)
        except PgrecallError as exc:
            raise GoldenSetupError(
                f"{label}: tool call {n} ({call.tool}) answered {exc.status}: "
                f"{exc.error}: {exc.detail[:200]}"
            ) from exc
        if call.expect_action is not None and body.get("action") != call.expect_action:
            raise GoldenSetupError(
                f"{label}: tool call {n} ({call.tool}) did {body.get('action')!r}, "
                f"the case expects {call.expect_action!r}"
            )
        memory = body.get("memory")
        if memory:
            memory_ids.append(str(memory["id"]))
            owned.add(memory["content"])
            ids_by_content[memory["content"]] = str(memory["id"])
    return Seeded(tuple(memory_ids), own.message_ids, frozenset(owned))


def _new_user(case_id: str, role: str) -> str:
    return f"golden-{case_id}-{role}-{uuid.uuid4().hex[:12]}"


def _error_of(body: Mapping[str, Any]) -> str | None:
    metadata = body.get("metadata", {})
    # A fail-closed, degraded or rate-limited answer is not the retrieval being measured.
    for key in ("error", "degraded"):
        if metadata.get(key):
            return f"{key}: {metadata[key]}"
    if metadata.get("rate_limited"):
        return "rate_limited"
    return None


async def run_case(
    harness: Harness, case: GoldenCase, *, shift: timedelta, token_budget: int
) -> GoldenOutcome:
    """Seed one case in fresh users, ask the agent tool as the case's user, judge the answer."""
    user_id = _new_user(case.id, "user")
    own = await seed_user(
        harness, user_id, case.memories, case.messages, shift=shift, label=case.id
    )
    foreign_contents: set[str] = set()
    for n, other in enumerate(case.other_users):
        seeded = await seed_user(
            harness,
            _new_user(case.id, f"other{n}"),
            other.memories,
            other.messages,
            shift=shift,
            label=f"{case.id} other user {n}",
        )
        foreign_contents |= seeded.contents
    if case.tool_calls:
        setup = [*case.memories, *case.messages]
        setup_ids = [*own.memory_ids, *own.message_ids]
        contents = {item.content: i for item, i in zip(setup, setup_ids, strict=True)}
        own = await apply_tool_calls(
            harness, user_id, case.tool_calls, own, contents, label=case.id
        )

    for n, conversation in enumerate(case.conversations):
        rows = await harness.add_conversation(
            user_id,
            [m.body() for m in conversation],
            title=f"{case.id} conversation {n}",
        )
        own = Seeded(
            own.memory_ids,
            own.message_ids + tuple(str(row["id"]) for row in rows),
            own.contents | {m.content for m in conversation},
        )

    # Shared spaces (issue 43): a readable space's memories count as the user's for the
    # judgement (the query names the space); an unreadable one's are foreign (a leak).
    spaces: list[str] = []
    for space in case.spaces:
        name = _space_name(case.id, space.name)
        members = {user_id: space.access} if space.access else {}
        await harness.add_space(name, members)
        seeded = await seed_user(
            harness,
            space_owner(name),
            space.memories,
            (),
            shift=shift,
            label=f"{case.id} space {space.name}",
        )
        if space.access:
            own = Seeded(
                own.memory_ids + seeded.memory_ids, own.message_ids, own.contents | seeded.contents
            )
        else:
            foreign_contents |= seeded.contents
        spaces.append(name)

    times = TimeFilters(**{name: stamp + shift for name, stamp in case.time_filter.items()})
    started = time.perf_counter()
    error: str | None
    try:
        payload = await harness.tool_query(
            user_id,
            case.query,
            types=list(case.types) if case.types else None,
            times=times,
            spaces=spaces,
        )
    except PgrecallError as exc:
        items, error, reported_tokens = [], f"HTTP {exc.status}: {exc.detail[:200]}", 0
    else:
        items, error = payload["memories"], _error_of(payload)
        reported_tokens = int(payload["metadata"]["token_count"])
    latency_ms = (time.perf_counter() - started) * 1000
    returned = judge(items, case.expected, own.ids, set(own.contents), foreign_contents)
    result = CaseResult(
        case_id=case.id,
        category=case.category,
        ranked=ranked_keys(returned),
        relevant=frozenset(expected_key(i) for i in range(len(case.expected))),
        latency_ms=latency_ms,
        # Trust neither count alone: the service's figure and an independent recount.
        token_count=max(reported_tokens, recount_tokens(returned)),
        token_budget=token_budget,
        cross_user_leak=any(r.foreign for r in returned),
        error=error,
    )
    return GoldenOutcome(case, user_id, result, returned)


def _space_name(case_id: str, name: str) -> str:
    """A space id of its own for each run of a case (lowercase, at most 64 characters)."""
    raw = f"{name}-{uuid.uuid4().hex[:8]}-{case_id}".lower()
    return re.sub(r"[^a-z0-9_.-]", "-", raw)[:64]


def time_shift(reference: datetime, now: datetime | None = None) -> timedelta:
    """Offset that moves the dataset's reference date to now, keeping ages and expiries relative."""
    return (now or datetime.now(UTC)) - reference


async def run_cases(
    harness: Harness,
    dataset: GoldenDataset,
    cases: Sequence[GoldenCase],
    *,
    token_budget: int,
    progress: bool = True,
) -> list[GoldenOutcome]:
    """Run the cases one after another (so latencies are not contended), with a progress bar."""
    shift = time_shift(dataset.reference)
    # One untimed query first: the first request pays one-off costs (embedder session,
    # connection pool, statement preparation) that are not what p95 should measure.
    await harness.tool_query(_new_user("warmup", "user"), "warm-up")
    outcomes = []
    for case in tqdm(cases, desc="golden cases", unit="case", disable=not progress):
        outcomes.append(await run_case(harness, case, shift=shift, token_budget=token_budget))
    return outcomes


# --------------------------------------------------------------------------- breakdown

_SHOWN_CHARS = 110


def _short(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SHOWN_CHARS else flat[: _SHOWN_CHARS - 1] + "…"


def failure_reasons(outcome: GoldenOutcome, k: int = 5) -> list[str]:
    """Why a case counts as failing; empty when it was answered perfectly."""
    r = outcome.result
    reasons = []
    if outcome.missing(k):
        reasons.append(f"missing expected in top {k}")
    if any(x.match is None for x in outcome.returned[:k]):
        reasons.append(f"unexpected in top {k}")
    if r.cross_user_leak:
        reasons.append("CROSS-USER LEAK")
    if r.token_count > r.token_budget:
        reasons.append(f"over token budget ({r.token_count} > {r.token_budget})")
    if r.error is not None:
        reasons.append(f"error: {r.error}")
    return reasons


def failure_details(outcome: GoldenOutcome, k: int = 5) -> dict[str, Any]:
    """The failing case in words, for the failures artifact."""
    return {
        "user_id": outcome.user_id,
        "query": outcome.case.query,
        "types": list(outcome.case.types or []),
        "rubric": outcome.case.rubric,
        "missing_expected": outcome.missing(k),
        "unexpected_returned": [
            {
                "rank": outcome.returned.index(x) + 1,
                "content": x.content,
                "source": x.source,
                "relevance": x.relevance,
                "foreign": x.foreign,
            }
            for x in outcome.unexpected()
        ],
        "failure_reasons": failure_reasons(outcome, k),
    }


def render_breakdown(outcomes: Sequence[GoldenOutcome], k: int = 5) -> str:
    """Failing cases by category: what was missing and what came back instead."""
    failing = [(o, failure_reasons(o, k)) for o in outcomes]
    failing = [(o, reasons) for o, reasons in failing if reasons]
    title = f"Failing cases ({len(failing)} of {len(outcomes)})"
    lines = [title, "=" * len(title)]
    if not failing:
        return "\n".join([*lines, "  (none)"]) + "\n"
    failing.sort(key=lambda pair: (pair[0].case.category, pair[0].case.id))
    for outcome, reasons in failing:
        case = outcome.case
        lines.append("")
        lines.append(f"  [{case.category}] {case.id}: {'; '.join(reasons)}")
        types = f"  (types {', '.join(case.types)})" if case.types else ""
        lines.append(f"    query: {_short(case.query)}{types}")
        for text in outcome.missing(k):
            lines.append(f"    missing:    {_short(text)}")
        for item in outcome.unexpected():
            rank = outcome.returned.index(item) + 1
            flag = " FOREIGN" if item.foreign else ""
            lines.append(
                f"    unexpected: #{rank} ({item.relevance:.2f}{flag}) {_short(item.content)}"
            )
    return "\n".join(lines) + "\n"
