"""Vector index maintenance: rebuild the vector indexes, ivfflat with `lists` sized to the data,
or HNSW (PGRECALL_VECTOR_INDEX).

An ivfflat index clusters the vectors present when it is built. The migration builds both on
empty tables, so their centroids are meaningless until rebuilt; after that they go stale as the
table grows. The rule here: an ivfflat index is stale once the table holds more than twice the
rows it was built on. The build's row count is written into the index's COMMENT (no extra table;
a migration-built index has none and counts as built on 0 rows). An HNSW graph takes every
insert as it comes and never goes stale; an index of the other method than the one asked for
is rebuilt.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy.ext.asyncio import AsyncSession

from app.repositories.maintenance import (
    IndexState,
    MaintenanceRepository,
    Table,
    VectorIndex,
    lists_for,
    user_index_name,
    user_lists_for,
)

TABLES: tuple[Table, ...] = ("memory_items", "messages")


@dataclass(frozen=True)
class ReindexResult:
    table: Table
    rows: int
    lists: int
    previous_lists: int | None
    previous_rows: int | None
    rebuilt: bool
    method: str = "ivfflat"
    previous_method: str | None = "ivfflat"


def is_stale(state: IndexState, rows: int, method: VectorIndex | None = None) -> bool:
    """True when the index is missing, of another method than `method` (None: any), or an
    ivfflat index whose table has more than doubled since it was built."""
    if state.method is None or (method is not None and state.method != method):
        return True
    if state.method == "hnsw":
        return False
    if state.lists is None:
        return True
    return rows > 2 * (state.built_rows or 0)


async def reindex(
    session: AsyncSession,
    table: Table,
    *,
    only_if_stale: bool = False,
    method: VectorIndex | None = None,
) -> ReindexResult:
    """Rebuild the table's vector index (or only when stale); the caller commits. `method`
    None keeps the index's current method (ivfflat when there is none)."""
    repo = MaintenanceRepository(session)
    rows = await repo.embedding_rows(table)
    state = await repo.index_state(table)
    target: VectorIndex = method or ("hnsw" if state.method == "hnsw" else "ivfflat")
    lists = lists_for(rows)
    rebuild = not only_if_stale or is_stale(state, rows, target)
    if rebuild:
        dimension = await repo.column_dimension(table)
        await repo.rebuild_index(table, lists, rows, dimension, target)
    return ReindexResult(
        table,
        rows,
        lists if target == "ivfflat" else 0,
        state.lists,
        state.built_rows,
        rebuild,
        target,
        state.method,
    )


@dataclass(frozen=True)
class UserIndexResult:
    table: Table
    users: int  # users with an index of their own after this run
    built: int
    fresh: int
    dropped: int


class OwnIndexBands(NamedTuple):
    """reindex_users' bands under the settings (PGRECALL_USER_VECTOR_INDEXES,
    PGRECALL_EXACT_SEARCH_MAX_ITEMS, PGRECALL_USER_HNSW_MIN_ITEMS): an index of their own for
    the users with more than `more_than` vectors, HNSW up to `hnsw_up_to` (the exact
    threshold), ivfflat above it."""

    more_than: int
    hnsw_up_to: int

    @classmethod
    def of(cls, *, enabled: bool, exact_max_items: int, hnsw_min_items: int) -> OwnIndexBands:
        if not enabled:
            # Every per-user index is dropped (no user is "more than" that).
            return cls(2**62, exact_max_items)
        return cls(min(hnsw_min_items, exact_max_items), exact_max_items)


async def reindex_users(
    session: AsyncSession,
    table: Table,
    *,
    more_than: int | None,
    hnsw_up_to: int = 0,
    only_if_stale: bool = False,
) -> UserIndexResult:
    """Per-user indexes: one for every user with more than `more_than` vectors in the table;
    indexes of users no longer above it are dropped. `more_than` None rebuilds the existing set
    (e.g. after a re-embed) with their methods, without adding or dropping any.

    Users above `hnsw_up_to` vectors (the exact threshold: the users on the ANN path) get an
    ivfflat index, lists sized to their rows (user_lists_for). A shared index's probes read
    every user's rows, so a user holding 5% of a 1M-row table needs a tenth of its lists
    probed for recall 0.95; in an index of its own, every probe reads that user's rows only
    (docs/performance.md, "Big users"). Users at or under it get an HNSW index: their queries
    read it instead of scoring every vector exactly (arms.SearchPath; a 5,520-turn user's
    statement, docs/performance.md, "An HNSW index of their own"). A user who crosses the
    threshold either way gets the other method at the next run (is_stale)."""
    repo = MaintenanceRepository(session)
    existing = await repo.user_index_states(table)
    if more_than is None:
        # Index names carry a hash of the user id: find the users whose index exists.
        everyone = await repo.users_with_vectors(table, 0)
        wanted = {u: n for u, n in everyone.items() if user_index_name(table, u) in existing}
    else:
        wanted = await repo.users_with_vectors(table, more_than)
    built = fresh = dropped = 0
    keep: set[str] = set()
    for user_id, rows in sorted(wanted.items()):
        name = user_index_name(table, user_id)
        keep.add(name)
        state = existing.get(name)
        method: VectorIndex = "hnsw" if rows <= hnsw_up_to else "ivfflat"
        if more_than is None and state is not None:  # a re-embed keeps the method
            method = "hnsw" if state.method == "hnsw" else "ivfflat"
        # An index built under another lists rule (an older pgrecall) counts as stale too.
        if (
            only_if_stale
            and state is not None
            and not is_stale(state, rows, method)
            and (method == "hnsw" or state.lists == user_lists_for(state.built_rows or 0))
        ):
            fresh += 1
            continue
        await repo.build_user_index(table, user_id, user_lists_for(rows), rows, method)
        built += 1
    if more_than is not None:
        for name in sorted(set(existing) - keep):
            await repo.drop_user_index(table, name)
            dropped += 1
    return UserIndexResult(table, len(keep), built, fresh, dropped)
