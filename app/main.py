"""create_app(): the lifespan owns the engine, sessionmaker, Redis and the embedder."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import __version__
from app.adapters.cache import Cache
from app.adapters.embedder import Embedder, build_embedder
from app.api import (
    admin,
    admin_keys,
    agent_tools,
    conversations,
    docs,
    health,
    memories,
    store,
    tools,
)
from app.api.deps import Resources
from app.api.handlers import install_handlers
from app.api.openapi import install_openapi
from app.config import Settings
from app.console import install_console
from app.db import create_engine, create_sessionmaker
from app.extraction.runtime import build_extraction
from app.mcp.http import McpHttp
from app.mcp.streams import StreamLimits
from app.middleware import BodySizeLimitMiddleware, CorrelationIdMiddleware
from app.proxy import routes as chat_proxy
from app.proxy.upstream import ChatUpstream
from app.retrieval.presets import get_preset
from app.roles import database_urls, prepare_database, warn_unless_rls_binds
from app.services.api_keys import KeyAuthenticator
from app.services.embedding import EmbeddingService
from app.services.query import QueryConfig
from app.supervisor import PostgresSupervisor

log = logging.getLogger(__name__)


def query_config(settings: Settings) -> QueryConfig:
    """Retrieval settings handed to the query service."""
    return QueryConfig(
        preset=get_preset(settings.retrieval_preset),
        token_budget=settings.token_budget,
        min_relevance=settings.min_relevance,
        max_results=settings.max_results,
        rate_limit_per_minute=settings.rate_limit_per_minute,
        timeout_s=settings.query_timeout_s,
        exact_search_max_items=settings.exact_search_max_items,
        ivfflat_probes=settings.ivfflat_probes,
        ivfflat_max_probes=settings.ivfflat_max_probes,
        ivfflat_probe_share=settings.ivfflat_probe_share,
        hnsw_ef_search=settings.hnsw_ef_search,
        hnsw_max_scan_tuples=settings.hnsw_max_scan_tuples,
    )


def embedder_from_settings(settings: Settings) -> Embedder:
    return build_embedder(
        settings.embedding_provider.value,
        model=settings.embedding_model,
        dimension=settings.embedding_dimension,
        base_url=settings.openai_base_url,
        api_key=settings.openai_api_key.get_secret_value() if settings.openai_api_key else None,
        timeout_s=settings.embedding_timeout_s,
        threads=settings.embedding_threads,
    )


def create_app(settings: Settings, *, embedder: Embedder | None = None) -> FastAPI:
    """The ASGI app; resources are created in the lifespan, not at import."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        urls = await asyncio.to_thread(database_urls, settings)
        # As the owner; requests run as the service role.
        await prepare_database(urls, migrate=settings.migrate_on_start)
        engine = create_engine(
            urls.service,
            pool_size=settings.db_pool_size,
            statement_timeout_ms=int(settings.query_timeout_s * 1000) + 3000,
        )
        await warn_unless_rls_binds(engine)
        cache = Cache.from_url(settings.redis_url)
        if not cache.enabled:
            log.info(
                "no PGRECALL_REDIS_URL: embedding cache, session cache and rate limits are off"
            )
        elif not await cache.ping():
            log.warning("Redis unreachable at start: serving without caches until it is back")
        the_embedder = embedder or await asyncio.to_thread(embedder_from_settings, settings)
        if not settings.auth_enabled:
            log.warning("no PGRECALL_API_KEY: authentication is off (listening on loopback only)")
        sessionmaker = create_sessionmaker(engine)
        embeddings = EmbeddingService(the_embedder, cache if cache.enabled else None)
        extraction = build_extraction(settings, sessionmaker, embeddings)
        app.state.resources = Resources(
            engine=engine,
            sessionmaker=sessionmaker,
            embeddings=embeddings,
            cache=cache,
            query_config=query_config(settings),
            api_key=settings.api_key.get_secret_value() if settings.api_key else None,
            admin_api_key=settings.admin_api_key.get_secret_value()
            if settings.admin_api_key
            else None,
            session_messages=settings.session_messages,
            query_slots=asyncio.Semaphore(max(1, settings.db_pool_size)),
            keys=KeyAuthenticator(sessionmaker, ttl_s=settings.key_cache_ttl_s),
            write_rate_limit_per_minute=settings.write_rate_limit_per_minute,
            extraction=extraction,
            message_passages=settings.message_passages,
        )
        if extraction is not None and settings.extraction_workers:
            extraction.worker.start()
        app.state.chat_upstream = ChatUpstream.from_settings(settings)
        # The embedded server is ours to keep alive (app/supervisor.py); an external one is not.
        supervisor = None
        if settings.embedded_database:
            from app.embedded import EmbeddedPostgres

            supervisor = PostgresSupervisor(EmbeddedPostgres(settings.data_dir))
            supervisor.start()
        try:
            async with mcp_door.running():
                yield
        finally:
            if supervisor is not None:
                await supervisor.stop()
            if extraction is not None:
                await extraction.aclose()  # lets the batches in hand finish first
            await app.state.chat_upstream.aclose()
            await cache.aclose()
            close = getattr(the_embedder, "aclose", None)
            if close is not None and embedder is None:
                await close()
            await engine.dispose()

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
    app.include_router(agent_tools.router)
    app.include_router(store.router)
    app.include_router(memories.router)
    app.include_router(admin.router)
    app.include_router(admin_keys.router)
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
    app.add_middleware(CorrelationIdMiddleware)
    return app
