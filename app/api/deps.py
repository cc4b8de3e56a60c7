"""Request dependencies: resources, the per-request transaction, identity."""

from __future__ import annotations

import asyncio
import hmac
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.adapters.cache import Cache
from app.db import admin_sessions, user_session
from app.errors import AuthenticationError, PermissionDeniedError, ValidationFailedError
from app.observability import correlation_id_var
from app.schemas.common import USER_ID_PATTERN_TEXT, check_user_id
from app.services.api_keys import Caller, KeyAuthenticator, looks_like_key
from app.services.embedding import EmbeddingService
from app.services.query import QueryConfig

if TYPE_CHECKING:
    from app.extraction.runtime import Extraction

log = logging.getLogger(__name__)

AfterCommit = Callable[[], Awaitable[None]]


@dataclass
class Resources:
    """Everything the lifespan creates once and requests share."""

    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    embeddings: EmbeddingService
    cache: Cache
    query_config: QueryConfig
    api_key: str | None
    admin_api_key: str | None
    session_messages: int
    # A query holds two connections at once (keyword and vector arms); admitting at most half
    # the pool's connections' worth of queries means none ever waits holding one (no deadlock).
    query_slots: asyncio.Semaphore
    # Per-user API keys (table api_keys), looked up by hash through a short in-process cache.
    keys: KeyAuthenticator
    write_rate_limit_per_minute: int = 0
    # LLM extraction (PGRECALL_EXTRACTION=llm): user turns are queued for it; None = off.
    extraction: Extraction | None = None
    # PGRECALL_MESSAGE_PASSAGES: the write paths embed messages' sentences too.
    message_passages: bool = True


def get_resources(request: Request) -> Resources:
    return request.app.state.resources  # type: ignore[no-any-return]


ResourcesDep = Annotated[Resources, Depends(get_resources)]


def after_commit(session: AsyncSession, hook: AfterCommit) -> None:
    """Run `hook` once the request's transaction has committed (cache updates, never data)."""
    session.info.setdefault("after_commit", []).append(hook)


def invalidate_after_commit(session: AsyncSession, cache: Cache, *user_ids: str) -> None:
    """These users' cached query results are stale once the write commits."""

    async def invalidate() -> None:
        for user_id in dict.fromkeys(user_ids):
            await cache.invalidate_user(user_id)

    after_commit(session, invalidate)


@asynccontextmanager
async def _transaction(session: AsyncSession) -> AsyncIterator[AsyncSession]:
    """One transaction per request: commit when the route returns, roll back on error.

    scope="function" on the dependencies below makes the commit happen before the response is
    sent, so a write is never acknowledged unless it is committed.
    """
    async with session:
        try:
            yield session
        except BaseException:
            await session.rollback()
            raise
        await session.commit()
        for hook in session.info.pop("after_commit", []):
            try:
                await hook()
            except Exception:  # a cache refresh must not fail a committed write
                log.warning("after-commit hook failed", exc_info=True)


def request_transaction(session: AsyncSession) -> AbstractAsyncContextManager[AsyncSession]:
    """The per-request transaction above, for front doors that open their own sessions (the
    admin console): commit on success, roll back on error, then the after-commit hooks."""
    return _transaction(session)


async def get_session(
    resources: ResourcesDep, user_id: Annotated[str, Depends(current_user)]
) -> AsyncIterator[AsyncSession]:
    """The request's transaction, bound to the caller: row-level security shows it only the
    caller's rows (the statements keep their own user_id predicates as well)."""
    async with _transaction(user_session(resources.sessionmaker, user_id)) as session:
        yield session


async def get_admin_session(
    resources: ResourcesDep,
    _: Annotated[None, Depends(require_admin_key)],
    request: Request,
) -> AsyncIterator[AsyncSession]:
    """The admin request's transaction, in the audited admin mode (every user's rows)."""
    sessions = admin_sessions(resources.sessionmaker, f"{request.method} {request.url.path}")
    async with _transaction(sessions()) as session:
        yield session


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise AuthenticationError("missing Authorization: Bearer <key>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("Authorization must be 'Bearer <key>'")
    return token.strip()


def _matches(token: str, key: str | None) -> bool:
    return key is not None and hmac.compare_digest(token.encode(), key.encode())


async def require_service_key(
    resources: ResourcesDep,
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """Bearer service key (or the admin key) when auth is configured (docs, metrics)."""
    if resources.api_key is None:
        return
    token = _bearer(authorization)
    if not (_matches(token, resources.api_key) or _matches(token, resources.admin_api_key)):
        raise PermissionDeniedError("invalid API key")


async def document_reader(
    resources: ResourcesDep,
    authorization: Annotated[str | None, Header()] = None,
) -> bool:
    """Who may read the OpenAPI document: the service or admin key, or a per-user key (True:
    its holder gets the document where X-User-Id is optional). Open without auth configured."""
    token = None
    if authorization is not None and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip() or None
    service = token is not None and (
        _matches(token, resources.api_key) or _matches(token, resources.admin_api_key)
    )
    if token is not None and not service and looks_like_key(token):
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
    if not _matches(token, resources.admin_api_key):
        raise PermissionDeniedError("invalid admin key")


def validate_user_id(value: str, field: str = "X-User-Id") -> str:
    """User ids are 1-255 printable ASCII characters without spaces."""
    try:
        return check_user_id(value)
    except ValueError as exc:
        raise ValidationFailedError(f"header.{field}: {exc}", field=f"header.{field}") from None


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
) -> Caller:
    """Who the request acts for.

    A per-user key fixes the user (X-User-Id absent or equal, else 403). The service key (or
    the admin key, or no auth configured) marks a trusted caller that names the user in
    X-User-Id.
    """
    token: str | None = None
    if resources.api_key is not None:
        token = _bearer(authorization)
    elif authorization is not None and authorization.lower().startswith("bearer "):
        token = authorization[7:].strip() or None
    service = token is not None and (
        _matches(token, resources.api_key) or _matches(token, resources.admin_api_key)
    )
    if token is not None and not service and looks_like_key(token):
        caller = await resources.keys.authenticate(token)
        if x_user_id is not None and x_user_id != caller.user_id:
            raise PermissionDeniedError("X-User-Id names another user than the API key's")
        return caller
    if token is not None and not service and resources.api_key is not None:
        raise PermissionDeniedError("invalid API key")
    if x_user_id is None:
        raise ValidationFailedError("header.X-User-Id: Field required", field="header.X-User-Id")
    return Caller(validate_user_id(x_user_id))


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


def correlation_id() -> uuid.UUID:
    """The request's correlation id (set by the middleware)."""
    return uuid.UUID(correlation_id_var.get())


CorrelationDep = Annotated[uuid.UUID, Depends(correlation_id)]
