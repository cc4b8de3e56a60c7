"""MCP over stdin/stdout for one user: `pgrecall mcp --key TOKEN` (or PGRECALL_MCP_KEY).

The key is checked before serving and again on every tool call (through the key cache), so a
revoked or expired key stops working within PGRECALL_KEY_CACHE_TTL_S seconds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mcp.server.mcpserver import Context
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache
from app.config import Settings
from app.mcp.tools import ToolResources, build_server
from app.services.api_keys import Caller, KeyAuthenticator
from app.services.embedding import EmbeddingService
from app.services.query import QueryConfig


@dataclass
class StdioResources:
    sessionmaker: async_sessionmaker[AsyncSession]
    embeddings: EmbeddingService
    cache: Cache
    query_config: QueryConfig
    query_slots: asyncio.Semaphore
    keys: KeyAuthenticator
    write_rate_limit_per_minute: int


def stdio_resources(
    settings: Settings,
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    cache: Cache,
) -> StdioResources:
    from app.main import query_config

    return StdioResources(
        sessionmaker=sessionmaker,
        embeddings=embeddings,
        cache=cache,
        query_config=query_config(settings),
        query_slots=asyncio.Semaphore(1),
        keys=KeyAuthenticator(sessionmaker, ttl_s=settings.key_cache_ttl_s),
        write_rate_limit_per_minute=settings.write_rate_limit_per_minute,
    )


async def serve_stdio(resources: StdioResources, token: str) -> Caller:
    """Authenticate the key (raises ServiceError when it is not valid), then serve until EOF."""
    caller = await resources.keys.authenticate(token)

    async def per_call(_: Context) -> Caller:
        return await resources.keys.authenticate(token)

    def current() -> ToolResources:
        return resources

    await build_server(current, per_call).run_stdio_async()
    return caller
