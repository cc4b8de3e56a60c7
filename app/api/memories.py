"""The caller's own data: GET /v1/memories/{id}/history and GET /v1/export."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession

from app.api.deps import ResourcesDep, SessionDep, UserDep
from app.db import user_session
from app.repositories.portable import PortableRepository
from app.schemas.agent import MemoryHistory, MemoryOut
from app.services.portable import SNAPSHOT, export_user
from app.services.supersession import SupersessionService

log = logging.getLogger(__name__)
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
    session = user_session(resources.sessionmaker, user_id)
    try:
        # One snapshot for the whole stream; a database failure here is a 503, not a cut stream.
        await session.connection(execution_options=SNAPSHOT)
        await PortableRepository(session).counts(user_id)
    except BaseException:
        await session.close()
        raise
    return StreamingResponse(
        _lines(session, user_id, embeddings), media_type="application/x-ndjson"
    )


async def _lines(session: AsyncSession, user_id: str, embeddings: bool) -> AsyncIterator[str]:
    try:
        async for line in export_user(session, user_id, embeddings=embeddings):
            yield json.dumps(line, ensure_ascii=False) + "\n"
    except Exception:
        # Headers are sent: the missing end line tells the client the export is incomplete.
        log.exception("export of a user failed mid-stream")
    finally:
        await session.close()


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
