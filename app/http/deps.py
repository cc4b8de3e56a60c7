"""The request dependencies of every HTTP door: resources, the correlation id, who the request
acts for (app.runtime.identity.resolve_caller), and the per-request transaction (app.runtime's
unit of work, committed before the response: scope="function")."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import AuthenticationError, PermissionDeniedError
from app.observability import correlation_id_var
from app.runtime import Resources, admin_transaction, user_transaction
from app.runtime.identity import (
    AGENT_HEADER,
    RUN_HEADER,
    SCOPE_MODE_HEADER,
    SCOPE_MODES,
    SPACES_HEADER,
    SPACES_PATTERN_TEXT,
    is_service_key,
    matches,
    resolve_caller,
    scope_claim,
)
from app.schemas.common import USER_ID_PATTERN_TEXT
from app.services.api_keys import Caller, looks_like_key


# Every dependency is `async def`, even when it does not await: FastAPI runs a plain `def`
# dependency in its thread pool, two thread handoffs per request for a field read
# (docs/performance.md, issue 27).
async def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


async def get_session(
    resources: ResourcesDep, caller: Annotated[Caller, Depends(current_caller)]
) -> AsyncIterator[AsyncSession]:
    """The request's transaction, bound to the caller: row-level security shows it only the
    caller's rows, within its agent and run (the statements keep their own user_id predicates
    as well), and stamps what it writes with them."""
    async with user_transaction(resources.sessionmaker, caller.memory) as session:
        yield session


async def get_admin_session(
    resources: ResourcesDep,
    _: Annotated[None, Depends(require_admin_key)],
    request: Request,
) -> AsyncIterator[AsyncSession]:
    """The admin request's transaction, in the audited admin mode (every user's rows)."""
    reason = f"{request.method} {request.url.path}"
    async with admin_transaction(resources.sessionmaker, reason) as session:
        yield session


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise AuthenticationError("missing Authorization: Bearer <key>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("Authorization must be 'Bearer <key>'")
    return token.strip()


def bearer_token(authorization: str | None) -> str | None:
    """The token of `Authorization: Bearer <token>`, None for any other or no header."""
    if authorization is not None and authorization.lower().startswith("bearer "):
        return authorization[7:].strip() or None
    return None


async def require_service_key(
    resources: ResourcesDep,
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Bearer service key (or the admin key) when auth is configured (docs, metrics)."""
    if resources.api_key is None:
        return
    if not is_service_key(resources, _bearer(authorization)):
        raise PermissionDeniedError("invalid API key")


async def document_reader(
    resources: ResourcesDep,
    authorization: Annotated[str | None, Header()] = None,
) -> bool:
    """Who may read the OpenAPI document: the service or admin key, or a per-user key (True:
    its holder gets the document where X-User-Id is optional). Open without auth configured."""
    token = bearer_token(authorization)
    if token is not None and not is_service_key(resources, token) and looks_like_key(token):
        await resources.keys.authenticate(token)
        return True
    await require_service_key(resources, authorization)
    return False


async def require_admin_key(
    resources: ResourcesDep,
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Bearer admin key; with no keys configured at all (local default) admin is open."""
    if resources.api_key is None and resources.admin_api_key is None:
        return
    token = _bearer(authorization)
    if resources.admin_api_key is None:
        raise PermissionDeniedError("admin API disabled: set PGRECALL_ADMIN_API_KEY")
    if not matches(token, resources.admin_api_key):
        raise PermissionDeniedError("invalid admin key")


async def current_caller(
    resources: ResourcesDep,
    authorization: Annotated[str | None, Header()] = None,
    x_user_id: Annotated[
        str | None,
        Header(
            alias="X-User-Id",
            description="the end user (1-255 printable ASCII characters, no spaces): required "
            "with the service key; with a per-user key optional, and refused (403) when it "
            "names another user",
            json_schema_extra={"pattern": USER_ID_PATTERN_TEXT},
        ),
    ] = None,
    x_agent_id: Annotated[
        str | None,
        Header(
            alias=AGENT_HEADER,
            description="the agent acting for the user: it reads its own memory and the user's "
            "unscoped memory, never another agent's, and what it writes is its own (a key bound "
            "to an agent fixes it; another is refused, 403)",
            json_schema_extra={"pattern": USER_ID_PATTERN_TEXT},
        ),
    ] = None,
    x_run_id: Annotated[
        str | None,
        Header(
            alias=RUN_HEADER,
            description="the run (one session of an agent): reads its own memory and the "
            "unscoped, never another run's; writes are the run's",
            json_schema_extra={"pattern": USER_ID_PATTERN_TEXT},
        ),
    ] = None,
    x_scope_mode: Annotated[
        str | None,
        Header(
            alias=SCOPE_MODE_HEADER,
            description="inherit (default): the agent's or run's memory and the user's "
            "unscoped memory; own: the agent's or run's memory only (needs X-Agent-Id or "
            "X-Run-Id; without them it narrows nothing)",
            json_schema_extra={"enum": list(SCOPE_MODES)},
        ),
    ] = None,
    x_spaces: Annotated[
        str | None,
        Header(
            alias=SPACES_HEADER,
            description="shared spaces a query reads besides the user's memory, comma-separated "
            "(each needs the user's grant)",
            json_schema_extra={"pattern": SPACES_PATTERN_TEXT},
        ),
    ] = None,
) -> Caller:
    """Who the request acts for (app.runtime.identity.resolve_caller).

    A per-user key fixes the user (X-User-Id absent or equal, else 403). The service key (or
    the admin key, or no auth configured) marks a trusted caller that names the user in
    X-User-Id.
    """
    if resources.api_key is not None:
        token: str | None = _bearer(authorization)
    else:
        token = bearer_token(authorization)
    claim = scope_claim(x_agent_id, x_run_id, x_scope_mode, x_spaces)
    return await resolve_caller(resources, token, x_user_id, claim=claim)


CallerDep = Annotated[Caller, Depends(current_caller)]


async def current_user(caller: CallerDep) -> str:
    """The user every /v1 statement is scoped to (reads: any scope)."""
    return caller.user_id


async def writing_user(caller: CallerDep) -> str:
    """The user of a write; a read-scoped key is refused (403)."""
    if not caller.can_write:
        raise PermissionDeniedError("this API key is read-only")
    return caller.user_id


WriteUserDep = Annotated[str, Depends(writing_user)]
UserDep = Annotated[str, Depends(current_user)]
AdminDep = Annotated[None, Depends(require_admin_key)]
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]
AdminSessionDep = Annotated[AsyncSession, Depends(get_admin_session, scope="function")]


async def correlation_id() -> uuid.UUID:
    """The request's correlation id (set by the middleware)."""
    return uuid.UUID(correlation_id_var.get())


CorrelationDep = Annotated[uuid.UUID, Depends(correlation_id)]
