"""Per-user API keys over HTTP (admin key): create, list, revoke; as `pgrecall keys`."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, status
from pydantic import AfterValidator

from app.errors import ValidationFailedError
from app.http.deps import AdminSessionDep, ResourcesDep
from app.schemas.common import USER_ID_PATTERN_TEXT, check_user_id
from app.schemas.keys import KeyCreate, KeyCreated, KeyOut, KeyPage
from app.services.api_keys import ApiKeyService, parse_duration

router = APIRouter(prefix="/v1/admin/keys", tags=["admin"])

UserFilter = Annotated[
    str | None,
    Query(description="only this user's keys", json_schema_extra={"pattern": USER_ID_PATTERN_TEXT}),
    AfterValidator(lambda v: check_user_id(v) if v is not None else v),
]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=KeyCreated)
async def create_key(body: KeyCreate, session: AdminSessionDep) -> KeyCreated:
    """A key for the user; its token is in this answer only (only its hash is stored)."""
    try:
        lifetime = parse_duration(body.expires_in) if body.expires_in is not None else None
    except ValueError as exc:
        raise ValidationFailedError(f"expires_in {exc}", "body.expires_in") from None
    created = await ApiKeyService(session).create(
        body.user_id, body.scope, lifetime, agent_id=body.agent_id
    )
    return KeyCreated(key=KeyOut.model_validate(created.key), token=created.token)


@router.get("", response_model=KeyPage)
async def list_keys(
    session: AdminSessionDep,
    user_id: UserFilter = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> KeyPage:
    """Keys (never tokens), newest first; one user's with `user_id`."""
    rows = await ApiKeyService(session).list(user_id, limit=limit + 1, offset=offset)
    items = [KeyOut.model_validate(k) for k in rows[:limit]]
    return KeyPage(items=items, next_offset=offset + limit if len(rows) > limit else None)


@router.post("/{key_id}/revoke", response_model=KeyOut)
async def revoke_key(
    key_id: uuid.UUID, session: AdminSessionDep, resources: ResourcesDep
) -> KeyOut:
    """Revoke a key for good (idempotent); this process refuses it at once, others within
    PGRECALL_KEY_CACHE_TTL_S."""
    key = await ApiKeyService(session, resources.keys).revoke(key_id)
    return KeyOut.model_validate(key)
