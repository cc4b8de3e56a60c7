"""The chat proxy's idempotent user turns (app/proxy/turns.py): find the turn an earlier
attempt of a request stored under its Idempotency-Key, and serialise attempts on the key."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession

from app.repositories.chat_turns import IDEMPOTENCY_KEY, ChatTurnRepository

__all__ = ["IDEMPOTENCY_KEY", "ChatTurnService"]


class ChatTurnService:
    def __init__(self, session: AsyncSession) -> None:
        self.repo = ChatTurnRepository(session)

    async def stored_turn(self, user_id: str, key: str) -> uuid.UUID | None:
        """The conversation of the user's turn stored under `key`, or None."""
        found = await self.repo.find(user_id, key)
        return None if found is None else found[1]

    async def claim(self, user_id: str, key: str) -> uuid.UUID | None:
        """Hold the key until the transaction ends, then `stored_turn`: attempts running at once
        store the turn once."""
        await self.repo.lock_key(user_id, key)
        return await self.stored_turn(user_id, key)
