"""Streamable HTTP at /mcp: a per-user key as Bearer fixes the user of every tool call.

Stateless mode with JSON responses: every POST is authenticated on its own (no session a
second credential could ride), and the SDK's session manager runs in a background task the
app's lifespan starts and stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from sqlalchemy import exc as sa_exc
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from app.errors import AuthenticationError, DatabaseUnavailableError, ServiceError
from app.mcp.server import (
    CALLER_SCOPE_KEY,
    CORRELATION_SCOPE_KEY,
    Context,
    build_server,
    caller_from_scope,
)
from app.mcp.streams import StreamLimits
from app.observability import correlation_id_var
from app.runtime import Resources
from app.runtime.identity import headers_claim, resolve_caller
from app.services.api_keys import Caller

log = logging.getLogger(__name__)


async def _scope_caller(ctx: Context) -> Caller:
    return caller_from_scope(ctx)


class McpHttp:
    """The ASGI endpoint mounted at /mcp; `running()` belongs in the app's lifespan."""

    def __init__(self, resources: Callable[[], Resources], streams: StreamLimits) -> None:
        self.resources = resources
        self.streams = streams
        self.server = build_server(resources, _scope_caller)
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the SDK's session manager for the app's lifetime (its own task: the task group
        it opens must be entered and left by one task, which a lifespan does not guarantee)."""
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            # The endpoint needs a per-user key, which a rebinding page cannot know; host
            # checks would also refuse every reverse-proxied name.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        started, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(serve())
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiter.cancel()
            task.result()  # raises what stopped it
        self._manager = manager
        try:
            yield
        finally:
            self._manager = None
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            scope[CALLER_SCOPE_KEY] = await self._authenticate(Headers(scope=scope))
            scope[CORRELATION_SCOPE_KEY] = correlation_id_var.get()
        except ServiceError as exc:
            challenge = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
            body = {"error": exc.name, "detail": exc.message}
            await JSONResponse(body, exc.status_code, headers=challenge)(scope, receive, send)
            return
        if self._manager is None:
            unavailable = {"error": "ServiceError", "detail": "MCP endpoint is not running"}
            await JSONResponse(unavailable, 503)(scope, receive, send)
            return
        if scope["method"] != "GET":
            await self._manager.handle_request(scope, receive, send)
            return
        # GET opens a server-to-client stream: bounded in number and idle time (streams.py).
        caller: Caller = scope[CALLER_SCOPE_KEY]
        key = caller.key_id or caller.user_id
        try:
            self.streams.admit(key)
        except ServiceError as exc:
            body = {"error": exc.name, "detail": exc.message}
            await JSONResponse(body, exc.status_code, headers={"Retry-After": "1"})(
                scope, receive, send
            )
            return
        try:
            await self.streams.hold(self._manager.handle_request, scope, receive, send)
        finally:
            self.streams.release(key)

    async def _authenticate(self, headers: Headers) -> Caller:
        """The caller of this POST or GET: a per-user key as Bearer (resolve_caller's rules)."""
        authorization = headers.get("authorization")
        token: str | None = None
        if authorization:
            scheme, _, token = authorization.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise AuthenticationError("Authorization must be 'Bearer <key>'")
        try:
            return await resolve_caller(
                self.resources(),
                token,
                headers.get("x-user-id"),
                missing="missing Authorization: Bearer <per-user API key>",
                per_user_only="/mcp takes a per-user API key (pgrecall keys create --user ...)",
                claim=headers_claim(headers),
            )
        except sa_exc.SQLAlchemyError as exc:
            log.warning("key lookup failed: %s", type(exc).__name__)
            raise DatabaseUnavailableError("database unavailable, retry later") from None
