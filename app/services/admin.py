"""Admin management of memory items: create, edit, soft-delete, restore, list."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import Cache
from app.errors import ConflictError, NotFoundError, found
from app.models import MemoryItem
from app.repositories.admin import AdminMemoryRepository, MemoryFilter
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.schemas.admin import AdminMemoryCreate, AdminMemoryCreateOne, AdminMemoryUpdate
from app.services.effects import invalidate_after_commit
from app.services.embedding import EmbeddingService, Priority
from app.services.memory import MemoryInput, MemoryService, content_hash
from app.services.supersession import SupersessionService


def memory_input(row: AdminMemoryCreate) -> MemoryInput:
    """The service's input for one validated admin row."""
    return MemoryInput(
        user_id=row.user_id,
        content=row.content,
        type=row.type,
        importance=row.importance,
        created_at=row.created_at,
        expires_at=row.expires_at,
        source=row.source,
        metadata=row.metadata,
        tags=tuple(row.tags),
    )


class AdminMemoryService:
    def __init__(
        self,
        session: AsyncSession,
        embeddings: EmbeddingService | None,
        cache: Cache | None = None,
    ) -> None:
        """`embeddings` may be None for callers that only read, delete or restore. With
        `cache`, a change drops its users' cached query results once it commits."""
        self.repo = AdminMemoryRepository(session)
        self.index = SearchIndexRepository(session)
        self.session = session
        self._embeddings = embeddings
        self.cache = cache

    @property
    def embeddings(self) -> EmbeddingService:
        if self._embeddings is None:
            raise RuntimeError("this AdminMemoryService was built without an embedder")
        return self._embeddings

    @property
    def memories(self) -> MemoryService:
        return MemoryService(self.session, self.embeddings)

    async def create_many(
        self, rows: Sequence[AdminMemoryCreate], *, priority: Priority = Priority.INTERACTIVE
    ) -> tuple[list[MemoryItem], list[tuple[int, uuid.UUID]]]:
        """Store new memories; returns them and (index, stored id) of each duplicate skipped."""
        created = set(
            await self.memories.create_many([memory_input(r) for r in rows], priority=priority)
        )
        stored: dict[tuple[str, str], uuid.UUID] = {}
        for user in dict.fromkeys(r.user_id for r in rows):
            hashes = [content_hash(r.content) for r in rows if r.user_id == user]
            for digest, item_id in (await self.repo.ids_by_hash(user, hashes)).items():
                stored[(user, digest)] = item_id
        new_ids: dict[str, list[uuid.UUID]] = {}
        order: list[uuid.UUID] = []
        duplicates: list[tuple[int, uuid.UUID]] = []
        for index, row in enumerate(rows):
            item_id = stored.get((row.user_id, content_hash(row.content)))
            if item_id is None:  # purged by a concurrent transaction: neither new nor a duplicate
                continue
            if item_id in created:
                created.discard(item_id)  # a repeat later in the request is a duplicate
                new_ids.setdefault(row.user_id, []).append(item_id)
                order.append(item_id)
            else:
                duplicates.append((index, item_id))
        found: dict[uuid.UUID, MemoryItem] = {}
        for user, ids in new_ids.items():
            found.update((m.id, m) for m in await self.repo.get_many(user, ids))
        invalidate_after_commit(self.session, self.cache, *new_ids)
        return [found[i] for i in order if i in found], duplicates

    async def supersede(self, row: AdminMemoryCreateOne) -> MemoryItem:
        """Store the row as the replacement of `row.supersedes` (valid from row.created_at,
        default now); returns the new version."""
        assert row.supersedes is not None
        fields = row.model_fields_set
        done = await SupersessionService(self.session, self.embeddings).supersede(
            row.user_id,
            row.supersedes,
            row.content,
            type=row.type,
            importance=row.importance,
            expires_at=row.expires_at,
            source=row.source if "source" in fields else None,
            source_message_id=None,
            metadata=row.metadata,
            observed_at=row.created_at,
            observed_field="body.created_at",
            tags=row.tags if "tags" in fields else None,
        )
        invalidate_after_commit(self.session, self.cache, row.user_id)
        return done.new

    async def history(self, user_id: str, item_id: uuid.UUID) -> list[MemoryItem]:
        """All versions of the user's memory, deleted ones too, oldest first."""
        service = SupersessionService(self.session, self.embeddings)
        return await service.history(user_id, item_id, include_deleted=True)

    async def get(self, user_id: str, item_id: uuid.UUID) -> MemoryItem:
        """The user's memory (deleted ones too); NotFoundError otherwise."""
        return await self._get(user_id, item_id)

    async def _get(self, user_id: str, item_id: uuid.UUID) -> MemoryItem:
        return found(await self.repo.get(user_id, item_id), "memory")

    async def list(
        self, filters: MemoryFilter, *, limit: int, offset: int
    ) -> tuple[Sequence[MemoryItem], int]:
        """A page of the user's memories matching the filters, and the total."""
        return await self.repo.list(filters, limit=limit, offset=offset)

    async def update(
        self, user_id: str, item_id: uuid.UUID, changes: AdminMemoryUpdate
    ) -> MemoryItem:
        """Change fields. A new content supersedes the item: it is closed and a new version
        (new id, linked back) holds the new text with the other changes; the new version is
        returned. Type, importance and expiry alone change the item in place."""
        item = await self._get(user_id, item_id)
        invalidate_after_commit(self.session, self.cache, user_id)
        fields = changes.model_fields_set
        if changes.content is not None and changes.content != item.content:
            if item.deleted_at is not None:
                raise ConflictError("restore the memory before changing its content")
            done = await SupersessionService(self.session, self.embeddings).supersede(
                user_id,
                item_id,
                changes.content,
                type=changes.type,
                importance=changes.importance,
                expires_at=changes.expires_at if "expires_at" in fields else item.expires_at,
                metadata=dict(item.metadata_),
                tags=changes.tags,
            )
            return done.new
        values: dict[str, Any] = {}
        if changes.type is not None:
            values["type"] = changes.type
        if changes.importance is not None:
            values["importance"] = changes.importance
        if "expires_at" in fields:
            values["expires_at"] = changes.expires_at
        if changes.tags is not None:
            values["tags"] = list(changes.tags)
        return await self._write(user_id, item_id, values)

    async def replace(self, item: MemoryItem, row: AdminMemoryCreate, vector: Any) -> MemoryItem:
        """Overwrite a memory with a near-duplicate row whose vector is already computed."""
        values = await self._content_values(item, row.content, vector)
        values["type"] = row.type
        for name in ("importance", "expires_at", "source", "tags"):
            if name in row.model_fields_set:
                values[name] = getattr(row, name)
        return await self._write(item.user_id, item.id, values)

    async def set_deleted(self, user_id: str, item_id: uuid.UUID, deleted: bool) -> MemoryItem:
        """Soft-delete or restore one of the user's memories."""
        item = await self.repo.set_deleted(user_id, item_id, deleted)
        if item is None:
            raise NotFoundError("memory not found")
        invalidate_after_commit(self.session, self.cache, user_id)
        return item

    async def _content_values(self, item: MemoryItem, content: str, vector: Any) -> dict[str, Any]:
        new_hash = content_hash(content)
        if new_hash != item.content_hash:
            clash = (await self.repo.ids_by_hash(item.user_id, [new_hash])).get(new_hash)
            if clash is not None and clash != item.id:
                raise ConflictError(f"memory {clash} of this user already has this content")
        # Postings hold the old text's lexemes: replace them.
        await self.index.reindex(item.user_id, [Document(item.id, Source.MEMORY, content)])
        return {
            "content": content,
            "content_hash": new_hash,
            "embedding": vector,
            "embedding_model": self.embeddings.model,
        }

    async def _write(self, user_id: str, item_id: uuid.UUID, values: dict[str, Any]) -> MemoryItem:
        if not values:
            return await self._get(user_id, item_id)
        item = await self.repo.update(user_id, item_id, values)
        if item is None:
            raise NotFoundError("memory not found")
        return item
