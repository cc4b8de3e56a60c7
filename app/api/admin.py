"""Admin routes (admin key): memory item management under /v1/admin."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Response, status
from pydantic import AfterValidator
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain import MemoryType
from app.http.deps import AdminSessionDep, ResourcesDep
from app.schemas.admin import (
    AdminBulkResult,
    AdminMemoryBulkCreate,
    AdminMemoryCreateOne,
    AdminMemoryHistory,
    AdminMemoryOut,
    AdminMemoryPage,
    AdminMemoryUpdate,
    DuplicateOut,
)
from app.schemas.common import (
    STORABLE_PATTERN,
    USER_ID_PATTERN_TEXT,
    Timestamp,
    check_storable,
    check_user_id,
)
from app.services.admin import AdminMemoryService, MemoryFilter
from app.services.embedding import Priority

router = APIRouter(prefix="/v1/admin", tags=["admin"])

UserQuery = Annotated[
    str,
    Query(
        description="the user the memory belongs to",
        json_schema_extra={"pattern": USER_ID_PATTERN_TEXT},
    ),
    AfterValidator(check_user_id),
]
SearchText = Annotated[
    str,
    Query(
        max_length=1000,
        description="full-text search",
        json_schema_extra={"pattern": STORABLE_PATTERN},
    ),
    AfterValidator(check_storable),
]


def _service(session: AsyncSession, resources: ResourcesDep) -> AdminMemoryService:
    return AdminMemoryService(session, resources.embeddings, resources.cache)


@router.post(
    "/memories",
    response_model=AdminMemoryOut,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": AdminMemoryOut, "description": "the user already had this text"}},
)
async def create_memory(
    body: AdminMemoryCreateOne,
    session: AdminSessionDep,
    resources: ResourcesDep,
    response: Response,
) -> AdminMemoryOut:
    """Create one memory; 201, or 200 with the stored item when the user already has this text.
    With `supersedes`, the new memory replaces that one (409 if the text belongs to another)."""
    if body.supersedes is not None:
        done = await _service(session, resources).supersede(body)
        return AdminMemoryOut.model_validate(done)
    items, duplicates = await _service(session, resources).create_many([body])
    if duplicates:
        response.status_code = status.HTTP_200_OK
        existing = await _service(session, resources).get(body.user_id, duplicates[0][1])
        return AdminMemoryOut.model_validate(existing)
    return AdminMemoryOut.model_validate(items[0])


@router.post("/memories:bulk", response_model=AdminBulkResult, status_code=status.HTTP_201_CREATED)
async def create_memories(
    body: AdminMemoryBulkCreate, session: AdminSessionDep, resources: ResourcesDep
) -> AdminBulkResult:
    """Create up to 1000 memories in one transaction; texts a user already has are reported."""
    items, duplicates = await _service(session, resources).create_many(
        body.items, priority=Priority.BULK
    )
    return AdminBulkResult(
        items=[AdminMemoryOut.model_validate(m) for m in items],
        duplicates=[DuplicateOut(index=i, id=item_id) for i, item_id in duplicates],
    )


@router.get("/memories", response_model=AdminMemoryPage)
async def list_memories(
    session: AdminSessionDep,
    resources: ResourcesDep,
    user_id: UserQuery,
    type_: Annotated[MemoryType | None, Query(alias="type")] = None,
    q: SearchText | None = None,
    created_after: Timestamp | None = None,
    created_before: Timestamp | None = None,
    include_deleted: bool = False,
    include_superseded: Annotated[
        bool, Query(description="also earlier versions that were superseded")
    ] = False,
    evicted: Annotated[
        bool, Query(description="only memories the per-user cap soft-deleted (restorable)")
    ] = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> AdminMemoryPage:
    """One user's memories, newest first, filtered by type, text and creation time (or only
    those the per-user cap evicted)."""
    filters = MemoryFilter(
        user_id=user_id,
        type=type_,
        q=q or None,
        created_after=created_after,
        created_before=created_before,
        include_deleted=include_deleted,
        include_superseded=include_superseded,
        evicted_only=evicted,
    )
    items, total = await _service(session, resources).list(filters, limit=limit, offset=offset)
    return AdminMemoryPage(
        items=[AdminMemoryOut.model_validate(m) for m in items],
        total=total,
        next_offset=offset + limit if offset + limit < total else None,
    )


@router.get("/memories/{item_id}", response_model=AdminMemoryOut)
async def get_memory(
    item_id: uuid.UUID,
    user_id: UserQuery,
    session: AdminSessionDep,
    resources: ResourcesDep,
) -> AdminMemoryOut:
    """One memory of the user, deleted or not (404 for another user's id)."""
    item = await _service(session, resources).get(user_id, item_id)
    return AdminMemoryOut.model_validate(item)


@router.get("/memories/{item_id}/history", response_model=AdminMemoryHistory)
async def memory_history(
    item_id: uuid.UUID,
    user_id: UserQuery,
    session: AdminSessionDep,
    resources: ResourcesDep,
) -> AdminMemoryHistory:
    """Every version of the memory (older and newer, deleted ones too), oldest first."""
    versions = await _service(session, resources).history(user_id, item_id)
    current = next((m.id for m in versions if m.valid_to is None and m.deleted_at is None), None)
    return AdminMemoryHistory(
        id=item_id,
        current=current,
        versions=[AdminMemoryOut.model_validate(m) for m in versions],
    )


@router.patch("/memories/{item_id}", response_model=AdminMemoryOut)
async def update_memory(
    item_id: uuid.UUID,
    body: AdminMemoryUpdate,
    user_id: UserQuery,
    session: AdminSessionDep,
    resources: ResourcesDep,
) -> AdminMemoryOut:
    """Change type, importance or expiry in place; a new content supersedes the memory: the
    answer is the new version (a new id, `supersedes_id` = this one)."""
    item = await _service(session, resources).update(user_id, item_id, body)
    return AdminMemoryOut.model_validate(item)


@router.delete("/memories/{item_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_memory(
    item_id: uuid.UUID,
    user_id: UserQuery,
    session: AdminSessionDep,
    resources: ResourcesDep,
) -> Response:
    """Soft-delete: the memory stops being retrieved and can be restored."""
    await _service(session, resources).set_deleted(user_id, item_id, True)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/memories/{item_id}/restore", response_model=AdminMemoryOut)
async def restore_memory(
    item_id: uuid.UUID,
    user_id: UserQuery,
    session: AdminSessionDep,
    resources: ResourcesDep,
) -> AdminMemoryOut:
    """Undo a soft delete."""
    item = await _service(session, resources).set_deleted(user_id, item_id, False)
    return AdminMemoryOut.model_validate(item)
