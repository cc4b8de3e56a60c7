"""Supersession: a memory that stops being true is closed and linked to what replaced it.

`SupersessionService.supersede` is the one way to replace a memory's meaning. Admin content
edits, `save_memory` (explicit `supersedes`, or a near-duplicate that says something new), the
admin create API with `supersedes`, and LLM extraction's UPDATE all call it. In the caller's
transaction it:

1. closes the old item (valid_to = the observation time) - only a valid, not deleted item of
   this user (NotFoundError otherwise; ConflictError if it was superseded already: chains are
   linear and the row lock serialises two concurrent supersessions of one item);
2. inserts the new item with supersedes_id = the old id, created_at = valid_from = the same
   time, so the two validity windows meet exactly: `as_of` before it returns the old item,
   from it on the new one;
3. indexes the new item's keywords. The old item keeps its postings and vector: it is history,
   still found by `as_of` queries.

Both ends of a link always belong to the same user: the old item is read through the user's own
scope. The observation time defaults to the transaction's now(); a given time must not be in
the future (validity never ends in the future, so "valid now" is just `valid_to IS NULL`) and
not before the old item became valid. Services flush, never commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import ConflictError, NotFoundError, ValidationFailedError
from app.models import MemoryItem
from app.repositories.admin import AdminMemoryRepository
from app.repositories.memory import MemoryRepository, NewMemory
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.services.embedding import EmbeddingService, Priority
from app.services.memory import content_hash

_KEEP: Any = object()  # "take it from the old item"


@dataclass(frozen=True)
class Superseded:
    old: MemoryItem  # closed: valid_to set
    new: MemoryItem  # valid, supersedes_id = old.id


class SupersessionService:
    def __init__(self, session: AsyncSession, embeddings: EmbeddingService) -> None:
        self.memories = MemoryRepository(session)
        self.admin = AdminMemoryRepository(session)
        self.index = SearchIndexRepository(session)
        self.embeddings = embeddings

    async def supersede(
        self,
        user_id: str,
        old_id: uuid.UUID,
        content: str,
        *,
        type: str | None = None,
        importance: float | None = None,
        expires_at: datetime | None = None,
        source: str | None = _KEEP,
        source_message_id: uuid.UUID | None = _KEEP,
        metadata: dict[str, Any] | None = None,
        observed_at: datetime | None = None,
        vector: Any = None,
        observed_field: str = "observed_at",
        tags: Sequence[str] | None = None,
    ) -> Superseded:
        """Close the user's memory `old_id` at `observed_at` (default now) and store `content`
        as its replacement; type, importance, source and source message default to the old
        item's, metadata to {}, tags to the old item's. `vector` skips embedding when the
        caller has it already; `observed_field` names observed_at in errors as the caller's
        input calls it.
        After an error the transaction must be rolled back (the old item may be closed)."""
        name = observed_field.rsplit(".", 1)[-1]
        if observed_at is not None and observed_at.utcoffset() is None:
            raise ValidationFailedError(f"{name} needs a time zone", observed_field)
        now = await self.memories.now()
        at = now if observed_at is None else observed_at
        if at > now:
            raise ValidationFailedError(f"{name} must not be in the future", observed_field)
        current = await self.memories.get(user_id, old_id)
        if current is None:
            raise NotFoundError("memory not found")
        if current.valid_to is not None:
            newer = await self.memories.successor(user_id, old_id)
            raise ConflictError(f"memory {old_id} was already superseded by {newer}")
        if at < current.valid_from:
            raise ValidationFailedError(
                f"{name} is before the superseded memory became valid", observed_field
            )
        digest = content_hash(content)
        if digest != current.content_hash:
            clash = (await self.admin.ids_by_hash(user_id, [digest])).get(digest)
            if clash is not None:
                raise ConflictError(f"memory {clash} of this user already has this content")
        if vector is None:
            (vector,) = await self.embeddings.embed([content], priority=Priority.INTERACTIVE)
        old = await self.memories.close(user_id, old_id, at)
        if old is None:  # superseded, deleted or purged since it was read
            raise ConflictError(f"memory {old_id} changed concurrently; retry")
        new = NewMemory(
            id=uuid.uuid4(),
            user_id=user_id,
            content=content,
            content_hash=digest,
            type=type or old.type,
            embedding=vector,
            embedding_model=self.embeddings.model,
            importance=old.importance if importance is None else importance,
            created_at=at,
            expires_at=expires_at,
            source=old.source if source is _KEEP else source,
            source_message_id=(
                old.source_message_id if source_message_id is _KEEP else source_message_id
            ),
            metadata=metadata or {},
            supersedes_id=old.id,
            tags=tuple(old.tags if tags is None else tags),
        )
        if not await self.memories.insert_many([new]):
            raise ConflictError("a memory of this user got this content concurrently; retry")
        await self.index.index(user_id, [Document(new.id, Source.MEMORY, content)])
        stored = await self.memories.get(user_id, new.id)
        assert stored is not None  # inserted in this transaction
        return Superseded(old, stored)

    async def history(
        self, user_id: str, item_id: uuid.UUID, *, include_deleted: bool
    ) -> list[MemoryItem]:
        """The versions of the user's memory, oldest first (NotFoundError if it is not theirs,
        or is deleted and deleted versions are not shown)."""
        chain = await self.memories.chain(user_id, item_id)
        asked = next((m for m in chain if m.id == item_id), None)
        if asked is None or (asked.deleted_at is not None and not include_deleted):
            raise NotFoundError("memory not found")
        return chain if include_deleted else [m for m in chain if m.deleted_at is None]
