"""Curated memory items: written by admins and imports, read by query_memory."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.repositories.memory import MemoryRepository, NewMemory
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.services.embedding import EmbeddingService, Priority


def content_hash(content: str) -> str:
    """Identity of a memory's text within one user (whitespace-normalised)."""
    return hashlib.sha256(" ".join(content.split()).encode()).hexdigest()


@dataclass(frozen=True)
class MemoryInput:
    user_id: str
    content: str
    type: str
    importance: float = 0.5
    created_at: datetime | None = None
    expires_at: datetime | None = None
    source: str | None = None
    source_message_id: uuid.UUID | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


class MemoryService:
    def __init__(self, session: AsyncSession, embeddings: EmbeddingService) -> None:
        self.repo = MemoryRepository(session)
        self.index = SearchIndexRepository(session)
        self.embeddings = embeddings

    async def create_many(
        self, items: Sequence[MemoryInput], *, priority: Priority = Priority.INTERACTIVE
    ) -> list[uuid.UUID]:
        """Embed and store new memories with their keyword postings; duplicates are skipped."""
        if not items:
            return []
        vectors = await self.embeddings.embed([m.content for m in items], priority=priority)
        return await self.store(items, vectors)

    async def store(self, items: Sequence[MemoryInput], vectors: Any) -> list[uuid.UUID]:
        """Store memories whose vectors are already computed (batched imports); as create_many."""
        new = [
            NewMemory(
                id=uuid.uuid4(),
                user_id=m.user_id,
                content=m.content,
                content_hash=content_hash(m.content),
                type=m.type,
                embedding=vectors[i],
                embedding_model=self.embeddings.model,
                importance=m.importance,
                created_at=m.created_at,
                expires_at=m.expires_at,
                source=m.source,
                source_message_id=m.source_message_id,
                metadata=m.metadata,
                tags=m.tags,
            )
            for i, m in enumerate(items)
        ]
        inserted = set(await self.repo.insert_many(new))
        by_user: dict[str, list[Document]] = {}
        for m in new:
            if m.id in inserted:
                by_user.setdefault(m.user_id, []).append(Document(m.id, Source.MEMORY, m.content))
        for user_id, postings in by_user.items():
            await self.index.index(user_id, postings)
        return [m.id for m in new if m.id in inserted]

    async def set_deleted(self, user_id: str, item_id: uuid.UUID, deleted: bool) -> bool:
        """Soft-delete (or restore) one of the user's memories."""
        return await self.repo.set_deleted(user_id, item_id, deleted)
