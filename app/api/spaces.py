"""Shared spaces over HTTP (docs/agents.md): the admin key manages spaces and their members'
grants under /v1/admin/spaces; a member lists its own grants and saves memories into a space it
may write under /v1/spaces. Queries read spaces named in X-Spaces (every door)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response, status
from pydantic import AfterValidator

from app.domain import SPACE_ID_PATTERN_TEXT, space_owner
from app.http.deps import AdminSessionDep, ResourcesDep, UserDep, WriteUserDep
from app.runtime import save_memory_for, user_transaction
from app.schemas.agent import SaveMemoryArgs, SaveMemoryResult
from app.schemas.common import USER_ID_PATTERN_TEXT, check_user_id
from app.schemas.spaces import (
    MemberGrant,
    MemberList,
    MemberOut,
    SpaceCreate,
    SpaceList,
    SpaceOut,
)
from app.services.spaces import SpaceService

admin = APIRouter(prefix="/v1/admin/spaces", tags=["admin"])
router = APIRouter(prefix="/v1/spaces", tags=["spaces"])

SpacePath = Annotated[str, Path(pattern=SPACE_ID_PATTERN_TEXT, max_length=64)]
MemberPath = Annotated[
    str, Path(json_schema_extra={"pattern": USER_ID_PATTERN_TEXT}), AfterValidator(check_user_id)
]


@admin.post("", status_code=status.HTTP_201_CREATED, response_model=SpaceOut)
async def create_space(body: SpaceCreate, session: AdminSessionDep) -> SpaceOut:
    return SpaceOut.model_validate(await SpaceService(session).create(body.id, body.description))


@admin.get("", response_model=SpaceList)
async def list_spaces(session: AdminSessionDep) -> SpaceList:
    spaces = await SpaceService(session).list()
    return SpaceList(spaces=[SpaceOut.model_validate(s) for s in spaces])


@admin.delete("/{space_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_space(space_id: SpacePath, session: AdminSessionDep) -> Response:
    """The space, its grants and its memories (no member's own memory is touched)."""
    await SpaceService(session).delete(space_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@admin.get("/{space_id}/members", response_model=MemberList)
async def list_members(space_id: SpacePath, session: AdminSessionDep) -> MemberList:
    members = await SpaceService(session).members(space_id)
    return MemberList(members=[MemberOut.model_validate(m) for m in members])


@admin.put("/{space_id}/members/{user_id}", response_model=MemberOut)
async def grant_member(
    space_id: SpacePath, user_id: MemberPath, body: MemberGrant, session: AdminSessionDep
) -> MemberOut:
    """Grant the user read or write access (or change it); effective on its next request."""
    member = await SpaceService(session).grant(space_id, user_id, body.access)
    return MemberOut.model_validate(member)


@admin.delete("/{space_id}/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT)
async def revoke_member(
    space_id: SpacePath, user_id: MemberPath, session: AdminSessionDep
) -> Response:
    """Revoke the user's grant; its next request reads and writes nothing of the space."""
    await SpaceService(session).revoke(space_id, user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("", response_model=MemberList)
async def my_spaces(user_id: UserDep, resources: ResourcesDep) -> MemberList:
    """The caller's grants: the spaces its queries may name in X-Spaces."""
    async with user_transaction(resources.sessionmaker, user_id) as session:
        members = await SpaceService(session).memberships(user_id)
        return MemberList(members=[MemberOut.model_validate(m) for m in members])


@router.post(
    "/{space_id}/memories", status_code=status.HTTP_201_CREATED, response_model=SaveMemoryResult
)
async def save_to_space(
    space_id: SpacePath, body: SaveMemoryArgs, user_id: WriteUserDep, resources: ResourcesDep
) -> SaveMemoryResult:
    """Save a memory into the space (a write grant and a writing key needed): the space's, not
    the caller's nor its agent's, so every member reads it."""
    # The user's unscoped transaction: a space's memory belongs to no agent or run.
    async with user_transaction(resources.sessionmaker, user_id) as session:
        await SpaceService(session).require(user_id, space_id, write=True)
        return await save_memory_for(resources, session, space_owner(space_id), body)
