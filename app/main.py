"""create_app(): the HTTP app, assembling every door over one app.runtime.Resources.

The lifespan opens the resources (app/runtime) and hands them to the doors mounted here: the
HTTP API (app/api), the console, the chat proxy and MCP. This module is the only one that
imports more than one door."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import __version__
from app.adapters.embedder import Embedder
from app.api import (
    admin,
    admin_keys,
    conversations,
    docs,
    health,
    memories,
    spaces,
    store,
    tools,
)
from app.api.openapi import install_openapi
from app.config import Settings
from app.console import install_console
from app.extraction.runtime import build_extraction
from app.http.errors import install_handlers
from app.mcp.http import McpHttp
from app.mcp.streams import StreamLimits
from app.middleware import (
    BodySizeLimitMiddleware,
    CorrelationIdMiddleware,
    SingleIdentityHeaderMiddleware,
)
from app.proxy import routes as chat_proxy
from app.proxy.upstream import ChatUpstream
from app.runtime import open_resources
from app.supervisor import PostgresSupervisor

log = logging.getLogger(__name__)


_frozen = False


def freeze_start_up_objects() -> None:
    """Move what start-up created (modules, the model's session, the resources) out of the
    garbage collector's sight: a full collection then walks only what requests allocate (its
    effect on the tail latencies is measured in docs/performance.md). Once per process: a
    second app in the same process (tests) leaves the first freeze as it is."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> FastAPI:
    """The ASGI app; resources are created in the lifespan, not at import."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_resources(settings, embedder=embedder) as resources:
            app.state.resources = resources
            extraction = build_extraction(settings, resources.sessionmaker, resources.embeddings)
            app.state.extraction = extraction
            if extraction is not None and settings.extraction_workers:
                extraction.worker.start()
            app.state.chat_upstream = ChatUpstream.from_settings(settings)
            # The embedded server is ours to keep alive (app/supervisor.py); an external one
            # is not.
            supervisor = None
            if settings.embedded_database:
                from app.embedded import EmbeddedPostgres

                supervisor = PostgresSupervisor(EmbeddedPostgres(settings.data_dir))
                supervisor.start()
            freeze_start_up_objects()
            try:
                async with mcp_door.running():
                    yield
            finally:
                if supervisor is not None:
                    await supervisor.stop()
                if extraction is not None:
                    await extraction.aclose()  # lets the batches in hand finish first
                await app.state.chat_upstream.aclose()

    app = FastAPI(
        title="pgrecall",
        version=__version__,
        description="Postgres-native memory for LLM agents: hybrid recall, strictly per user.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    install_handlers(app)
    install_openapi(app, auth_configured=settings.auth_enabled)
    app.include_router(docs.router)
    app.include_router(health.router)
    app.include_router(conversations.router)
    app.include_router(tools.router)
    app.include_router(store.router)
    app.include_router(memories.router)
    app.include_router(admin.router)
    app.include_router(admin_keys.router)
    app.include_router(spaces.admin)
    app.include_router(spaces.router)
    app.include_router(chat_proxy.router)
    install_console(app, settings)  # /console, app/console/
    streams = StreamLimits(
        settings.mcp_max_streams, settings.mcp_max_streams_per_key, settings.mcp_stream_idle_s
    )
    mcp_door = McpHttp(lambda: app.state.resources, streams)  # MCP (streamable HTTP), app/mcp/
    app.router.add_route(
        "/mcp", mcp_door, methods=["GET", "POST", "DELETE"], include_in_schema=False
    )
    app.add_middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(SingleIdentityHeaderMiddleware)  # before any door reads who is calling
    app.add_middleware(CorrelationIdMiddleware)
    return app
