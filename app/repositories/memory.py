"""Curated memory items."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import MemoryItem

# Longest chain the history lookups walk (a guard, not a limit anyone should reach).
_MAX_CHAIN = 10_000


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
    supersedes_id: uuid.UUID | None = None
    tags: Sequence[str] = ()


# Only valid items are unique by text (the partial index uq_memory_items_user_content_hash).
_CURRENT = MemoryItem.valid_to.is_(None)


class MemoryRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def insert_many(self, items: Sequence[NewMemory]) -> list[uuid.UUID]:
        """Multi-row insert skipping rows whose text is a valid memory of their scope already (user,
        agent, run: the rows take the transaction's agent and run); the new ids."""
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
                "supersedes_id": m.supersedes_id,
                "tags": list(m.tags),
            }
            if m.created_at is not None:
                # An item is valid from when it was stated (valid_from = created_at, always).
                row["created_at"] = m.created_at
                row["valid_from"] = m.created_at
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
                .on_conflict_do_nothing(
                    index_elements=["user_id", "content_hash", "agent_id", "run_id"],
                    index_where=_CURRENT,
                )
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
            .values(
                deleted_at=func.now() if deleted else None,
                **({} if deleted else {"evicted_at": None}),
                updated_at=func.now(),
            )
            .returning(MemoryItem.id)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none() is not None

    async def now(self) -> datetime:
        """The transaction's time (what now() and column defaults write)."""
        return (await self.session.execute(select(func.now()))).scalar_one()

    async def close(self, user_id: str, item_id: uuid.UUID, at: datetime) -> MemoryItem | None:
        """End the validity of the user's valid, not deleted item at `at`; None if it is not
        such an item (missing, another user's, deleted, or already superseded). The row lock
        serialises concurrent supersessions of one item."""
        stmt = (
            update(MemoryItem)
            .where(
                MemoryItem.id == item_id,
                MemoryItem.user_id == user_id,
                MemoryItem.deleted_at.is_(None),
                _CURRENT,
            )
            .values(valid_to=at, updated_at=func.now())
            .returning(MemoryItem)
            .execution_options(populate_existing=True)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def successor(self, user_id: str, item_id: uuid.UUID) -> uuid.UUID | None:
        """The id of the item that superseded this one, if any."""
        stmt = select(MemoryItem.id).where(
            MemoryItem.user_id == user_id, MemoryItem.supersedes_id == item_id
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

    async def chain(self, user_id: str, item_id: uuid.UUID) -> list[MemoryItem]:
        """The item's whole supersession chain (older and newer versions), oldest first; empty
        if the item is not this user's. Deleted versions included (callers decide)."""
        sql = text(
            """
            WITH RECURSIVE older AS (
                SELECT m.id, m.supersedes_id, 0 AS depth FROM memory_items AS m
                WHERE m.user_id = :user_id AND m.id = :item_id
                UNION ALL
                SELECT p.id, p.supersedes_id, o.depth - 1 FROM memory_items AS p
                JOIN older AS o ON p.id = o.supersedes_id
                WHERE p.user_id = :user_id AND o.depth > -CAST(:max_depth AS int)
            ), newer AS (
                SELECT m.id, 0 AS depth FROM memory_items AS m
                WHERE m.user_id = :user_id AND m.id = :item_id
                UNION ALL
                SELECT n.id, w.depth + 1 FROM memory_items AS n
                JOIN newer AS w ON n.supersedes_id = w.id
                WHERE n.user_id = :user_id AND w.depth < CAST(:max_depth AS int)
            )
            SELECT id, depth FROM older UNION SELECT id, depth FROM newer ORDER BY depth
            """
        )
        params = {"user_id": user_id, "item_id": item_id, "max_depth": _MAX_CHAIN}
        order = [r.id for r in (await self.session.execute(sql, params)).all()]
        if not order:
            return []
        stmt = select(MemoryItem).where(MemoryItem.user_id == user_id, MemoryItem.id.in_(order))
        found = {m.id: m for m in (await self.session.execute(stmt)).scalars().all()}
        return [found[i] for i in order if i in found]
