"""Throwaway real servers for tests: Redis and the embedded Postgres, each in a short temp dir.

Short paths matter: unix socket paths are limited to about 100 bytes, and pytest's tmp_path is
often longer.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from app.config import Settings
from app.db import ScopeKey
from app.embedded import EmbeddedPostgres
from app.migrate import upgrade_head
from app.roles import (
    ADMIN_ROLE,
    DEFAULT_APP_ROLE,
    ensure_service_role,
    read_scope_key,
    with_user,
)
from tests.redis_server import RedisServer


@contextmanager
def temporary_redis() -> Iterator[RedisServer]:
    """A started redis-server, stopped and removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="pgr-redis-"))
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@contextmanager
def temporary_postgres(*, migrate: bool = True) -> Iterator[EmbeddedPostgres]:
    """A started embedded Postgres (migrated to head, with the service role, unless told not
    to), removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="pgr-pg-"))
    server = EmbeddedPostgres(directory)
    url = server.start()
    try:
        if migrate:
            upgrade_head(url)
            asyncio.run(ensure_service_role(url, DEFAULT_APP_ROLE, create=True))
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


# A superuser's URL of a running server the suite does not own (a Citus coordinator, say), as
# the embedded server's URL is: tests seed and inspect rows through it past row-level security.
# The session's `pg` fixture then migrates it and runs the tests there instead of on an embedded
# server (docs/scaling.md, "Verified on a real cluster"). Tests that stop or restart the server
# need the embedded one; run the query-path, RLS, scope and API tests this way.
TEST_DATABASE_URL = "PGRECALL_TEST_DATABASE_URL"


@dataclass(frozen=True)
class ExternalPostgres:
    """A server given by PGRECALL_TEST_DATABASE_URL; the service and admin roles must exist
    (created by the operator as docs/security.md shows) and reach it without a password."""

    url: str

    @property
    def dsn(self) -> str:
        """libpq-style DSN (for plain asyncpg), as EmbeddedPostgres.dsn."""
        return make_url(self.url).set(drivername="postgresql").render_as_string(False)


def external_postgres() -> ExternalPostgres | None:
    """The external test server (migrated to head, the service role granted), if one is set."""
    raw = os.environ.get(TEST_DATABASE_URL)
    if not raw:
        return None
    url = Settings(database_url=raw).database_url  # the asyncpg driver, as the app uses it
    assert url is not None
    upgrade_head(url)
    asyncio.run(ensure_service_role(url, DEFAULT_APP_ROLE, create=False))
    return ExternalPostgres(url)


def service_url(server: EmbeddedPostgres | ExternalPostgres) -> str:
    """The server as the service role (bound by row-level security), not its superuser."""
    return with_user(server.url, DEFAULT_APP_ROLE)


def admin_url(server: EmbeddedPostgres | ExternalPostgres) -> str:
    """The server as the admin role (every user's rows, the scope key): pgrecall_admin, which
    an external server's operator creates with LOGIN as docs/security.md shows (reached without
    a password, like the service role)."""
    return with_user(server.url, ADMIN_ROLE)


async def scope_key(server: EmbeddedPostgres | ExternalPostgres) -> ScopeKey:
    """The key a service-role engine signs its user scopes with (create_engine's scope_key)."""
    return await read_scope_key(server.url)


def app_settings(
    pg: EmbeddedPostgres | ExternalPostgres, redis_url: str, **overrides: Any
) -> Settings:
    """Settings of an app on the test servers: requests as the service role (row-level security
    on), admin work as the admin role, migrations left to the suite, no rate limit unless asked
    for."""
    base: dict[str, Any] = {
        "database_url": service_url(pg),
        "admin_database_url": admin_url(pg),
        "migration_database_url": pg.url,
        "redis_url": redis_url,
        "migrate_on_start": False,
        "rate_limit_per_minute": 0,
        "data_dir": Path(tempfile.gettempdir()),
    }
    return Settings(**{**base, **overrides})
