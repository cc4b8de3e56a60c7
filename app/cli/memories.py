"""`pgrecall memories`: inspect and manage one user's memories (list, show, delete, restore).

Listing and state changes never embed; content edits go through the HTTP API.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, TypeVar

import typer

from app.cli.common import Runtime, aware, checked_user, fail, run
from app.domain import MEMORY_TYPES
from app.errors import ServiceError
from app.models import MemoryItem
from app.runtime import user_transaction
from app.schemas.admin import AdminMemoryOut
from app.services.admin import AdminMemoryService, MemoryFilter

T = TypeVar("T")
memories_app = typer.Typer(no_args_is_help=True, help="inspect and manage one user's memories")
UserOption = Annotated[str, typer.Option("--user", help="the user the memories belong to")]


def _line(item: MemoryItem) -> str:
    state = " [deleted]" if item.deleted_at else ""
    state += " [superseded]" if item.valid_to else ""
    text = item.content if len(item.content) <= 80 else item.content[:77] + "..."
    when = f"{item.created_at:%Y-%m-%d}"
    return f"{item.id}  {item.type:<10} {item.importance:.2f}  {when}{state}  {text}"


def _dump(item: MemoryItem) -> str:
    return AdminMemoryOut.model_validate(item).model_dump_json()


def _admin_call(user: str, call: Callable[[AdminMemoryService], Awaitable[T]]) -> T:
    """Run one AdminMemoryService call on the user's rows in a transaction (a change drops the
    user's cached query results once committed); 404s become a message and exit 1."""

    async def work(rt: Runtime) -> T:
        async with user_transaction(rt.sessionmaker, user) as session:
            # Listing and state changes never embed; content edits go through the HTTP API.
            return await call(AdminMemoryService(session, None, rt.cache))

    try:
        return run(work)
    except ServiceError as exc:
        raise fail(exc.message) from None


@memories_app.command("list")
def memories_list(
    user: UserOption,
    type_: Annotated[str | None, typer.Option("--type", help=", ".join(MEMORY_TYPES))] = None,
    q: Annotated[str | None, typer.Option("--q", help="full-text search")] = None,
    created_after: Annotated[datetime | None, typer.Option()] = None,
    created_before: Annotated[datetime | None, typer.Option()] = None,
    include_deleted: Annotated[bool, typer.Option("--include-deleted")] = False,
    include_superseded: Annotated[
        bool, typer.Option("--include-superseded", help="also earlier, superseded versions")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """List a user's memories, newest first."""
    if type_ is not None and type_ not in MEMORY_TYPES:
        raise fail(f"--type must be one of {', '.join(MEMORY_TYPES)}", 2)
    filters = MemoryFilter(
        user_id=checked_user(user),
        type=type_,
        q=q,
        created_after=aware(created_after),
        created_before=aware(created_before),
        include_deleted=include_deleted,
        include_superseded=include_superseded,
    )
    items, total = _admin_call(
        filters.user_id, lambda s: s.list(filters, limit=limit, offset=offset)
    )
    for item in items:
        typer.echo(_dump(item) if as_json else _line(item))
    if not as_json:
        typer.echo(f"{len(items)} of {total} (offset {offset})", err=True)


@memories_app.command("show")
def memories_show(user: UserOption, item_id: Annotated[uuid.UUID, typer.Argument()]) -> None:
    """Print one memory as JSON."""
    user = checked_user(user)
    item = _admin_call(user, lambda s: s.get(user, item_id))
    typer.echo(json.dumps(json.loads(_dump(item)), indent=2))


@memories_app.command("delete")
def memories_delete(user: UserOption, item_id: Annotated[uuid.UUID, typer.Argument()]) -> None:
    """Soft-delete one memory (restore undoes it)."""
    user = checked_user(user)
    _admin_call(user, lambda s: s.set_deleted(user, item_id, True))
    typer.echo(f"deleted {item_id}")


@memories_app.command("restore")
def memories_restore(user: UserOption, item_id: Annotated[uuid.UUID, typer.Argument()]) -> None:
    """Restore a soft-deleted memory."""
    user = checked_user(user)
    _admin_call(user, lambda s: s.set_deleted(user, item_id, False))
    typer.echo(f"restored {item_id}")
