"""Curated memory items."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import MemoryItem


@dataclass(frozen=True)
class NewMemory:
    id: uuid.UUID
    user_id: str
    content: str
    content_hash: str
    type: str
    embedding: Any
    embedding_model: str
    importance: float
    created_at: datetime | None
    expires_at: datetime | None
    source: str | None
    source_message_id: uuid.UUID | None
    metadata: dict[str, Any]


class MemoryRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def insert_many(self, items: Sequence[NewMemory]) -> list[uuid.UUID]:
        """Multi-row insert skipping rows whose (user_id, content_hash) exists; the new ids."""
        if not items:
            return []
        rows = []
        for m in items:
            row: dict[str, Any] = {
                "id": m.id,
                "user_id": m.user_id,
                "content": m.content,
                "content_hash": m.content_hash,
                "type": m.type,
                "embedding": m.embedding,
                "embedding_model": m.embedding_model,
                "importance": m.importance,
                "expires_at": m.expires_at,
                "source": m.source,
                "source_message_id": m.source_message_id,
                "metadata_": m.metadata,
            }
            if m.created_at is not None:
                row["created_at"] = m.created_at
            rows.append(row)
        inserted: list[uuid.UUID] = []
        # Rows with and without created_at differ in columns; insert the two groups separately.
        for group in (
            [r for r in rows if "created_at" in r],
            [r for r in rows if "created_at" not in r],
        ):
            if not group:
                continue
            stmt = (
                insert(MemoryItem)
                .values(group)
                .on_conflict_do_nothing(index_elements=["user_id", "content_hash"])
                .returning(MemoryItem.id)
            )
            inserted.extend((await self.session.execute(stmt)).scalars().all())
        return inserted

    async def get(
        self, user_id: str, item_id: uuid.UUID, *, include_deleted: bool = False
    ) -> MemoryItem | None:
        stmt = select(MemoryItem).where(MemoryItem.id == item_id, MemoryItem.user_id == user_id)
        if not include_deleted:
            stmt = stmt.where(MemoryItem.deleted_at.is_(None))
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def set_deleted(self, user_id: str, item_id: uuid.UUID, deleted: bool) -> bool:
        """Soft-delete or restore; False if the item is not this user's."""
        stmt = (
            update(MemoryItem)
            .where(MemoryItem.id == item_id, MemoryItem.user_id == user_id)
            .values(deleted_at=func.now() if deleted else None, updated_at=func.now())
            .returning(MemoryItem.id)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none() is not None
