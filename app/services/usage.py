"""Usage data of memories, written off query_memory's response path, and the per-user cap.

`UsageRecorder.answered` only notes which memories an answer returned (a dict update, no I/O);
one flusher task at a time writes what accumulated, one UPDATE per user (in that user's
row-level-security session), so a burst of answers costs a few statements, not one per answer,
and at most one pool connection. A failed flush is logged and dropped: usage data orders the
per-user cap's eviction, it is never worth failing or slowing an answer for.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import user_session
from app.models import MemoryItem
from app.repositories.usage import UsageRepository

log = logging.getLogger(__name__)
audit = logging.getLogger("app.audit")
_NEVER = datetime.min.replace(tzinfo=UTC)

# Pending (user, memory) pairs kept at most; beyond, new ones are dropped until a flush.
MAX_PENDING = 50_000


class UsageRecorder:
    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession]) -> None:
        self.sessionmaker = sessionmaker
        self._pending: dict[str, dict[uuid.UUID, int]] = {}
        self._size = 0
        self._at = datetime.now(UTC)
        self._flusher: asyncio.Task[None] | None = None

    def answered(self, user_id: str, ids: Iterable[uuid.UUID]) -> None:
        """An answer to `user_id` returned these memories (call after answering)."""
        counts = self._pending.setdefault(user_id, {})
        for item_id in ids:
            if item_id not in counts:
                if self._size >= MAX_PENDING:
                    log.warning("usage data dropped: %d retrievals pending", self._size)
                    break
                self._size += 1
            counts[item_id] = counts.get(item_id, 0) + 1
        if not counts:
            del self._pending[user_id]
            return
        self._at = datetime.now(UTC)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            batch, at = self._pending, self._at
            self._pending, self._size = {}, 0
            for user_id, counts in batch.items():
                try:
                    async with (
                        user_session(self.sessionmaker, user_id) as session,
                        session.begin(),
                    ):
                        await UsageRepository(session).record_retrievals(user_id, counts, at)
                except (SQLAlchemyError, OSError) as exc:
                    log.warning("usage data not written: %s", type(exc).__name__)

    async def drain(self) -> None:
        """Wait until everything noted so far is written (shutdown, tests)."""
        while self._flusher is not None and not self._flusher.done():
            await self._flusher


async def evict_over_cap(
    session: AsyncSession, user_id: str, cap: int, keep: uuid.UUID
) -> list[MemoryItem]:
    """Soft-delete the user's least valuable live memories beyond `cap`, never `keep` (the one
    just saved): lowest importance, then least recently retrieved (never retrieved first), then
    oldest. They keep their rows, versions and postings (deleted_at and evicted_at set), so an
    admin restores them like any soft delete. The caller holds the user's lock
    (UsageRepository.lock_user) and owns the transaction."""
    repo = UsageRepository(session)
    now = datetime.now(UTC)
    over = await repo.live_count(user_id, now) - cap
    if over <= 0:
        return []
    evicted = sorted(
        await repo.evict(user_id, over, keep=keep, at=now),
        key=lambda m: (m.importance, m.last_retrieved_at or _NEVER, m.created_at, m.id),
    )
    audit.info(
        "memories evicted",
        extra={
            "fields": {
                "user_id": user_id,
                "cap": cap,
                "evicted": [str(m.id) for m in evicted],
                "for": str(keep),
            }
        },
    )
    return evicted
