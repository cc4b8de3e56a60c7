"""`pgrecall keys`: per-user API keys (create prints the token once; list; revoke).

Runs like the admin commands (the configured database or the embedded one, migrated first)
through the shared runner in app/cli/common.py.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated

import typer

from app.cli.common import Runtime, checked_user, fail, run
from app.errors import ServiceError
from app.models import ApiKey
from app.runtime import admin_transaction, user_transaction
from app.services.api_keys import READ, WRITE, ApiKeyService, CreatedKey, parse_duration

keys_app = typer.Typer(no_args_is_help=True, help="per-user API keys (the key fixes the user)")


def _state(key: ApiKey) -> str:
    if key.revoked_at is not None:
        return "revoked"
    if key.expires_at is not None and key.expires_at <= datetime.now(UTC):
        return "expired"
    return "active"


def _when(value: object) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M}"


@keys_app.command("create")
def keys_create(
    user: Annotated[str, typer.Option("--user", help="the user the key acts for")],
    scope: Annotated[str, typer.Option("--scope", help="read or write")] = "write",
    expires: Annotated[
        str | None, typer.Option("--expires", help="lifetime such as 30d, 12h, 90m, 2w")
    ] = None,
) -> None:
    """Create a key; its token is printed once and cannot be shown again."""
    user_id = checked_user(user)
    if scope not in (READ, WRITE):
        raise fail("--scope must be read or write", 2)
    try:
        lifetime = parse_duration(expires) if expires is not None else None
    except ValueError as exc:
        raise fail(f"--expires {exc}", 2) from None

    async def work(rt: Runtime) -> CreatedKey:
        async with user_transaction(rt.sessionmaker, user_id) as session:
            return await ApiKeyService(session).create(user_id, scope, lifetime)

    created = run(work)
    key = created.key
    typer.echo(created.token)
    typer.echo(
        f"key {key.id} for user {key.user_id}, scope {key.scope}, expires "
        f"{_when(key.expires_at) if key.expires_at else 'never'}; store the token now: "
        "only its hash is kept",
        err=True,
    )


@keys_app.command("list")
def keys_list(
    user: Annotated[str | None, typer.Option("--user", help="only this user's keys")] = None,
) -> None:
    """List keys (never the tokens), newest first."""
    user_id = checked_user(user) if user is not None else None

    async def work(rt: Runtime) -> list[ApiKey]:
        scoped = (
            user_transaction(rt.sessionmaker, user_id)
            if user_id is not None
            else admin_transaction(rt.sessionmaker, "keys list")
        )
        async with scoped as session:
            return list(await ApiKeyService(session).list(user_id))

    keys = run(work)
    for key in keys:
        typer.echo(
            f"{key.id}  {key.prefix}...  {key.user_id}  {key.scope:<5}  {_state(key):<7}  "
            f"created {_when(key.created_at)}  expires {_when(key.expires_at)}  "
            f"last used {_when(key.last_used_at)}"
        )
    typer.echo(f"{len(keys)} keys", err=True)


@keys_app.command("revoke")
def keys_revoke(key_id: Annotated[uuid.UUID, typer.Argument(help="the key's id")]) -> None:
    """Revoke a key for good; a running service refuses it within PGRECALL_KEY_CACHE_TTL_S."""

    async def work(rt: Runtime) -> ApiKey:
        async with admin_transaction(rt.sessionmaker, "keys revoke") as session:
            return await ApiKeyService(session).revoke(key_id)

    try:
        key = run(work)
    except ServiceError as exc:
        raise fail(exc.message) from None
    typer.echo(f"revoked {key.id} (user {key.user_id}) at {_when(key.revoked_at)}")
