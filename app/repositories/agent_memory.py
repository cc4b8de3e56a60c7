"""Statements the agent write tools need beyond the memory and conversation repositories."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import MemoryItem, Message

# metadata.via of a memory rate_message created (a downvote removes exactly those).
RATING_ORIGIN = "rate_message"


class AgentMemoryRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def lock_saves(self, user_id: str) -> None:
        """Hold the user's save lock until the transaction ends: one user's saves run one at a
        time (a save reads the nearest memory, then replaces it; two at once would pick the same
        one and the second would fail). Other users' saves do not wait."""
        await self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended('save_memory:' || :user_id, 0))"),
            {"user_id": user_id},
        )

    async def message(self, user_id: str, message_id: uuid.UUID) -> Message | None:
        """The user's message, or None (also for another user's id)."""
        stmt = select(Message).where(Message.id == message_id, Message.user_id == user_id)
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def turn_before(self, user_id: str, message: Message) -> Message | None:
        """The message just before `message` in its conversation."""
        stmt = (
            select(Message)
            .where(
                Message.user_id == user_id,
                Message.conversation_id == message.conversation_id,
                Message.seq < message.seq,
            )
            .order_by(Message.seq.desc())
            .limit(1)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def rating_memories(
        self, user_id: str, message_id: uuid.UUID, *, include_deleted: bool
    ) -> Sequence[MemoryItem]:
        """Memories an upvote of this message created, oldest first."""
        stmt = select(MemoryItem).where(
            MemoryItem.user_id == user_id,
            MemoryItem.source_message_id == message_id,
            MemoryItem.metadata_["via"].astext == RATING_ORIGIN,
        )
        if not include_deleted:
            stmt = stmt.where(MemoryItem.deleted_at.is_(None))
        return (await self.session.execute(stmt.order_by(MemoryItem.created_at))).scalars().all()

    async def live_page(
        self, user_id: str, *, limit: int, offset: int, type: str | None = None
    ) -> tuple[Sequence[MemoryItem], int]:
        """A page of the user's live (not deleted, not expired, valid) memories, newest first."""
        where = [
            MemoryItem.user_id == user_id,
            MemoryItem.deleted_at.is_(None),
            MemoryItem.valid_to.is_(None),
            or_(MemoryItem.expires_at.is_(None), MemoryItem.expires_at > func.now()),
        ]
        if type is not None:
            where.append(MemoryItem.type == type)
        page = (
            select(MemoryItem)
            .where(*where)
            .order_by(MemoryItem.created_at.desc(), MemoryItem.id.desc())
            .limit(limit)
            .offset(offset)
        )
        items = (await self.session.execute(page)).scalars().all()
        total = (
            await self.session.execute(select(func.count()).select_from(MemoryItem).where(*where))
        ).scalar_one()
        return items, int(total)
