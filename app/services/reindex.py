"""ivfflat maintenance: rebuild the vector indexes with `lists` sized to the data.

An ivfflat index clusters the vectors present when it is built. The migration builds both on
empty tables, so their centroids are meaningless until rebuilt; after that they go stale as the
table grows. The rule here: an index is stale once the table holds more than twice the rows it
was built on. The build's row count is written into the index's COMMENT (no extra table; a
migration-built index has none and counts as built on 0 rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from app.repositories.admin import IndexState, MaintenanceRepository, Table, lists_for

TABLES: tuple[Table, ...] = ("memory_items", "messages")


@dataclass(frozen=True)
class ReindexResult:
    table: Table
    rows: int
    lists: int
    previous_lists: int | None
    previous_rows: int | None
    rebuilt: bool


def is_stale(state: IndexState, rows: int) -> bool:
    """True when the table has more than doubled since the index was built (or it is missing)."""
    if state.lists is None:
        return True
    return rows > 2 * (state.built_rows or 0)


async def reindex(
    session: AsyncSession, table: Table, *, only_if_stale: bool = False
) -> ReindexResult:
    """Rebuild the table's ivfflat index (or only when stale); the caller commits."""
    repo = MaintenanceRepository(session)
    rows = await repo.embedding_rows(table)
    state = await repo.index_state(table)
    lists = lists_for(rows)
    rebuild = not only_if_stale or is_stale(state, rows)
    if rebuild:
        await repo.rebuild_index(table, lists, rows, await repo.column_dimension(table))
    return ReindexResult(table, rows, lists, state.lists, state.built_rows, rebuild)
