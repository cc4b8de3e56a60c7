"""Admin test fixtures: a private database per test for whole-store operations, sessions, a
cache.

Seeding with reindex, re-embedding and index rebuilds act on every row of a table, so they run
in their own database (same embedded server): the shared one keeps the migration's indexes
that other tests inspect, and other tests' rows stay on their model.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from app.adapters.cache import Cache
from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.migrate import upgrade_head
from tests.redis_server import RedisServer
from tests.served import free_port


def database_url(pg: EmbeddedPostgres, name: str) -> str:
    return pg.url.replace("@/postgres?", f"@/{name}?")


async def _on_server(pg: EmbeddedPostgres, statement: str) -> None:
    """One statement outside a transaction, on a connection of its own (none is kept between
    tests: a test that restarts the server would leave a pooled one closed)."""
    engine = create_async_engine(pg.url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
async def private_template(pg: EmbeddedPostgres) -> AsyncIterator[str]:
    """Name of a migrated database that each test's private database is copied from (one per
    test worker: a copy takes a fraction of a second, a migration several)."""
    name = f"pgr_admin_template_{uuid.uuid4().hex[:12]}"
    await _on_server(pg, f'CREATE DATABASE "{name}"')
    await asyncio.to_thread(upgrade_head, database_url(pg, name))
    yield name
    await _on_server(pg, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
async def private_db(pg: EmbeddedPostgres, private_template: str) -> AsyncIterator[str]:
    """URL of a fresh, migrated database of this test's own: whole-store operations (reindex,
    reembed, rebuilds, seeding with reindex) count and rewrite every row, so no test may see
    another's (the suite passes in any order: `-p randomly`)."""
    name = f"pgr_admin_{uuid.uuid4().hex[:12]}"
    await _on_server(pg, f'CREATE DATABASE "{name}" TEMPLATE "{private_template}"')
    yield database_url(pg, name)
    await _on_server(pg, f'DROP DATABASE "{name}" WITH (FORCE)')


async def _sessions(url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(url, pool_size=2, statement_timeout_ms=600_000)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def shared_sessions(pg: EmbeddedPostgres) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions on the shared test database (per-user work only: never rebuild indexes here)."""
    async for maker in _sessions(pg.url):
        yield maker


@pytest.fixture
async def private_sessions(private_db: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Sessions on this test's private database."""
    async for maker in _sessions(private_db):
        yield maker


@pytest.fixture
async def cache(redis_srv: RedisServer) -> AsyncIterator[Cache]:
    """A cache on the shared redis-server."""
    c = Cache.from_url(redis_srv.url)
    try:
        yield c
    finally:
        await c.aclose()


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(private_db: str, redis_srv: RedisServer, tmp_path: Path):  # type: ignore[no-untyped-def]
    """The CLI as an operator runs it: `run("keys", "list")` or `run("scripts/x.py", ...)`."""
    base: dict[str, str | None] = {
        **os.environ,
        "PGRECALL_DATABASE_URL": private_db,
        "PGRECALL_REDIS_URL": redis_srv.url,
        "PGRECALL_DATA_DIR": str(tmp_path),
        "PGRECALL_LOG_LEVEL": "WARNING",
        # `pgrecall keys` asks a running service first: nothing listens here, so these tests
        # drive the database path (tests/cli/test_keys_served.py drives the service path).
        "PGRECALL_HOST": "127.0.0.1",
        "PGRECALL_PORT": str(free_port()),
    }

    def invoke(
        *args: str, stdin: str = "", env: dict[str, str | None] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`env` changes the environment for this call (None unsets a variable)."""
        changed = {**base, **(env or {})}
        command = (
            [sys.executable, *args]
            if args[0].endswith(".py")
            else [sys.executable, "-m", "app.cli", *args]
        )
        return subprocess.run(
            command,
            cwd=ROOT,
            env={k: v for k, v in changed.items() if v is not None},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return invoke
