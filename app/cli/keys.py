"""`pgrecall keys`: per-user API keys (create prints the token once, optionally bound to an
agent; list; revoke).

A running service answers first, through its admin API (/v1/admin/keys, app/cli/remote.py):
that takes a fraction of a second where starting the embedded database for one row takes
seconds. When nothing answers at the service's address (PGRECALL_HOST/PGRECALL_PORT, or
--server) within a short connect timeout, the command works on the database itself like the
admin commands (the configured database or the embedded one, migrated first) through the shared
runner in app/cli/common.py.

Start-up is kept cheap on the HTTP path: this module imports only the standard library, typer
and app.cli.common at load time; the database stack (sqlalchemy, the models, the services) is
imported inside the fallback, and app/cli/__init__.py runs this group without assembling the rest
of the CLI (which would import the server stack).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

import typer

from app.cli.common import checked_user, fail
from app.cli.remote import (
    Server,
    ServerOption,
    Unreachable,
    local_database,
    parse_time,
    server_for,
    shown_time,
)

# add_completion off: `pgrecall keys` runs this group alone (app/cli/__init__.py), and the
# assembled command has none either.
keys_app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="per-user API keys (the key fixes the user)"
)

READ, WRITE = "read", "write"  # app.services.api_keys's scopes (tests check they agree)


@dataclass(frozen=True)
class KeyRow:
    """A key as both paths print it (the ORM row or the admin API's KeyOut)."""

    id: uuid.UUID
    prefix: str
    user_id: str
    scope: str
    agent_id: str | None
    created_at: datetime | None
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KeyRow:
        return cls(
            uuid.UUID(data["id"]),
            data["prefix"],
            data["user_id"],
            data["scope"],
            data.get("agent_id"),
            parse_time(data.get("created_at")),
            parse_time(data.get("expires_at")),
            parse_time(data.get("revoked_at")),
            parse_time(data.get("last_used_at")),
        )

    @classmethod
    def from_model(cls, key: Any) -> KeyRow:
        return cls(
            key.id,
            key.prefix,
            key.user_id,
            key.scope,
            key.agent_id,
            key.created_at,
            key.expires_at,
            key.revoked_at,
            key.last_used_at,
        )

    @property
    def state(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= datetime.now(UTC):
            return "expired"
        return "active"


# -- the commands ----------------------------------------------------------------------------


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option("--user", help="the user the key acts for")],
    scope: Annotated[str, typer.Option("--scope", help="read or write")] = WRITE,
    expires: Annotated[
        str | None, typer.Option("--expires", help="lifetime such as 30d, 12h, 90m, 2w")
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="bind the key to this agent: its holder reads and writes as the agent only "
            "(docs/agents.md)",
        ),
    ] = None,
    server: ServerOption = None,
) -> None:
    """Create a key; its token is printed once and cannot be shown again."""
    user_id = checked_user(user)
    if scope not in (READ, WRITE):
        raise fail("--scope must be read or write", 2)
    agent_id = checked_user(agent, "--agent") if agent is not None else None
    remote = server_for(server)
    try:
        body: dict[str, str | None] = {"user_id": user_id, "scope": scope, "expires_in": expires}
        if agent_id is not None:
            body["agent_id"] = agent_id
        answer = remote.call("POST", "/v1/admin/keys", body)
        token, key = answer["token"], KeyRow.from_json(answer["key"])
    except Unreachable:
        local_database(remote)
        token, key = _create_in_database(user_id, scope, expires, agent_id)
    typer.echo(token)
    bound = f", agent {key.agent_id}" if key.agent_id else ""
    typer.echo(
        f"key {key.id} for user {key.user_id}{bound}, scope {key.scope}, expires "
        f"{shown_time(key.expires_at) if key.expires_at else 'never'}; store the token now: "
        "only its hash is kept",
        err=True,
    )


