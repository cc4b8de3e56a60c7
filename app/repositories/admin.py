"""Admin SQL: memory listing and edits, near-duplicate lookup, index and embedding maintenance,
and the GDPR purge.

Per-user statements filter by `user_id` like every other repository. The maintenance statements
(re-embed batches, index rebuilds, row counts) deliberately span all users: they rewrite each
row in place and never hand one user's data to another.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Uuid,
    any_,
    cast,
    func,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import vector_literal
from app.models import MemoryItem, SearchPosting

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
_ENGLISH = literal_column("'english'::regconfig")


def user_index_name(table: Table, user_id: str) -> str:
    """The name of a user's own vector index: the table's index name + a hash of the user id
    (identifiers are at most 63 bytes, and the id never appears in an identifier)."""
    digest = hashlib.sha256(user_id.encode()).hexdigest()[:16]
    return f"{EMBEDDING_INDEXES[table]}_u_{digest}"


@dataclass(frozen=True)
class MemoryFilter:
    user_id: str
    type: str | None = None
    q: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    include_deleted: bool = False
    include_superseded: bool = False
    evicted_only: bool = False  # only memories the per-user cap soft-deleted


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


@dataclass
class PurgedRows:
    counts: dict[str, int]
    texts: dict[str, list[str]] = field(default_factory=dict)  # embedding model -> texts


class AdminMemoryRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    @staticmethod
    def _where(f: MemoryFilter, *, via_postings: bool = False) -> list[ColumnElement[bool]]:
        """The filter's predicates. `via_postings` (only when the text query has a positive
        term): the items are first narrowed to those with a keyword posting of one of the query's
        words. Under row-level security `@@` is not leakproof, so Postgres may not use the GIN
        index for it and would test every row of the user; the postings' primary key
        (user_id, lexeme) is usable, and `@@` then checks the few rows left."""
        where: list[ColumnElement[bool]] = [MemoryItem.user_id == f.user_id]
        if f.evicted_only:
            where.append(MemoryItem.evicted_at.is_not(None))
        elif not f.include_deleted:
            where.append(MemoryItem.deleted_at.is_(None))
        if not f.include_superseded:
            where.append(MemoryItem.valid_to.is_(None))
        if f.type is not None:
            where.append(MemoryItem.type == f.type)
        if f.q and via_postings:
            words = func.tsvector_to_array(func.to_tsvector(_ENGLISH, f.q))
            # One array, computed once (an InitPlan): a semi-join here is planned from the
            # `@@` estimate, which can be far off, and then probes the postings once per row.
            matched = select(func.array_agg(SearchPosting.item_id)).where(
                SearchPosting.user_id == f.user_id,
                SearchPosting.lexeme == any_(words),
                SearchPosting.source == 0,
            )
            ids = cast(matched.scalar_subquery(), ARRAY(Uuid))  # ANY of an array, not a subquery
            where.append(MemoryItem.id == any_(ids))
        if f.q:
            # Same expression as the GIN index idx_memory_items_content_fts, so it can serve it.
            where.append(
                func.to_tsvector(_ENGLISH, MemoryItem.content).bool_op("@@")(
                    func.websearch_to_tsquery(_ENGLISH, f.q)
                )
            )
        if f.created_after is not None:
            where.append(MemoryItem.created_at >= f.created_after)
        if f.created_before is not None:
            where.append(MemoryItem.created_at < f.created_before)
        return where

    async def list(
        self, f: MemoryFilter, *, limit: int, offset: int
    ) -> tuple[Sequence[MemoryItem], int]:
        """A page of the user's memories, newest first, and the total matching the filter."""
        where = self._where(f, via_postings=bool(f.q) and await self._has_positive_term(f.q))
        order = (MemoryItem.created_at.desc(), MemoryItem.id.desc())
        count = select(func.count()).select_from(MemoryItem).where(*where)
        if not f.q:
            page = select(MemoryItem).where(*where).order_by(*order).limit(limit).offset(offset)
            items = (await self.session.execute(page)).scalars().all()
            return items, int((await self.session.execute(count)).scalar_one())
        # A text filter tests every candidate row with `@@`: the total rides on the page as a
        # window count (one scan instead of two); only a page past the end counts on its own.
        page = (
            select(MemoryItem, func.count().over().label("total"))
            .where(*where)
            .order_by(*order)
            .limit(limit)
            .offset(offset)
        )
        rows = (await self.session.execute(page)).all()
        if rows:
            return [row[0] for row in rows], int(rows[0].total)
        return [], 0 if offset == 0 else int((await self.session.execute(count)).scalar_one())

    async def _has_positive_term(self, q: str | None) -> bool:
        """Whether every match of the text query contains one of its words ("-tea" alone does
        not: it matches the items without the word)."""
        tree = func.querytree(func.websearch_to_tsquery(_ENGLISH, q))
        return bool((await self.session.execute(select(tree.not_in(["T", ""])))).scalar_one())

    async def get(self, user_id: str, item_id: uuid.UUID) -> MemoryItem | None:
        """The user's memory, deleted or not (admins see both)."""
        stmt = select(MemoryItem).where(MemoryItem.id == item_id, MemoryItem.user_id == user_id)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def get_many(self, user_id: str, ids: Sequence[uuid.UUID]) -> Sequence[MemoryItem]:
        """The user's memories with these ids (any order)."""
        stmt = select(MemoryItem).where(MemoryItem.user_id == user_id, MemoryItem.id.in_(list(ids)))
        return (await self.session.execute(stmt)).scalars().all()

    async def ids_by_hash(self, user_id: str, hashes: Sequence[str]) -> dict[str, uuid.UUID]:
        """Valid memory ids of the user by content hash (deleted ones included; superseded
        versions are history, not the user's current text)."""
        if not hashes:
            return {}
        stmt = select(MemoryItem.content_hash, MemoryItem.id).where(
            MemoryItem.user_id == user_id,
            MemoryItem.content_hash.in_(list(set(hashes))),
            MemoryItem.valid_to.is_(None),
        )
        return {h: i for h, i in (await self.session.execute(stmt)).all()}

    async def update(
        self, user_id: str, item_id: uuid.UUID, values: dict[str, Any]
    ) -> MemoryItem | None:
        """Change columns of the user's memory; None if it is not this user's."""
        stmt = (
            update(MemoryItem)
            .where(MemoryItem.id == item_id, MemoryItem.user_id == user_id)
            .values(**values, updated_at=func.now())
            .returning(MemoryItem)
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def set_deleted(
        self, user_id: str, item_id: uuid.UUID, deleted: bool
    ) -> MemoryItem | None:
        """Soft-delete (keeping the first deletion time) or restore (also from an eviction);
        None if not this user's."""
        if deleted:
            when = func.coalesce(MemoryItem.deleted_at, func.now())
            return await self.update(user_id, item_id, {"deleted_at": when})
        return await self.update(user_id, item_id, {"deleted_at": None, "evicted_at": None})

    async def nearest(
        self, user_id: str, model: str, vectors: Sequence[Any], *, min_cosine: float, k: int
    ) -> list[list[tuple[uuid.UUID, float]]]:
        """Per vector, up to k of the user's valid memories with cosine >= min_cosine, best first.

        One statement for the whole batch. `+ 0` keeps the ivfflat index out (it filters by
        user only after the scan, so it can miss rows); the user_id index makes this an exact
        scan of the user's rows. Only vectors of the same model are comparable.
        """
        result: list[list[tuple[uuid.UUID, float]]] = [[] for _ in vectors]
        if not vectors:
            return result
        sql = text(
            """
            WITH q AS MATERIALIZED (
                SELECT u.ord, CAST(u.v AS vector) AS vec
                FROM unnest(CAST(:vectors AS text[])) WITH ORDINALITY AS u(v, ord)
            )
            SELECT q.ord, c.id, 1 - c.distance AS cosine
            FROM q CROSS JOIN LATERAL (
                SELECT m.id, m.embedding <=> q.vec AS distance
                FROM memory_items AS m
                WHERE m.user_id = :user_id AND m.deleted_at IS NULL AND m.valid_to IS NULL
                  AND m.embedding_model = :model
                  AND m.store_key IS NULL  -- a store item changes only through its address
                ORDER BY (m.embedding <=> q.vec) + 0
                LIMIT :k
            ) AS c
            WHERE c.distance <= :max_distance
            ORDER BY q.ord, c.distance
            """
        )
        params = {
            "vectors": [vector_literal(v) for v in vectors],
            "user_id": user_id,
            "model": model,
            "k": k,
            "max_distance": 1.0 - min_cosine,
        }
        for row in (await self.session.execute(sql, params)).all():
            result[int(row.ord) - 1].append((row.id, float(row.cosine)))
        return result


def lists_for(rows: int) -> int:
    """ivfflat `lists` for a table size: rows/1000 (pgvector's advice), within 10..4000."""
    return min(4000, max(10, round(rows / 1000)))


# A user's own index is probed for a share of its lists (app/services/query.py ann_probes), so
# finer lists read about as many rows per query: on real conversation turns (a 50k-turn user,
# `python -m eval.bench.ann`, three builds each) 100 lists gave recall@10 0.94-0.97 where 50
# gave 0.94-0.95 at share 0.4, and both 0.96-0.99 at 0.5 (docs/performance.md, "Big users on
# real conversation turns").
USER_INDEX_ROWS_PER_LIST = 500


def user_lists_for(rows: int) -> int:
    """ivfflat `lists` of a user's own index (`pgrecall reindex`): rows/500, within 10..4000."""
    return min(4000, max(10, round(rows / USER_INDEX_ROWS_PER_LIST)))


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
            using = (
                f"hnsw (embedding vector_cosine_ops) WITH (m = {HNSW_M}, "
                f"ef_construction = {HNSW_EF_CONSTRUCTION})"
            )
        else:
            # k-means samples up to 50 vectors per list and keeps them in maintenance_work_mem,
            # with one float per sample and list for its distances (273 MB at 1M rows).
            samples = min(rows, lists * 50)
            need_mb = math.ceil(samples * (dimension * 4 + 64 + lists * 4) / 2**20)
            using = f"ivfflat (embedding vector_cosine_ops) WITH (lists = {int(lists)})"
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

    async def build_user_index(self, table: Table, user_id: str, lists: int, rows: int) -> str:
        """An ivfflat index over one user's vectors only (a partial index, `WHERE user_id =
        <the user>`): the planner uses it for that user's ANN statement (the query path plans
        it with the user id as a constant), so every probe reads that user's rows only."""
        name = user_index_name(table, user_id)
        await self.session.execute(text("SET LOCAL lock_timeout = '30s'"))
        await self.session.execute(text("SET LOCAL statement_timeout = 0"))
        await self.session.execute(text(f"DROP INDEX IF EXISTS {name}"))
        # DDL takes no bind parameters: the server quotes the user id (format's %L).
        ddl = (
            await self.session.execute(
                text(
                    "SELECT format('CREATE INDEX %I ON %I USING ivfflat (embedding "
                    "vector_cosine_ops) WITH (lists = %s) WHERE user_id = %L', "
                    "CAST(:name AS text), CAST(:table AS text), CAST(:lists AS int), "
                    "CAST(:user_id AS text))"
                ),
                {"name": name, "table": table, "lists": int(lists), "user_id": user_id},
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
            f"UPDATE {table} AS t SET embedding = CAST(u.vec AS vector), embedding_model = :model "
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


# Every table holding a user's rows, in delete order: rows that point at others go first.
# HOOK: a new user-data table (extraction jobs, ...) is one entry here - before
# "memory_items"/"messages" if it references them - and purge and its counts cover it.
PURGE_TABLES: tuple[str, ...] = (  # in the order the purge reports them
    "memory_items",  # every version: supersession links stay within the user's own rows
    "messages",
    "conversations",
    "search_postings",
    "search_stats",
    "extraction_jobs",
    "extraction_usage",
    "message_passages",
)
# Rows that point at the user's messages are deleted first (they would cascade unseen).
_DELETED_FIRST = ("extraction_jobs", "extraction_usage", "message_passages")
_DELETE_ORDER = _DELETED_FIRST + tuple(t for t in PURGE_TABLES if t not in _DELETED_FIRST)
# Tables whose texts have cached vectors in Redis (their embeddings are purged too).
_EMBEDDED_TABLES = ("memory_items", "messages")


class PurgeRepository:
    """Hard deletes of everything one user owns."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def counts(self, user_id: str) -> dict[str, int]:
        """Rows the user owns, per table."""
        selects = ", ".join(
            f"(SELECT count(*) FROM {t} WHERE user_id = :u) AS {t}" for t in PURGE_TABLES
        )
        row = (await self.session.execute(text(f"SELECT {selects}"), {"u": user_id})).one()
        return {k: int(v) for k, v in row._mapping.items()}

    async def delete_user(self, user_id: str) -> PurgedRows:
        """Delete every row of the user; return counts and the embedded texts (cache keys)."""
        purged = PurgedRows(counts={})
        for table in _DELETE_ORDER:
            if table in _EMBEDDED_TABLES:
                rows = await self.session.execute(
                    text(
                        f"DELETE FROM {table} WHERE user_id = :u RETURNING content, embedding_model"
                    ),
                    {"u": user_id},
                )
                n = 0
                for content, model in rows:
                    n += 1
                    if model is not None:
                        purged.texts.setdefault(model, []).append(content)
                purged.counts[table] = n
            else:
                result = await self.session.execute(
                    text(f"DELETE FROM {table} WHERE user_id = :u"), {"u": user_id}
                )
                purged.counts[table] = int(result.rowcount)  # type: ignore[attr-defined]
        purged.counts = {table: purged.counts[table] for table in PURGE_TABLES}
        return purged
