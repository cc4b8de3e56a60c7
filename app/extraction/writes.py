"""Where extraction's decisions become memories: ADD stores a new item, UPDATE supersedes one.

Called inside the batch's transaction (user-scoped); services flush, never commit.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import NotFoundError
from app.repositories.admin import AdminMemoryRepository
from app.services.embedding import EmbeddingService
from app.services.memory import MemoryInput, MemoryService, content_hash
from app.services.supersession import SupersessionService

ORIGIN = "extraction"
_NOW_SLACK = timedelta(seconds=5)


async def write_fact(
    session: AsyncSession,
    embeddings: EmbeddingService,
    user_id: str,
    content: str,
    type: str,
    *,
    replaces: uuid.UUID | None,
    observed_at: datetime,
    source_message_id: uuid.UUID,
    metadata: dict[str, Any],
) -> uuid.UUID | None:
    """ADD (`replaces` None): a new memory observed at the turn's time; None when the user has
    this text already. UPDATE: replace the user's memory `replaces` by `content`
    (SupersessionService: the old item is closed, the new one linked to it), observed at the
    turn's time; None when it says the same.

    An UPDATE raises what supersede raises (NotFoundError, ConflictError: replaced meanwhile, or
    another valid memory has this text); the caller drops that fact.
    """
    if replaces is None:
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
    old = await AdminMemoryRepository(session).get(user_id, replaces)
    if old is None:
        raise NotFoundError("memory not found")
    if content_hash(content) == old.content_hash:
        return None
    # Validity windows never start before the memory they replace, nor in the future: a turn
    # imported with an older date than the memory, or with a clock ahead of the database's.
    at: datetime | None = max(observed_at, old.valid_from)
    if at is not None and at > datetime.now(UTC) - _NOW_SLACK:
        at = None  # the transaction's now()
    done = await SupersessionService(session, embeddings).supersede(
        user_id,
        replaces,
        content,
        type=type,
        source=ORIGIN,
        source_message_id=source_message_id,
        metadata=metadata,
        observed_at=at,
    )
    return done.new.id
