"""Fixtures for the adapter tests: real redis-server processes on unix sockets."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis

from app.adapters.cache import Cache
from tests.redis_server import RedisServer
from tests.servers import temporary_redis


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The shared server; tests must not kill or pause it (use `own_redis_server`)."""
    with temporary_redis() as server:
        yield server


@pytest.fixture
def own_redis_server() -> Iterator[RedisServer]:
    """A server only this test uses, free to be killed, paused and restarted."""
    with temporary_redis() as server:
        yield server


@pytest.fixture
async def redis_client(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client on the shared server, emptied before the test, to inspect real state."""
    client = Redis.from_url(redis_server.url)
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def cache(redis_server: RedisServer, redis_client: Redis) -> AsyncIterator[Cache]:
    """A Cache on the shared, freshly flushed server."""
    instance = Cache.from_url(redis_server.url)
    try:
        yield instance
    finally:
        await instance.aclose()
