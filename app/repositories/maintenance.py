"""Whole-table maintenance SQL: vector index rebuilds (shared and per-user), re-embedding.

These statements (re-embed batches, index rebuilds, row counts) deliberately span all users:
they rewrite each row in place and never hand one user's data to another.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import (
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.vectors import vector_literal

Table = Literal["memory_items", "messages"]
VectorIndex = Literal["ivfflat", "hnsw"]
# HNSW build parameters: pgvector's defaults (m=16, ef_construction=64), measured in
# docs/performance.md ("Big users: ANN recall").
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
# Fixed identifiers (never user input), so they may be formatted into DDL.
EMBEDDING_INDEXES: dict[Table, str] = {
    "memory_items": "idx_memory_items_embedding",
    "messages": "idx_messages_embedding",
}
_BUILT_ON = re.compile(r"built on (\d+) rows")


def user_index_name(table: Table, user_id: str) -> str:
    """The name of a user's own vector index: the table's index name + a hash of the user id
    (identifiers are at most 63 bytes, and the id never appears in an identifier)."""
    digest = hashlib.sha256(user_id.encode()).hexdigest()[:16]
    return f"{EMBEDDING_INDEXES[table]}_u_{digest}"


@dataclass(frozen=True)
class IndexState:
    lists: int | None  # ivfflat only
    built_rows: int | None  # rows when `pgrecall reindex` built it; None = built by a migration
    method: str | None = "ivfflat"  # the index's access method; None = no index


@dataclass(frozen=True)
class StaleRow:
    id: uuid.UUID
    content: str
    content_hash: str | None  # memory items only: guards against a concurrent content edit


def lists_for(rows: int) -> int:
    """ivfflat `lists` for a table size: rows/1000 (pgvector's advice), within 10..4000."""
    return min(4000, max(10, round(rows / 1000)))


# A user's own index is probed for a share of its lists (app/services/query/model.py ann_probes), so
# finer lists read about as many rows per query: on real conversation turns (a 50k-turn user,
# `python -m bench.ann`, three builds each) 100 lists gave recall@10 0.94-0.97 where 50
# gave 0.94-0.95 at share 0.4, and both 0.96-0.99 at 0.5 (docs/performance.md, "Big users on
# real conversation turns").
USER_INDEX_ROWS_PER_LIST = 500


def user_lists_for(rows: int) -> int:
    """ivfflat `lists` of a user's own index (`pgrecall reindex`): rows/500, within 10..4000."""
    return min(4000, max(10, round(rows / USER_INDEX_ROWS_PER_LIST)))


def _using(method: VectorIndex, lists: int) -> str:
    """The USING clause of a vector index: HNSW with its build parameters, or ivfflat."""
    if method == "hnsw":
        return (
            f"hnsw (embedding halfvec_cosine_ops) WITH (m = {HNSW_M}, "
            f"ef_construction = {HNSW_EF_CONSTRUCTION})"
        )
    return f"ivfflat (embedding halfvec_cosine_ops) WITH (lists = {int(lists)})"


def _index_state(row: Any) -> IndexState:
    """An index's lists (ivfflat option), the row count noted when built, and its method, from
    a pg_class row with reloptions, note (its comment) and amname."""
    lists = None
    for option in row.reloptions or []:
        key, _, value = option.partition("=")
        if key == "lists":
            lists = int(value)
    built = _BUILT_ON.search(row.note or "")
    return IndexState(lists, int(built.group(1)) if built else None, str(row.amname))


class MaintenanceRepository:
    """Whole-table work: ivfflat rebuilds and re-embedding."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def embedding_rows(self, table: Table) -> int:
        sql = text(f"SELECT count(*) FROM {table} WHERE embedding IS NOT NULL")
        return int((await self.session.execute(sql)).scalar_one())

    async def index_state(self, table: Table) -> IndexState:
        """The table's vector index: its method, `lists` (ivfflat) and the row count recorded
        when it was built."""
        sql = text(
            "SELECT c.reloptions, obj_description(c.oid, 'pg_class') AS note, a.amname "
            "FROM pg_class AS c JOIN pg_am AS a ON a.oid = c.relam "
            "WHERE c.relname = :name AND c.relkind = 'i'"
        )
        row = (await self.session.execute(sql, {"name": EMBEDDING_INDEXES[table]})).one_or_none()
        return IndexState(None, None, None) if row is None else _index_state(row)

    async def rebuild_index(
        self,
        table: Table,
        lists: int,
        rows: int,
        dimension: int,
        method: VectorIndex = "ivfflat",
    ) -> None:
        """Drop and create the vector index (ivfflat or HNSW) under its own name (one
        transaction: the table is locked while it builds), and note the row count it was built
        on."""
        name = EMBEDDING_INDEXES[table]
        if method == "hnsw":
            # The graph is built fastest when it fits in maintenance_work_mem: each vector
            # plus its neighbour lists (about 1.9 GB at 1M 384-d rows); capped at 2 GB.
            need_mb = min(2048, math.ceil(rows * (dimension * 4 + 8 * HNSW_M * 3 + 96) / 2**20))
        else:
            # k-means samples up to 50 vectors per list and keeps them in maintenance_work_mem,
            # with one float per sample and list for its distances (273 MB at 1M rows).
            samples = min(rows, lists * 50)
            need_mb = math.ceil(samples * (dimension * 4 + 64 + lists * 4) / 2**20)
        using = _using(method, lists)
        await self.session.execute(text("SET LOCAL lock_timeout = '30s'"))
        await self.session.execute(text("SET LOCAL statement_timeout = 0"))
        current = (await self.session.execute(text("SHOW maintenance_work_mem"))).scalar_one()
        if _megabytes(str(current)) < need_mb + 64:
            budget = f"{need_mb + 64}MB"
            await self.session.execute(text(f"SET LOCAL maintenance_work_mem = '{budget}'"))
        await self.session.execute(text(f"DROP INDEX IF EXISTS {name}"))
        await self.session.execute(text(f"CREATE INDEX {name} ON {table} USING {using}"))
        await self.session.execute(
            text(f"COMMENT ON INDEX {name} IS 'pgrecall reindex: built on {int(rows)} rows'")
        )

    async def users_with_vectors(self, table: Table, more_than: int) -> dict[str, int]:
        """Users with more than `more_than` vectors in the table, and how many."""
        sql = text(
            f"SELECT user_id, count(*) AS n FROM {table} WHERE embedding IS NOT NULL "
            "GROUP BY user_id HAVING count(*) > :more_than"
        )
        rows = (await self.session.execute(sql, {"more_than": more_than})).all()
        return {r.user_id: int(r.n) for r in rows}

    async def user_index_states(self, table: Table) -> dict[str, IndexState]:
        """The table's per-user vector indexes, by index name."""
        sql = text(
            "SELECT c.relname, c.reloptions, obj_description(c.oid, 'pg_class') AS note, "
            "a.amname FROM pg_class AS c JOIN pg_am AS a ON a.oid = c.relam "
            "WHERE c.relkind = 'i' AND starts_with(c.relname, :prefix)"
        )
        prefix = EMBEDDING_INDEXES[table] + "_u_"
        out: dict[str, IndexState] = {}
        for row in (await self.session.execute(sql, {"prefix": prefix})).all():
            out[row.relname] = _index_state(row)
        return out

    async def build_user_index(
        self,
        table: Table,
        user_id: str,
        lists: int,
        rows: int,
        method: VectorIndex = "ivfflat",
    ) -> str:
        """An index over one user's vectors only (a partial index, `WHERE user_id = <the
        user>`): the planner uses it for that user's vector statement (the query path plans it
        with the user id as a constant), so the search reads that user's rows only. ivfflat
        with `lists` (users above the exact threshold), or HNSW (the users under it whose
        exact scan it replaces; `lists` unused; app/services/reindex.py)."""
        name = user_index_name(table, user_id)
        await self.session.execute(text("SET LOCAL lock_timeout = '30s'"))
        await self.session.execute(text("SET LOCAL statement_timeout = 0"))
        await self.session.execute(text(f"DROP INDEX IF EXISTS {name}"))
        using = _using(method, lists)
        # DDL takes no bind parameters: the server quotes the user id (format's %L).
        ddl = (
            await self.session.execute(
                text(
                    "SELECT format('CREATE INDEX %I ON %I USING %s WHERE user_id = %L', "
                    "CAST(:name AS text), CAST(:table AS text), CAST(:using AS text), "
                    "CAST(:user_id AS text))"
                ),
                {"name": name, "table": table, "using": using, "user_id": user_id},
            )
        ).scalar_one()
        await self.session.execute(text(ddl))
        await self.session.execute(
            text(f"COMMENT ON INDEX {name} IS 'pgrecall reindex: built on {int(rows)} rows'")
        )
        return name

    async def drop_user_index(self, table: Table, name: str) -> None:
        """Drop one of the table's per-user vector indexes (by the name user_index_states gave)."""
        if not name.startswith(EMBEDDING_INDEXES[table] + "_u_") or not re.fullmatch(
            r"[a-z0-9_]+", name
        ):
            raise ValueError(f"not a per-user vector index of {table}: {name!r}")
        await self.session.execute(text("SET LOCAL lock_timeout = '30s'"))
        await self.session.execute(text(f"DROP INDEX IF EXISTS {name}"))

    async def column_dimension(self, table: Table) -> int:
        """The width of the table's vector column (atttypmod of vector(n) is n)."""
        sql = text(
            "SELECT atttypmod FROM pg_attribute "
            "WHERE attrelid = CAST(:table AS regclass) AND attname = 'embedding'"
        )
        return int((await self.session.execute(sql, {"table": table})).scalar_one())

    async def model_counts(self, table: Table) -> dict[str | None, int]:
        """Rows per embedding model (None: a message stored without a vector)."""
        sql = text(f"SELECT embedding_model, count(*) FROM {table} GROUP BY embedding_model")
        return {m: int(n) for m, n in (await self.session.execute(sql)).all()}

    async def models_sampled(self, table: Table, rows: int) -> set[str]:
        """The embedding models of the table's first `rows` rows in storage order: a bounded
        read (no scan of a big table), so a sample, not a count. It finds a store written by
        another model; a store whose re-embed stopped half way is found only when an old row is
        among the first ones (a rewritten row's new version usually lands on a later page)."""
        sql = text(
            f"SELECT DISTINCT embedding_model FROM (SELECT embedding_model FROM {table} "
            "LIMIT :rows) AS first_rows WHERE embedding_model IS NOT NULL"
        )
        return {str(m) for m in (await self.session.execute(sql, {"rows": rows})).scalars()}

    async def stale_batch(
        self, table: Table, model: str, after: uuid.UUID | None, limit: int
    ) -> list[StaleRow]:
        """The next rows (by id) whose vector is not from `model`."""
        hash_column = "content_hash" if table == "memory_items" else "NULL"
        sql = text(
            f"SELECT id, content, {hash_column} AS content_hash FROM {table} "
            "WHERE embedding_model IS DISTINCT FROM :model "
            "AND (CAST(:after AS uuid) IS NULL OR id > CAST(:after AS uuid)) "
            "ORDER BY id LIMIT :limit"
        )
        rows = await self.session.execute(sql, {"model": model, "after": after, "limit": limit})
        return [StaleRow(r.id, r.content, r.content_hash) for r in rows]

    async def write_embeddings(
        self, table: Table, model: str, rows: Sequence[StaleRow], vectors: Any
    ) -> int:
        """Store new vectors; a memory whose content changed meanwhile is left for the next run."""
        if not rows:
            return 0
        guard = "AND t.content_hash = u.hash" if table == "memory_items" else ""
        sql = text(
            f"UPDATE {table} AS t SET embedding = CAST(u.vec AS halfvec), embedding_model = :model "
            "FROM unnest(CAST(:ids AS uuid[]), CAST(:vecs AS text[]), CAST(:hashes AS text[])) "
            "AS u(id, vec, hash) "
            f"WHERE t.id = u.id AND t.embedding_model IS DISTINCT FROM :model {guard}"
        )
        params = {
            "model": model,
            "ids": [r.id for r in rows],
            "vecs": [vector_literal(v) for v in vectors],
            "hashes": [r.content_hash for r in rows],
        }
        result = await self.session.execute(sql, params)
        return int(result.rowcount)  # type: ignore[attr-defined]


def _megabytes(setting: str) -> float:
    """Postgres memory setting ('256MB', '1GB', '65536kB') in MB."""
    match = re.fullmatch(r"(\d+)\s*(kB|MB|GB|TB)?", setting.strip())
    if match is None:
        return 0.0
    factor = {"kB": 1 / 1024, "MB": 1, "GB": 1024, "TB": 1024 * 1024}[match.group(2) or "kB"]
    return int(match.group(1)) * factor
