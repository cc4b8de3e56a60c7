"""Console pages of shared spaces (docs/agents.md): list and create them, a space's members
with grant, change and revoke, and deleting a space. Every statement runs in an audited admin
session through the same service as the admin API (app/services/spaces.py); every change is
audit-logged. Forms carry the session's CSRF token."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError

from app.console.web import (
    ConsoleRoute,
    FormDep,
    SessionDep,
    parse_form,
    record,
    render,
    see_other,
    url,
)
from app.domain import SPACE_ID_PATTERN_TEXT
from app.http.deps import ResourcesDep
from app.runtime import admin_transaction
from app.runtime.identity import validate_user_id
from app.schemas.spaces import MemberGrant, SpaceCreate
from app.services.spaces import SpaceService

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

SpaceQuery = Annotated[str, Query(alias="id", pattern=SPACE_ID_PATTERN_TEXT, max_length=64)]
Notice = Annotated[str, Query(max_length=200)]


@router.get("/spaces")
async def spaces_page(
    request: Request, session: SessionDep, resources: ResourcesDep, notice: Notice = ""
) -> Response:
    """Every shared space, and the form that creates one."""
    async with admin_transaction(resources.sessionmaker, "console: spaces") as db:
        spaces = await SpaceService(db).list()
    return render(request, "spaces.html", session=session, spaces=spaces, notice=notice)


@router.post("/spaces")
async def create_space(session: SessionDep, form: FormDep, resources: ResourcesDep) -> Response:
    """Create a space (the admin API's create); a taken id is a 409 page."""
    body = parse_form(
        SpaceCreate,
        {"id": form.get("id", "").strip(), "description": form.get("description", "").strip()},
    )
    async with admin_transaction(resources.sessionmaker, "console: space create") as db:
        await SpaceService(db).create(body.id, body.description)
    record(session, "space.create", None, space_id=body.id)
    return see_other(url("/space", id=body.id, notice="space created"))


@router.get("/space")
async def space_page(
    request: Request,
    session: SessionDep,
    resources: ResourcesDep,
    space_id: SpaceQuery,
    notice: Notice = "",
) -> Response:
    """A space's members and their access, with the forms that grant, change, revoke and
    delete."""
    async with admin_transaction(resources.sessionmaker, "console: space members") as db:
        members = await SpaceService(db).members(space_id)
    return render(
        request, "space.html", session=session, space_id=space_id, members=members, notice=notice
    )


def _member(form: dict[str, str]) -> str:
    """The form's user id (the user ids' rule), or a 422 page naming `form.user`."""
    return validate_user_id(form.get("user", "").strip(), "form.user")


@router.post("/space/grant")
async def grant(
    session: SessionDep, form: FormDep, resources: ResourcesDep, space_id: SpaceQuery
) -> Response:
    """Grant a user read or write access (or change it): effective on its next request."""
    user_id = _member(form)
    access = parse_form(MemberGrant, {"access": form.get("access", "")}).access
    async with admin_transaction(resources.sessionmaker, "console: space grant") as db:
        await SpaceService(db).grant(space_id, user_id, access)
    record(session, "space.grant", user_id, space_id=space_id, access=access)
    return see_other(url("/space", id=space_id, notice=f"{user_id} may {access}"))


@router.post("/space/revoke")
async def revoke(
    session: SessionDep, form: FormDep, resources: ResourcesDep, space_id: SpaceQuery
) -> Response:
    """Revoke a user's grant: its next request reads nothing of the space."""
    user_id = _member(form)
    async with admin_transaction(resources.sessionmaker, "console: space revoke") as db:
        await SpaceService(db).revoke(space_id, user_id)
    record(session, "space.revoke", user_id, space_id=space_id)
    return see_other(url("/space", id=space_id, notice=f"{user_id}'s grant revoked"))


@router.post("/space/delete")
async def delete(
    session: SessionDep, form: FormDep, resources: ResourcesDep, space_id: SpaceQuery
) -> Response:
    """Delete the space, its grants and its memories (typed confirmation: the space's id)."""
    if form.get("confirm", "").strip() != space_id:
        raise RequestValidationError(
            [{"loc": ("form", "confirm"), "msg": "type the space's id", "type": "value"}]
        )
    async with admin_transaction(resources.sessionmaker, "console: space delete") as db:
        await SpaceService(db).delete(space_id)
    record(session, "space.delete", None, space_id=space_id)
    return see_other(url("/spaces", notice=f"space {space_id} deleted"))
