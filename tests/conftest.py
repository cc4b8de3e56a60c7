"""Session-wide real servers: the embedded Postgres (with real migrations) and redis-server.

Tests isolate by user: every test gets fresh user ids, so committed data never collides.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import settings as hypothesis_settings
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.adapters.embedder import LocalEmbedder
from app.config import Settings
from app.db import with_scope_key
from app.embedded import EmbeddedPostgres
from app.main import create_app
from tests.redis_server import RedisServer
from tests.servers import (
    app_settings,
    external_postgres,
    scope_key,
    service_url,
    temporary_postgres,
    temporary_redis,
)

# Every run of the suite (make test, CI) tries each property test on the same examples, so it
# passes or fails the same way every time; failures found while exploring are pinned with
# @example. To explore new examples: PGRECALL_TEST_EXPLORE=1 make test (a fresh clone's run
# found tests/retrieval/test_abstention.py's subnormal case so).
hypothesis_settings.register_profile("fixed", derandomize=True, database=None, print_blob=True)
if not os.environ.get("PGRECALL_TEST_EXPLORE"):
    hypothesis_settings.load_profile("fixed")


# The files that take 40 s or more, slowest first (`--durations=0`, summed per file; 2 cores,
# 2026-12-07: 444 s, then 100, 80, 70, 50, 48, 47 and 41 s of the suite's 1,871 s; the first,
# schemathesis, 170 s since NON_BLANK_SCHEMA's `not` (app/schemas/common.py): its file alone,
# its two tests 115 s and 55 s, 2026-12-07 08:40 UTC):
# collected first, so that with `make test`'s two workers (pytest-xdist, a file per worker, in
# this order: --no-loadscope-reorder) they start at once instead of ending the run on one
# worker while the other idles.
SLOW_FIRST = (
    "tests/test_schemathesis.py",
    "tests/proxy/test_chat_proxy_faults.py",
    "tests/mcp/test_mcp_stdio.py",
    "tests/admin/test_seed_acceptance.py",
    "tests/admin/test_cli_spaces.py",
    "tests/eval/test_runner.py",
    "tests/mcp/test_mcp_streams.py",
    "tests/test_portable_build.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        return SLOW_FIRST.index(path) if path in SLOW_FIRST else len(SLOW_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def _root_logger_restored() -> Iterator[None]:
    """A test that configures logging as the CLI does (app.observability.configure_logging: the
    root logger at INFO, a stderr handler) leaves neither behind for the next test in the same
    process: with the root at INFO, a later test's caplog also held the audit log's INFO lines
    (tests/admin/test_reembed.py failed so once, in a shuffled run)."""
    root = logging.getLogger()
    level, before = root.level, set(root.handlers)
    yield
    root.setLevel(level)
    for handler in list(root.handlers):
        if handler not in before and getattr(handler, "_pgrecall", False):
            root.removeHandler(handler)


@pytest.fixture(scope="session")
def pg() -> Iterator[EmbeddedPostgres]:
    """The embedded Postgres 18 + pgvector, migrated to head with the real Alembic scripts; or
    the server PGRECALL_TEST_DATABASE_URL names (tests/servers.py), migrated the same way."""
    external = external_postgres()
    if external is not None:
        yield external  # type: ignore[misc]  # has the `url` the tests on a shared server use
        return
    with temporary_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def redis_srv() -> Iterator[RedisServer]:
    """A shared redis-server; tests that kill Redis start their own."""
    with temporary_redis() as server:
        yield server


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    """The real local model, loaded once."""
    return LocalEmbedder()


@pytest.fixture
async def db_engine(pg: EmbeddedPostgres) -> AsyncIterator[AsyncEngine]:
    """A separate engine to look at what the service really committed."""
    engine = create_async_engine(pg.url)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def service_engine(pg: EmbeddedPostgres) -> AsyncIterator[AsyncEngine]:
    """The service role with exactly one pooled connection: every session reuses it. It signs
    its user scopes with the database's scope key, as the service does."""
    engine = create_async_engine(service_url(pg), pool_size=1, max_overflow=0)
    with_scope_key(engine, await scope_key(pg))
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
async def generic_plan(db_engine: AsyncEngine) -> str:
    """The plan mode of a small user's read path: generic plans, except on a server with Citus
    loaded (PGRECALL_TEST_DATABASE_URL at a coordinator), where it keeps custom ones
    (RetrievalRepository.search_size)."""
    async with db_engine.connect() as conn:
        citus = await conn.scalar(
            text("SELECT current_setting('citus.propagate_set_commands', true)")
        )
    return "force_custom_plan" if citus is not None else "force_generic_plan"


@pytest.fixture
def user_id() -> str:
    return f"user-{uuid.uuid4()}"


@pytest.fixture
def other_user_id() -> str:
    return f"other-{uuid.uuid4()}"


@pytest.fixture
def base_settings(pg: EmbeddedPostgres, redis_srv: RedisServer) -> Settings:
    """Settings on the real servers, requests as the service role (row-level security on); no
    rate limit unless a test asks for one."""
    return app_settings(pg, redis_srv.url)


@pytest.fixture
def make_client(base_settings: Settings, embedder: LocalEmbedder) -> Callable[..., Any]:
    """`async with make_client(**setting_overrides) as (client, app):` a running app."""

    @asynccontextmanager
    async def factory(**overrides: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
        chosen = overrides.pop("embedder", None) or embedder
        settings = base_settings.model_copy(update=overrides)
        app = create_app(settings, embedder=chosen)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                yield client, app

    return factory


@pytest.fixture
async def client(make_client: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    """A client on an app with auth off, Redis on, rate limit off."""
    async with make_client() as (c, _):
        yield c
