"""The caller's own data: GET /v1/memories/{id}/history and GET /v1/export."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from app.http.deps import ResourcesDep, SessionDep, UserDep
from app.schemas.agent import MemoryHistory, MemoryOut
from app.services.portable import open_export
from app.services.supersession import SupersessionService

router = APIRouter(tags=["memories"])


@router.get(
    "/v1/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"application/x-ndjson": {}},
            "description": "JSON Lines: header, conversations, messages, memories (every "
            "version), end line with counts (a stream without it was cut short)",
        }
    },
)
async def export_own(
    user_id: UserDep,
    resources: ResourcesDep,
    embeddings: Annotated[bool, Query(description="include the stored vectors")] = False,
) -> StreamingResponse:
    """Everything the service holds about the caller, as one JSON Lines stream."""
    lines = await open_export(resources.sessionmaker, user_id, embeddings=embeddings)
    return StreamingResponse(lines, media_type="application/x-ndjson")


@router.get("/v1/memories/{item_id}/history", response_model=MemoryHistory)
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
