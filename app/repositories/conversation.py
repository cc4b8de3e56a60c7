"""Conversations and messages."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Conversation, MemoryItem, Message


@dataclass(frozen=True)
class NewMessage:
    id: uuid.UUID
    role: str
    content: str
    embedding: Any
    embedding_model: str | None
    correlation_id: uuid.UUID
    created_at: datetime | None
    metadata: dict[str, Any]


class ConversationRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def create(self, user_id: str, title: str | None) -> Conversation:
        # INSERT ... RETURNING, not add + refresh: the refresh would re-read the row by id alone
        # (no user_id, so not routable to one shard: tests/repositories/test_user_scope.py).
        stmt = (
            insert(Conversation)
            .values(id=uuid.uuid4(), user_id=user_id, title=title)
            .returning(Conversation)
        )
        return (await self.session.execute(stmt)).scalar_one()

    async def get(
        self, user_id: str, conversation_id: uuid.UUID, *, lock: bool = False
    ) -> Conversation | None:
        """The conversation if it belongs to this user; `lock` serialises appends to it."""
        stmt = select(Conversation).where(
            Conversation.id == conversation_id, Conversation.user_id == user_id
        )
        if lock:
            stmt = stmt.with_for_update()
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def list(self, user_id: str, *, limit: int, offset: int) -> Sequence[Conversation]:
        stmt = (
            select(Conversation)
            .where(Conversation.user_id == user_id)
            .order_by(Conversation.updated_at.desc(), Conversation.id.desc())
            .limit(limit)
            .offset(offset)
        )
        return (await self.session.execute(stmt)).scalars().all()

    async def set_goal(
        self, user_id: str, conversation_id: uuid.UUID, goal: str | None
    ) -> Conversation | None:
        """Set (None: clear) the session goal; the conversation, None when not the user's."""
        stmt = (
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.user_id == user_id)
            .values(goal=goal)
            .returning(Conversation)
            .execution_options(synchronize_session=False)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def touch(self, conversation_id: uuid.UUID, user_id: str) -> None:
        await self.session.execute(
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.user_id == user_id)
            .values(updated_at=func.now())
        )

    async def last_messages(
        self, user_id: str, conversation_id: uuid.UUID, count: int
    ) -> Sequence[Any]:
        """(id, content, metadata_) of the conversation's last `count` messages, newest first."""
        stmt = (
            select(Message.id, Message.content, Message.metadata_)
            .where(Message.conversation_id == conversation_id, Message.user_id == user_id)
            .order_by(Message.seq.desc())
            .limit(count)
        )
        return (await self.session.execute(stmt)).all()

    async def insert_messages(
        self,
        user_id: str,
        conversation_id: uuid.UUID,
        messages: Sequence[NewMessage],
        *,
        scope: tuple[str | None, str | None] = (None, None),
    ) -> Sequence[Message]:
        """Insert in order (seq follows list order) and return the stored rows. `scope`: the
        conversation's agent and run, which its turns take; where it has none, the columns'
        defaults (the writing transaction's scope)."""
        agent, run = scope
        scoped = {
            **({"agent_id": agent} if agent is not None else {}),
            **({"run_id": run} if run is not None else {}),
        }
        rows = [
            {
                "id": m.id,
                "conversation_id": conversation_id,
                "user_id": user_id,
                "role": m.role,
                "content": m.content,
                "embedding": m.embedding,
                "embedding_model": m.embedding_model,
                "correlation_id": m.correlation_id,
                "metadata_": m.metadata,
                **({"created_at": m.created_at} if m.created_at is not None else {}),
                **scoped,
            }
            for m in messages
        ]
        # Rows with and without an explicit created_at differ in columns: separate statements.
        with_time = [r for r in rows if "created_at" in r]
        without_time = [r for r in rows if "created_at" not in r]
        if with_time and without_time:
            for row in rows:
                await self.session.execute(insert(Message).values(**row))
        elif rows:
            await self.session.execute(insert(Message), rows)
        stmt = (
            select(Message)
            .where(Message.user_id == user_id, Message.id.in_([m.id for m in messages]))
            .order_by(Message.seq)
        )
        return (await self.session.execute(stmt)).scalars().all()

    async def list_messages(
        self, user_id: str, conversation_id: uuid.UUID, *, after: int | None, limit: int
    ) -> Sequence[Message]:
        stmt = select(Message).where(
            Message.conversation_id == conversation_id, Message.user_id == user_id
        )
        if after is not None:
            stmt = stmt.where(Message.seq > after)
        stmt = stmt.order_by(Message.seq).limit(limit)
        return (await self.session.execute(stmt)).scalars().all()

    async def recent_messages(
        self, user_id: str, conversation_id: uuid.UUID, limit: int
    ) -> Sequence[Message]:
        """The last `limit` messages, oldest first (to rebuild session state)."""
        stmt = (
            select(Message)
            .where(Message.conversation_id == conversation_id, Message.user_id == user_id)
            .order_by(Message.seq.desc())
            .limit(limit)
        )
        rows = (await self.session.execute(stmt)).scalars().all()
        return list(reversed(rows))

    async def delete_last_message(self, user_id: str, conversation_id: uuid.UUID) -> Message | None:
        """Delete the conversation's newest message; the deleted row, None when it had none."""
        newest = (
            select(Message.id)
            .where(Message.conversation_id == conversation_id, Message.user_id == user_id)
            .order_by(Message.seq.desc())
            .limit(1)
            .scalar_subquery()
        )
        await self._unlink_sources(user_id, MemoryItem.source_message_id == newest)
        stmt = (
            delete(Message)
            .where(Message.user_id == user_id, Message.id == newest)
            .returning(Message)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def delete_messages(self, user_id: str, conversation_id: uuid.UUID) -> list[uuid.UUID]:
        """Delete every message of the conversation; the deleted ids."""
        of_conversation = select(Message.id).where(
            Message.conversation_id == conversation_id, Message.user_id == user_id
        )
        await self._unlink_sources(user_id, MemoryItem.source_message_id.in_(of_conversation))
        stmt = (
            delete(Message)
            .where(Message.conversation_id == conversation_id, Message.user_id == user_id)
            .returning(Message.id)
        )
        return list((await self.session.execute(stmt)).scalars().all())

    async def _unlink_sources(self, user_id: str, which: Any) -> None:
        """Clear the source link of the user's memories that point at messages about to be
        deleted (what ON DELETE SET NULL did: Citus refuses it on a key holding user_id, so
        the foreign key is NO ACTION since migration 0010_distributable)."""
        await self.session.execute(
            update(MemoryItem)
            .where(MemoryItem.user_id == user_id, which)
            .values(source_message_id=None)
        )
