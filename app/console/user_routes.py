"""Console pages of one user: memories (filter, create, edit, delete, restore), conversations,
"Ask as this user" (export and purge: user_data.py). Reads and writes run in a session scoped
to that user (row-level security) through the same services as the admin API; every change is
audit-logged."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from app.console.auth import ConsoleSession
from app.console.explain import explain
from app.console.web import (
    PAGE_SIZE,
    CallerParam,
    ConsoleRoute,
    FormDep,
    SessionDep,
    UserParam,
    paging,
    parse_form,
    record,
    render,
    see_other,
    url,
    window,
)
from app.domain import MEMORY_TYPES, MemoryType
from app.http.deps import ResourcesDep
from app.runtime import Resources, query_request, query_service, user_transaction
from app.schemas.admin import AdminMemoryCreate, AdminMemoryUpdate
from app.schemas.query import QueryFilters
from app.services.admin import AdminMemoryService, MemoryFilter
from app.services.api_keys import Caller
from app.services.conversation import ConversationService
from app.services.prompt import format_for_prompt
from app.services.users import UserDirectoryService

log = logging.getLogger(__name__)
router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

Page = Annotated[int, Query(ge=1, le=100_000)]
MAX_QUERY_CHARS = 2000


def _as_user(resources: Resources, user_id: str) -> AbstractAsyncContextManager[AsyncSession]:
    """The page's transaction as that user (row-level security), committed before it answers."""
    return user_transaction(resources.sessionmaker, user_id)


def _admin(db: AsyncSession, resources: Resources) -> AdminMemoryService:
    """The admin memory service; its changes drop the user's cached query results."""
    return AdminMemoryService(db, resources.embeddings, resources.cache)


def _optional(form: dict[str, str], name: str) -> str | None:
    value = form.get(name, "").strip()
    return value or None


def _number(value: str) -> float | str:
    """A form's number as a number (the schemas take JSON numbers); anything else as typed,
    so the schema's error names the field."""
    try:
        return float(value)
    except ValueError:
        return value


