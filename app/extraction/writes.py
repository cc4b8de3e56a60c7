"""Where extraction's decisions become memories: ADD stores a new item, UPDATE supersedes one.

Called inside the batch's transaction (user-scoped); services flush, never commit.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.repositories.admin import AdminMemoryRepository
from app.services.embedding import EmbeddingService
from app.services.memory import MemoryInput, MemoryService

ORIGIN = "extraction"


async def add_memory(
    session: AsyncSession,
    embeddings: EmbeddingService,
    user_id: str,
    content: str,
    type: str,
    *,
    observed_at: datetime,
    source_message_id: uuid.UUID,
    metadata: dict[str, Any],
) -> uuid.UUID | None:
    """A new memory observed at the turn's time; None when the user has this text already."""
    created = await MemoryService(session, embeddings).create_many(
        [
            MemoryInput(
                user_id=user_id,
                content=content,
                type=type,
                created_at=observed_at,
                source=ORIGIN,
                source_message_id=source_message_id,
                metadata=metadata,
            )
        ]
    )
    return created[0] if created else None


async def supersede_memory(
    session: AsyncSession,
    embeddings: EmbeddingService,
    user_id: str,
    old_id: uuid.UUID,
    content: str,
    type: str,
    *,
    observed_at: datetime,
    source_message_id: uuid.UUID,
    metadata: dict[str, Any],
) -> uuid.UUID | None:
    """Replace the user's memory `old_id` by `content`, observed at the turn's time.

    Until supersession (issue 14 part A) is merged, the replaced memory is soft-deleted; then
    this calls SupersessionService.supersede, which closes it and links the new one.
    """
    new_id = await add_memory(
        session,
        embeddings,
        user_id,
        content,
        type,
        observed_at=observed_at,
        source_message_id=source_message_id,
        metadata=metadata,
    )
    if new_id is None:
        return None
    await AdminMemoryRepository(session).set_deleted(user_id, old_id, True)
    return new_id
