"""Sentence passages of messages (migration 0009_passages): written with their messages,
read by the rebuild; the query reads them in app/repositories/retrieval/ (passages.py)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.models.conversation import MessagePassage


@dataclass(frozen=True)
class NewPassage:
    message_id: uuid.UUID
    ord: int
    embedding: Any


class PassageRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def insert(self, user_id: str, model: str, passages: Sequence[NewPassage]) -> None:
        """Store passages of the user's messages (one executemany)."""
        if not passages:
            return
        rows = [
            {
                "message_id": p.message_id,
                "ord": p.ord,
                "user_id": user_id,
                "embedding": p.embedding,
                "embedding_model": model,
            }
            for p in passages
        ]
        await self.session.execute(insert(MessagePassage), rows)

    async def drop_other_models(self, user_id: str, model: str) -> int:
        """Delete the user's passages embedded by another model; how many."""
        result = await self.session.execute(
            text(
                "DELETE FROM message_passages "
                "WHERE user_id = :user_id AND embedding_model <> :model"
            ),
            {"user_id": user_id, "model": model},
        )
        return int(result.rowcount or 0)  # type: ignore[attr-defined]

    async def messages_without(
        self, user_id: str, model: str, *, after: uuid.UUID | None, limit: int
    ) -> Sequence[Any]:
        """A page (by id) of the user's messages with no passage of `model`: id, content,
        metadata. Messages of one sentence never get one, so a rebuild reads them again."""
        params: dict[str, Any] = {"user_id": user_id, "model": model, "limit": limit}
        if after is not None:
            params["after"] = after
        return (
            await self.session.execute(
                text(
                    "SELECT m.id, m.content, m.metadata FROM messages AS m "
                    "WHERE m.user_id = :user_id"
                    f"{' AND m.id > :after' if after is not None else ''} "
                    "AND NOT EXISTS (SELECT 1 FROM message_passages AS p "
                    "WHERE p.user_id = :user_id AND p.message_id = m.id "
                    "AND p.embedding_model = :model) "
                    "ORDER BY m.id LIMIT :limit"
                ),
                params,
            )
        ).all()
