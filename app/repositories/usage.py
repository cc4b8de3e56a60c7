"""Per-memory usage (what query_memory returned) and the per-user cap's eviction.

Usage is written after answers were given (app/services/usage.py), one statement per user
per flush.
Eviction runs in the saving transaction, after the per-user lock, so two concurrent saves of
one user cannot both stay under the count they read.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import MemoryItem

# A valid (not superseded), not deleted, not expired memory: what the cap counts.
_LIVE = (
    MemoryItem.deleted_at.is_(None),
    MemoryItem.valid_to.is_(None),
)


def _live(user_id: str, at: datetime) -> list[object]:
    return [
        MemoryItem.user_id == user_id,
        *_LIVE,
        or_(MemoryItem.expires_at.is_(None), MemoryItem.expires_at > at),
    ]


class UsageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def record_retrievals(
        self, user_id: str, counts: dict[uuid.UUID, int], at: datetime
    ) -> None:
        """Answers up to `at` returned these memories of the user (id -> how many answers):
        one statement. The time is bound, not now(): a flush may run a moment after.

        One table, no join: on Citus the fast-path router sends it to the user's shard under a
        generic plan too (joined to `unnest(...)` it ran on all 32 shards: docs/scaling.md)."""
        if not counts:
            return
        await self.session.execute(
            text(
                "UPDATE memory_items SET times_retrieved = times_retrieved + "
                "(CAST(:ns AS bigint[]))[array_position(CAST(:ids AS uuid[]), id)], "
                "last_retrieved_at = greatest(last_retrieved_at, :at) "
                "WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[]))"
            ),
            {"user_id": user_id, "ids": list(counts), "ns": list(counts.values()), "at": at},
        )

    async def lock_user(self, user_id: str) -> None:
        """Serialise this user's capped saves until the transaction ends."""
        await self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:user_id, 28))"),
            {"user_id": user_id},
        )

    async def live_count(self, user_id: str, at: datetime) -> int:
        """The user's live memories (not deleted, not superseded, not expired at `at`)."""
        stmt = select(func.count()).select_from(MemoryItem).where(*_live(user_id, at))
        return int((await self.session.execute(stmt)).scalar_one())

    async def evict(
        self, user_id: str, count: int, *, keep: uuid.UUID, at: datetime
    ) -> Sequence[MemoryItem]:
        """Soft-delete the user's `count` least valuable live memories other than `keep`:
        lowest importance, then least recently retrieved (never retrieved first), then oldest."""
        if count <= 0:
            return []
        victims = (
            select(MemoryItem.id)
            .where(*_live(user_id, at), MemoryItem.id != keep)
            .order_by(
                MemoryItem.importance,
                MemoryItem.last_retrieved_at.asc().nulls_first(),
                MemoryItem.created_at,
                MemoryItem.id,
            )
            .limit(count)
            .with_for_update()
        )
        ids = list((await self.session.execute(victims)).scalars().all())
        if not ids:
            return []
        stmt = (
            update(MemoryItem)
            .where(MemoryItem.user_id == user_id, MemoryItem.id.in_(ids))
            .values(deleted_at=at, evicted_at=at, updated_at=at)
            .returning(MemoryItem)
            .execution_options(populate_existing=True, synchronize_session=False)
        )
        return (await self.session.execute(stmt)).scalars().all()