@router.get("/user")
async def user_page(
    request: Request,
    session: SessionDep,
    resources: ResourcesDep,
    user_id: UserParam,
    type_: Annotated[MemoryType | Literal[""], Query(alias="type")] = "",
    q: Annotated[str, Query(max_length=1000)] = "",
    deleted: Literal["live", "all", "evicted"] = "live",
    validity: Literal["current", "all"] = "current",
    page: Page = 1,
    notice: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """A user's memories (newest first), filtered by type, text, deletion (or only those the
    per-user cap evicted) and validity, with their tags and usage."""
    filters = MemoryFilter(
        user_id=user_id,
        type=type_ or None,
        q=q.strip() or None,
        include_deleted=deleted == "all",
        include_superseded=validity == "all",
        evicted_only=deleted == "evicted",
    )
    async with _as_user(resources, user_id) as db:
        items, total = await AdminMemoryService(db, None).list(filters, **window(page))
    return render(
        request,
        "user.html",
        session=session,
        user_id=user_id,
        items=items,
        **paging(total, page),
        filters={"type": type_, "q": q, "deleted": deleted, "validity": validity},
        notice=notice,
    )


@router.post("/memory/create")
async def create_memory(
    session: SessionDep, form: FormDep, resources: ResourcesDep, user_id: UserParam
) -> Response:
    """Create a memory for the user (the admin API's create)."""
    row = parse_form(
        AdminMemoryCreate,
        {
            "user_id": user_id,
            "content": form.get("content", ""),
            "type": form.get("type", ""),
            **({"importance": _number(v)} if (v := _optional(form, "importance")) else {}),
            **({"expires_at": v} if (v := _optional(form, "expires_at")) else {}),
            **({"source": v} if (v := _optional(form, "source")) else {}),
            **({"tags": v.split()} if (v := _optional(form, "tags")) else {}),
        },
    )
    async with _as_user(resources, user_id) as db:
        created, duplicates = await _admin(db, resources).create_many([row])
    if duplicates:
        return see_other(url("/user", user=user_id, notice="the user already has this text"))
    record(session, "memory.create", user_id, memory_id=created[0].id)
    return see_other(url("/user", user=user_id, notice="memory created"))


@router.get("/memory")
async def memory_page(
    request: Request,
    session: SessionDep,
    resources: ResourcesDep,
    user_id: UserParam,
    memory_id: Annotated[uuid.UUID, Query(alias="id")],
) -> Response:
    """One memory and its versions, with the edit form and delete or restore."""
    async with _as_user(resources, user_id) as db:
        service = _admin(db, resources)
        item = await service.get(user_id, memory_id)
        versions = await service.history(user_id, memory_id)
    return render(
        request, "memory.html", session=session, user_id=user_id, item=item, versions=versions
    )


@router.post("/memory/update")
async def update_memory(
    session: SessionDep,
    form: FormDep,
    resources: ResourcesDep,
    user_id: UserParam,
    memory_id: Annotated[uuid.UUID, Query(alias="id")],
) -> Response:
    """Edit content, type, importance and expiry (new content is re-embedded and re-indexed)."""
    changes = parse_form(
        AdminMemoryUpdate,
        {
            "content": form.get("content", ""),
            "type": form.get("type", ""),
            "importance": _number(form.get("importance", "").strip()),
            "expires_at": _optional(form, "expires_at"),
            "tags": form.get("tags", "").split(),
        },
    )
    async with _as_user(resources, user_id) as db:
        service = _admin(db, resources)
        item = await service.update(user_id, memory_id, changes)
    # The service may answer with another row (a new version of the memory): show that one.
    record(session, "memory.update", user_id, memory_id=memory_id, result_id=item.id)
    return see_other(url("/memory", user=user_id, id=item.id))


def _deleted_route(deleted: bool, doc: str) -> Callable[..., Awaitable[Response]]:
    """The form action that marks a memory deleted (or restores it)."""

    async def route(
        session: SessionDep,
        _: FormDep,
        resources: ResourcesDep,
        user_id: UserParam,
        memory_id: Annotated[uuid.UUID, Query(alias="id")],
    ) -> Response:
        return await _set_deleted(session, resources, user_id, memory_id, deleted)

    route.__doc__ = doc
    return route


router.post("/memory/delete", name="delete_memory")(
    _deleted_route(True, "Soft-delete: no longer retrieved, can be restored.")
)
router.post("/memory/restore", name="restore_memory")(
    _deleted_route(False, "Undo a soft delete.")
)


async def _set_deleted(
    session: ConsoleSession, resources: Resources, user_id: str, memory_id: uuid.UUID, deleted: bool
) -> Response:
    async with _as_user(resources, user_id) as db:
        await _admin(db, resources).set_deleted(user_id, memory_id, deleted)
    record(session, "memory.delete" if deleted else "memory.restore", user_id, memory_id=memory_id)
    return see_other(url("/memory", user=user_id, id=memory_id))


@router.get("/conversations")
async def conversations_page(
    request: Request,
    session: SessionDep,
    resources: ResourcesDep,
    user_id: UserParam,
    page: Page = 1,
) -> Response:
    """The user's conversations, most recently active first."""
    async with _as_user(resources, user_id) as db:
        counts = await UserDirectoryService(db).counts(user_id)
        rows = await ConversationService(db, resources.embeddings).list(user_id, **window(page))
    context = {"user_id": user_id, "rows": rows, **paging(counts.conversations, page)}
    return render(request, "conversations.html", session=session, **context)


@router.get("/conversation")
async def conversation_page(
    request: Request,
    session: SessionDep,
    resources: ResourcesDep,
    user_id: UserParam,
    conversation_id: Annotated[uuid.UUID, Query(alias="id")],
    after: Annotated[int | None, Query(ge=0)] = None,
) -> Response:
    """One conversation's messages in order, a page at a time (by sequence number)."""
    service_rows: list[Any]
    async with _as_user(resources, user_id) as db:
        service = ConversationService(db, resources.embeddings)
        conversation = await service.get(user_id, conversation_id)
        service_rows = list(
            await service.messages(user_id, conversation_id, after=after, limit=PAGE_SIZE + 1)
        )
    more = len(service_rows) > PAGE_SIZE
    rows = service_rows[:PAGE_SIZE]
    return render(
        request,
        "conversation.html",
        session=session,
        user_id=user_id,
        conversation=conversation,
        rows=rows,
        next_after=rows[-1].seq if more else None,
    )


def _scope(caller: Caller) -> dict[str, str]:
    """The scope a page was asked in, as its query parameters (kept by its forms and links)."""
    return {
        "agent_id": caller.agent_id or "",
        "run_id": caller.run_id or "",
        "scope_mode": "own" if caller.own else "",
        "spaces": ",".join(caller.spaces),
    }


@router.get("/ask")
async def ask_page(
    request: Request, session: SessionDep, resources: ResourcesDep, caller: CallerParam
) -> Response:
    """The "Ask as this user" form (optionally as one of its agents or runs, with spaces)."""
    cfg = resources.query_config
    return render(
        request,
        "ask.html",
        session=session,
        user_id=caller.user_id,
        scope=_scope(caller),
        query="",
        answer=None,
        cfg=cfg,
        chosen={"type": "", "source": ""},
    )


@router.post("/ask")
async def ask(
    request: Request,
    session: SessionDep,
    form: FormDep,
    resources: ResourcesDep,
    caller: CallerParam,
) -> Response:
    """Run query_memory as the user (in the agent's or run's scope and with the spaces the
    query parameters name) and explain every candidate: scores, thresholds, budget."""
    text = form.get("query", "").strip()
    if not text or len(text) > MAX_QUERY_CHARS:
        raise RequestValidationError(
            [{"loc": ("form", "query"), "msg": f"1-{MAX_QUERY_CHARS} characters", "type": "value"}]
        )
    kind, source = form.get("type", ""), form.get("source", "")
    if kind not in ("", *MEMORY_TYPES) or source not in ("", "memory", "message"):
        field = "type" if kind not in ("", *MEMORY_TYPES) else "source"
        raise RequestValidationError(
            [{"loc": ("form", field), "msg": "not one of the listed values", "type": "value"}]
        )
    cfg = resources.query_config
    filters = QueryFilters(
        types=[kind] if kind else None,  # type: ignore[list-item]
        sources=[source] if source else None,  # type: ignore[list-item]
    )
    user_id, scope = caller.user_id, _scope(caller)
    query = query_request(cfg, caller.memory, text, filters)
    result, trace = await query_service(resources).explain(query)
    record(
        session,
        "ask-as-user",
        user_id,
        returned=len(result.items),
        **{k: v for k, v in scope.items() if v},
    )
    return render(
        request,
        "ask.html",
        session=session,
        user_id=user_id,
        scope=scope,
        query=text,
        cfg=cfg,
        chosen={"type": kind, "source": source},
        answer=explain(query, trace),
        result=result,
        shared={str(item.id): item.space for item in result.items if item.space},
        formatted=format_for_prompt(result.items),
    )