@keys_app.command("list")
def keys_list(
    user: Annotated[str | None, typer.Option("--user", help="only this user's keys")] = None,
    server: ServerOption = None,
) -> None:
    """List keys (never the tokens), newest first."""
    user_id = checked_user(user) if user is not None else None
    remote = server_for(server)
    try:
        keys = _list_remote(remote, user_id)
    except Unreachable:
        local_database(remote)
        keys = _list_in_database(user_id)
    for key in keys:
        typer.echo(
            f"{key.id}  {key.prefix}...  {key.user_id}  {key.scope:<5}  {key.state:<7}  "
            f"agent {key.agent_id or '-'}  created {shown_time(key.created_at)}  "
            f"expires {shown_time(key.expires_at)}  last used {shown_time(key.last_used_at)}"
        )
    typer.echo(f"{len(keys)} keys", err=True)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[uuid.UUID, typer.Argument(help="the key's id")],
    server: ServerOption = None,
) -> None:
    """Revoke a key for good; a running service refuses it within PGRECALL_KEY_CACHE_TTL_S."""
    remote = server_for(server)
    try:
        key = KeyRow.from_json(remote.call("POST", f"/v1/admin/keys/{key_id}/revoke"))
    except Unreachable:
        local_database(remote)
        key = _revoke_in_database(key_id)
    typer.echo(f"revoked {key.id} (user {key.user_id}) at {shown_time(key.revoked_at)}")


def _list_remote(remote: Server, user_id: str | None) -> list[KeyRow]:
    """Every page of the admin API's list."""
    keys: list[KeyRow] = []
    offset: int | None = 0
    while offset is not None:
        query: dict[str, str | int] = {"limit": 500, "offset": offset}
        if user_id is not None:
            query["user_id"] = user_id
        page = remote.call("GET", f"/v1/admin/keys?{urlencode(query)}")
        keys.extend(KeyRow.from_json(item) for item in page["items"])
        offset = page["next_offset"]
    return keys


# -- the database path (no service answered) -------------------------------------------------
# The imports live inside these functions: they pull in sqlalchemy, the models and the services,
# which the HTTP path above must not pay for at start-up.


def _create_in_database(
    user_id: str, scope: str, expires: str | None, agent_id: str | None
) -> tuple[str, KeyRow]:
    from app.cli.common import Runtime, run
    from app.runtime import user_transaction
    from app.services.api_keys import ApiKeyService, CreatedKey, parse_duration

    try:
        lifetime = parse_duration(expires) if expires is not None else None
    except ValueError as exc:
        raise fail(f"--expires {exc}", 2) from None

    async def work(rt: Runtime) -> CreatedKey:
        async with user_transaction(rt.sessionmaker, user_id) as session:
            return await ApiKeyService(session).create(user_id, scope, lifetime, agent_id=agent_id)

    created = run(work, quiet=True)
    return created.token, KeyRow.from_model(created.key)


def _list_in_database(user_id: str | None) -> list[KeyRow]:
    from app.cli.common import Runtime, run
    from app.runtime import admin_transaction, user_transaction
    from app.services.api_keys import ApiKeyService

    async def work(rt: Runtime) -> list[KeyRow]:
        scoped = (
            user_transaction(rt.sessionmaker, user_id)
            if user_id is not None
            else admin_transaction(rt.sessionmaker, "keys list")
        )
        async with scoped as session:
            return [KeyRow.from_model(k) for k in await ApiKeyService(session).list(user_id)]

    return run(work, quiet=True)


def _revoke_in_database(key_id: uuid.UUID) -> KeyRow:
    from app.cli.common import Runtime, run
    from app.errors import ServiceError
    from app.runtime import admin_transaction
    from app.services.api_keys import ApiKeyService

    async def work(rt: Runtime) -> KeyRow:
        async with admin_transaction(rt.sessionmaker, "keys revoke") as session:
            return KeyRow.from_model(await ApiKeyService(session).revoke(key_id))

    try:
        return run(work, quiet=True)
    except ServiceError as exc:
        raise fail(exc.message) from None
