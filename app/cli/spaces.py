"""`pgrecall spaces`: shared spaces and their members' grants (docs/agents.md).

As `pgrecall keys`: a running service answers first, through its admin API (/v1/admin/spaces,
app/cli/remote.py); when nothing answers, the command works on the database itself in an
audited admin session. The database stack is imported inside that fallback only, and
app/cli/__init__.py runs this group without assembling the rest of the CLI.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import typer

from app.cli.common import checked_user, fail
from app.cli.remote import (
    ServerOption,
    Unreachable,
    local_database,
    parse_time,
    server_for,
    shown_time,
)
from app.domain import SPACE_ACCESS, SPACE_ID_PATTERN_TEXT

spaces_app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="shared spaces: members read (or write) their memories by naming them (X-Spaces)",
)

_SPACE_ID = re.compile(SPACE_ID_PATTERN_TEXT)

SpaceArgument = Annotated[str, typer.Argument(help="the space's id", show_default=False)]


def checked_space(value: str) -> str:
    """A valid space id, or exit 2 naming the rule."""
    if not _SPACE_ID.fullmatch(value):
        raise fail(
            f"space id {value!r}: 1-64 lowercase letters, digits, _ . - (a letter or digit first)",
            2,
        )
    return value


def _reader(data: Any) -> Any:
    """How a row's fields are read: a dict's keys (the admin API) or an ORM row's attributes."""
    return data.get if isinstance(data, dict) else lambda name: getattr(data, name)


@dataclass(frozen=True)
class SpaceRow:
    """A space as both paths print it (the ORM row or the admin API's SpaceOut)."""

    id: str
    description: str
    created_at: datetime | None

    @classmethod
    def of(cls, data: Any) -> SpaceRow:
        get = _reader(data)
        return cls(get("id"), get("description") or "", parse_time(get("created_at")))


@dataclass(frozen=True)
class MemberRow:
    """A member's grant as both paths print it (the ORM row or the admin API's MemberOut)."""

    space_id: str
    user_id: str
    access: str
    created_at: datetime | None

    @classmethod
    def of(cls, data: Any) -> MemberRow:
        get = _reader(data)
        return cls(get("space_id"), get("user_id"), get("access"), parse_time(get("created_at")))


# -- the commands ----------------------------------------------------------------------------


@spaces_app.command("create")
def spaces_create(
    space_id: SpaceArgument,
    description: Annotated[
        str, typer.Option("--description", help="what the space is for (shown in lists)")
    ] = "",
    server: ServerOption = None,
) -> None:
    """Create a shared space (no members yet: grant them)."""
    space_id = checked_space(space_id)
    if len(description) > 1000:
        raise fail("--description: at most 1000 characters", 2)
    remote = server_for(server)
    try:
        body = {"id": space_id, "description": description}
        space = SpaceRow.of(remote.call("POST", "/v1/admin/spaces", body))
    except Unreachable:
        local_database(remote)
        space = SpaceRow.of(
            _in_database("spaces create", lambda s: s.create(space_id, description))
        )
    typer.echo(f"created space {space.id}")


@spaces_app.command("list")
def spaces_list(server: ServerOption = None) -> None:
    """List the shared spaces."""
    remote = server_for(server)
    try:
        spaces = [SpaceRow.of(s) for s in remote.call("GET", "/v1/admin/spaces")["spaces"]]
    except Unreachable:
        local_database(remote)
        spaces = [SpaceRow.of(s) for s in _in_database("spaces list", lambda s: s.list())]
    for space in spaces:
        created = shown_time(space.created_at)
        typer.echo(f"{space.id}  created {created}  {space.description}".rstrip())
    typer.echo(f"{len(spaces)} spaces", err=True)


@spaces_app.command("delete")
def spaces_delete(space_id: SpaceArgument, server: ServerOption = None) -> None:
    """Delete a space with its grants and its memories (no member's own memory)."""
    space_id = checked_space(space_id)
    remote = server_for(server)
    try:
        remote.call("DELETE", f"/v1/admin/spaces/{space_id}")
    except Unreachable:
        local_database(remote)
        _in_database("spaces delete", lambda s: s.delete(space_id))
    typer.echo(f"deleted space {space_id} with its grants and memories")


@spaces_app.command("members")
def spaces_members(space_id: SpaceArgument, server: ServerOption = None) -> None:
    """List a space's members and their access."""
    space_id = checked_space(space_id)
    remote = server_for(server)
    try:
        answer = remote.call("GET", f"/v1/admin/spaces/{space_id}/members")
        members = [MemberRow.of(m) for m in answer["members"]]
    except Unreachable:
        local_database(remote)
        found = _in_database("spaces members", lambda s: s.members(space_id))
        members = [MemberRow.of(m) for m in found]
    for member in members:
        typer.echo(f"{member.user_id}  {member.access:<5}  granted {shown_time(member.created_at)}")
    typer.echo(f"{len(members)} members", err=True)


@spaces_app.command("grant")
def spaces_grant(
    space_id: SpaceArgument,
    user: Annotated[str, typer.Argument(help="the member's user id", show_default=False)],
    access: Annotated[str, typer.Option("--access", help="read or write")],
    server: ServerOption = None,
) -> None:
    """Grant a user read or write access to a space (or change it): effective at once."""
    space_id, user_id = checked_space(space_id), checked_user(user)
    if access not in SPACE_ACCESS:
        raise fail("--access must be read or write", 2)
    remote = server_for(server)
    try:
        path = f"/v1/admin/spaces/{space_id}/members/{user_id}"
        member = MemberRow.of(remote.call("PUT", path, {"access": access}))
    except Unreachable:
        local_database(remote)
        member = MemberRow.of(
            _in_database("spaces grant", lambda s: s.grant(space_id, user_id, access))
        )
    typer.echo(f"granted {member.user_id} {member.access} access to space {member.space_id}")


@spaces_app.command("revoke")
def spaces_revoke(
    space_id: SpaceArgument,
    user: Annotated[str, typer.Argument(help="the member's user id", show_default=False)],
    server: ServerOption = None,
) -> None:
    """Revoke a user's grant; its next request reads and writes nothing of the space."""
    space_id, user_id = checked_space(space_id), checked_user(user)
    remote = server_for(server)
    try:
        remote.call("DELETE", f"/v1/admin/spaces/{space_id}/members/{user_id}")
    except Unreachable:
        local_database(remote)
        _in_database("spaces revoke", lambda s: s.revoke(space_id, user_id))
    typer.echo(f"revoked {user_id}'s access to space {space_id}")


# -- the database path (no service answered) -------------------------------------------------
# The imports live inside this function: they pull in sqlalchemy, the models and the services,
# which the HTTP path above must not pay for at start-up.


def _in_database(reason: str, action: Any) -> Any:
    """Run `action(SpaceService)` in an audited admin transaction (`reason` in the audit log)
    and return its answer (ORM rows stay readable after the commit: expire_on_commit is off).
    A service error (no such space, one that exists) is exit 1 with its message."""
    from app.cli.common import Runtime, run
    from app.errors import ServiceError
    from app.runtime import admin_transaction
    from app.services.spaces import SpaceService

    async def work(rt: Runtime) -> Any:
        async with admin_transaction(rt.sessionmaker, reason) as session:
            return await action(SpaceService(session))

    try:
        return run(work, quiet=True)
    except ServiceError as exc:
        raise fail(exc.message) from None
