"""Admin SQL over one user's memories: listing with filters, edits of state, and the
near-duplicate lookup. Per-user statements filter by `user_id` like every other repository.

Index and embedding maintenance is in app/repositories/maintenance.py, the GDPR purge in
app/repositories/purge.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

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

from app.models import MemoryItem, SearchPosting
from app.vectors import vector_literal

_ENGLISH = literal_column("'english'::regconfig")


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
            *MemoryItem.in_this_scope(),  # a text is one memory per scope (migration 0019)
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
        None if not this user's.

        The time is bound, not now(): Citus refuses a non-immutable function inside the
        COALESCE of an UPDATE on a distributed table (docs/scaling.md)."""
        if deleted:
            when = func.coalesce(MemoryItem.deleted_at, datetime.now(UTC))
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
                SELECT u.ord, CAST(u.v AS halfvec) AS vec
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
