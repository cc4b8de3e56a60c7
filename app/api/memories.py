"""The caller's own memories: GET /v1/memories/{id}/history."""

from __future__ import annotations

import uuid

from fastapi import APIRouter

from app.api.deps import ResourcesDep, SessionDep, UserDep
from app.schemas.agent import MemoryHistory, MemoryOut
from app.services.supersession import SupersessionService

router = APIRouter(prefix="/v1/memories", tags=["memories"])


@router.get("/{item_id}/history", response_model=MemoryHistory)
async def memory_history(
    item_id: uuid.UUID, user_id: UserDep, session: SessionDep, resources: ResourcesDep
) -> MemoryHistory:
    """The versions of one of the caller's memories, oldest first (404 for any other id)."""
    service = SupersessionService(session, resources.embeddings)
    versions = await service.history(user_id, item_id, include_deleted=False)
    current = next((m.id for m in versions if m.valid_to is None), None)
    return MemoryHistory(
        id=item_id, current=current, versions=[MemoryOut.model_validate(m) for m in versions]
    )
