"""What every arm of the retrieval statements shares: the candidate row, the time filter and
the visibility/validity conditions of memory items."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import ReadTransaction
from app.repositories.search_index import Source


@dataclass(frozen=True)
class Candidate:
    source: Source
    id: uuid.UUID
    content: str
    type: str | None
    importance: float | None
    created_at: datetime
    reference: str | None
    conversation_id: uuid.UUID | None
    role: str | None
    speaker: str | None = None  # a message's metadata.speaker, when the writer named one


_MEMORY_VISIBLE = """
    m.user_id = :user_id AND m.deleted_at IS NULL
    AND (m.expires_at IS NULL OR m.expires_at > now())
    {type_filter}{tag_filter}
"""


@dataclass(frozen=True)
class TagFilter:
    """Memories with any (`all_=False`) or every one of `tags` (the GIN index serves both)."""

    tags: Sequence[str]
    all_: bool = False

    def sql(self, alias: str) -> str:
        op = "@>" if self.all_ else "&&"
        return f" AND {alias}.tags {op} CAST(:tags AS text[])"


def memory_visible(types: Sequence[str] | None, tags: TagFilter | None = None) -> str:
    return _MEMORY_VISIBLE.format(
        type_filter="AND m.type = ANY(CAST(:types AS text[]))" if types else "",
        tag_filter=tags.sql("m") if tags else "",
    )


def _scope_params(types: Sequence[str] | None, tags: TagFilter | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if types:
        params["types"] = list(types)
    if tags:
        params["tags"] = list(tags.tags)
    return params


def memory_valid(alias: str, when: TimeFilter) -> str:
    """' AND ...': the memory is valid now, or (with as_of) was not yet superseded at as_of.

    Validity ends at valid_to, which is never in the future (app/services/supersession.py), so
    "valid now" is `valid_to IS NULL` (the partial index idx_memory_items_current). The start
    of the window is created_at (= valid_from), which TimeFilter.sql already bounds by as_of.
    """
    if when.as_of is None:
        return f" AND {alias}.valid_to IS NULL"
    return f" AND ({alias}.valid_to IS NULL OR {alias}.valid_to > :as_of)"


@dataclass(frozen=True)
class TimeFilter:
    """Hard limits on an item's event time (its created_at): time_from <= t <= time_to, and
    nothing created after as_of (what was known then)."""

    time_from: datetime | None = None
    time_to: datetime | None = None
    as_of: datetime | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.time_from, self.time_to, self.as_of))

    def sql(self, alias: str) -> str:
        """' AND ...' conditions on `alias`.created_at (empty when there are no limits)."""
        parts = []
        if self.time_from is not None:
            parts.append(f"{alias}.created_at >= :time_from")
        if self.time_to is not None:
            parts.append(f"{alias}.created_at <= :time_to")
        if self.as_of is not None:
            parts.append(f"{alias}.created_at <= :as_of")
        return "".join(f" AND {p}" for p in parts)

    def params(self) -> dict[str, datetime]:
        values = {"time_from": self.time_from, "time_to": self.time_to, "as_of": self.as_of}
        return {k: v for k, v in values.items() if v is not None}


NO_TIME_FILTER = TimeFilter()


# Source of a statement's `source` column (a dict read: Source(n) costs an enum lookup per row).
SOURCES: dict[int, Source] = {int(s): s for s in Source}

Row = Mapping[str, Any]  # asyncpg's Record or SQLAlchemy's RowMapping: read by column name


class SessionBound:
    """The session, or the query path's ReadTransaction (app/db.py), every part of
    RetrievalRepository runs its statements on."""

    def __init__(self, session: AsyncSession | ReadTransaction) -> None:
        self.session = session

    async def _rows(self, sql: str, params: Mapping[str, Any]) -> Sequence[Row]:
        """The rows of one read statement (`:name` binds, as text() takes them), in the
        transaction of the session or ReadTransaction, through asyncpg itself.

        The query path's statements return 50-80 rows each; through SQLAlchemy's execute and
        result rows their Python cost about twice as much (`python -m bench.stages`: the
        keyword statement 0.62 -> 0.30 ms per query; docs/performance.md, "The turns around a
        seed, and the query path's reads through asyncpg"). On a session the statement still
        runs in its transaction, after its scope's SET LOCAL, and a failure is a SQLAlchemy
        DBAPIError, as from session.execute (the callers' failure handling is the same). A
        session's transaction that has not started yet (no statement of it has run: an
        unscoped session) is left to SQLAlchemy, which starts it."""
        if isinstance(self.session, ReadTransaction):
            return await self.session.fetch(sql, params)
        connection = await self.session.connection()
        driver = (await connection.get_raw_connection()).driver_connection
        if driver is None or not driver.is_in_transaction():
            return list((await self.session.execute(text(sql), dict(params))).mappings())
        return await ReadTransaction(driver).fetch(sql, params)

    async def _execute(self, sql: str, params: Mapping[str, Any]) -> None:
        """One statement whose rows are not read (a SET LOCAL)."""
        if isinstance(self.session, ReadTransaction):
            await self.session.execute(sql, params)
        else:
            await self.session.execute(text(sql), dict(params))
