"""The chat proxy's idempotent user turns: a retried request (same Idempotency-Key) finds the
turn its first attempt stored instead of storing it again."""

from __future__ import annotations

import uuid

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import Message

# metadata key of a proxied user turn stored under an Idempotency-Key.
IDEMPOTENCY_KEY = "idempotency_key"


class ChatTurnRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def lock_key(self, user_id: str, key: str) -> None:
        """Hold (user, key) until the transaction ends: two attempts of one request that run
        at once store the user's turn once."""
        await self.session.execute(
            text("SELECT pg_advisory_xact_lock(hashtextextended(:user_id || chr(31) || :key, 25))"),
            {"user_id": user_id, "key": key},
        )

    async def find(self, user_id: str, key: str) -> tuple[uuid.UUID, uuid.UUID] | None:
        """(message id, conversation id) of the user's turn stored under `key`, or None."""
        stmt = (
            select(Message.id, Message.conversation_id)
            .where(
                Message.user_id == user_id,
                Message.role == "user",
                Message.metadata_[IDEMPOTENCY_KEY].astext == key,
            )
            .order_by(Message.seq)
            .limit(1)
        )
        row = (await self.session.execute(stmt)).first()
        return None if row is None else (row[0], row[1])
