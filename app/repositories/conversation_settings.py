"""Conversation-level settings (the extraction override) and the rolling summary (0013).

Every statement names its user: the summary is written by the extraction worker in a session
scoped to the batch's user, and read by the session route and the chat proxy for the caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Conversation, Message


@dataclass(frozen=True)
class Summary:
    text: str | None
    seq: int | None  # the last message it covers
    updated_at: datetime | None
    extraction: bool | None  # the conversation's own extraction setting
    last_user_seq: int | None  # the conversation's newest user turn


class ConversationSettingsRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def update(
        self, user_id: str, conversation_id: uuid.UUID, values: dict[str, object]
    ) -> Conversation | None:
        """Set `title` and/or `extraction`; the row, None when it is not this user's."""
        stmt = (
            update(Conversation)
            .where(Conversation.id == conversation_id, Conversation.user_id == user_id)
            .values(**values, updated_at=func.now())
            .returning(Conversation)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def summary(self, user_id: str, conversation_id: uuid.UUID) -> Summary | None:
        """The conversation's summary; None when the conversation is not this user's."""
        last_user = (
            select(func.max(Message.seq))
            .where(
                Message.conversation_id == conversation_id,
                Message.user_id == user_id,
                Message.role == "user",
            )
            .scalar_subquery()
        )
        row = (
            await self.session.execute(
                select(
                    Conversation.summary,
                    Conversation.summary_seq,
                    Conversation.summary_updated_at,
                    Conversation.extraction,
                    last_user,
                ).where(Conversation.id == conversation_id, Conversation.user_id == user_id)
            )
        ).one_or_none()
        return None if row is None else Summary(*row)

    async def messages_after(
        self, user_id: str, conversation_id: uuid.UUID, after_seq: int | None, limit: int
    ) -> Sequence[Message]:
        """The newest `limit` messages after `after_seq`, oldest first."""
        stmt = select(Message).where(
            Message.conversation_id == conversation_id, Message.user_id == user_id
        )
        if after_seq is not None:
            stmt = stmt.where(Message.seq > after_seq)
        stmt = stmt.order_by(Message.seq.desc()).limit(limit)
        return list(reversed((await self.session.execute(stmt)).scalars().all()))

    async def save_summary(
        self,
        user_id: str,
        conversation_id: uuid.UUID,
        text: str,
        seq: int,
        previous_seq: int | None,
    ) -> bool:
        """Store a summary through `seq`, only over the one it was built from (two workers
        summarising at once: the later one built from a stale summary stores nothing)."""
        stmt = (
            update(Conversation)
            .where(
                Conversation.id == conversation_id,
                Conversation.user_id == user_id,
                Conversation.summary_seq.is_not_distinct_from(previous_seq),
            )
            .values(summary=text, summary_seq=seq, summary_updated_at=func.now())
            .returning(Conversation.id)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none() is not None
