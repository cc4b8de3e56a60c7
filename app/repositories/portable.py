"""One user's rows, read in full for an export and written back by an import.

Every statement is scoped by `user_id` (and runs in a user-scoped session, so row-level security
holds too). Reads stream in batches; writes take explicit ids and times, because an import must
restore them exactly.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Conversation, MemoryItem, Message

_BATCH = 500


class PortableRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def counts(self, user_id: str) -> dict[str, int]:
        """Conversations, messages and memories (every version) the user has."""
        out = {}
        for name, model in (
            ("conversations", Conversation),
            ("messages", Message),
            ("memories", MemoryItem),
        ):
            stmt = select(func.count()).select_from(model).where(model.user_id == user_id)
            out[name] = int((await self.session.execute(stmt)).scalar_one())
        return out

    async def conversations(self, user_id: str) -> AsyncIterator[Conversation]:
        stmt = (
            select(Conversation)
            .where(Conversation.user_id == user_id)
            .order_by(Conversation.created_at, Conversation.id)
            .execution_options(yield_per=_BATCH)
        )
        async for row in await self.session.stream_scalars(stmt):
            yield row

    async def messages(self, user_id: str) -> AsyncIterator[Message]:
        """The user's messages in stored order (seq), so each conversation's order holds."""
        stmt = (
            select(Message)
            .where(Message.user_id == user_id)
            .order_by(Message.seq)
            .execution_options(yield_per=_BATCH)
        )
        async for row in await self.session.stream_scalars(stmt):
            yield row

    async def memories(self, user_id: str) -> AsyncIterator[MemoryItem]:
        """Every version of every memory, deleted ones too, oldest validity first."""
        stmt = (
            select(MemoryItem)
            .where(MemoryItem.user_id == user_id)
            # Ids last: an import into another user renames them, and the order should hold.
            .order_by(
                MemoryItem.valid_from,
                MemoryItem.created_at,
                MemoryItem.content_hash,
                MemoryItem.id,
            )
            .execution_options(yield_per=_BATCH)
        )
        async for row in await self.session.stream_scalars(stmt):
            yield row

    async def insert_conversations(self, rows: Sequence[dict[str, Any]]) -> None:
        if rows:
            await self.session.execute(insert(Conversation), list(rows))

    async def insert_messages(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert in list order: seq (an identity) follows it, so conversation order is kept."""
        for start in range(0, len(rows), _BATCH):
            await self.session.execute(insert(Message), list(rows[start : start + _BATCH]))

    async def insert_memories(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert memory rows (supersedes_id set afterwards by link_memories)."""
        for start in range(0, len(rows), _BATCH):
            await self.session.execute(insert(MemoryItem), list(rows[start : start + _BATCH]))

    async def link_memories(
        self, user_id: str, links: Sequence[tuple[uuid.UUID, uuid.UUID]]
    ) -> None:
        """Set supersedes_id on the user's items: (item id, the id it supersedes) pairs."""
        if not links:
            return
        await self.session.execute(
            text(
                "UPDATE memory_items AS m SET supersedes_id = l.old "
                "FROM unnest(CAST(:ids AS uuid[]), CAST(:olds AS uuid[])) AS l(id, old) "
                "WHERE m.id = l.id AND m.user_id = :user_id"
            ),
            {"ids": [a for a, _ in links], "olds": [b for _, b in links], "user_id": user_id},
        )

    async def existing_ids(self, user_id: str, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these ids the user already has (conversations, messages, memories)."""
        found: set[uuid.UUID] = set()
        for model in (Conversation, Message, MemoryItem):
            stmt = select(model.id).where(model.user_id == user_id, model.id.in_(list(ids)))
            found |= set((await self.session.execute(stmt)).scalars().all())
        return found
