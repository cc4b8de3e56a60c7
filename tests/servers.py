"""Throwaway real servers for tests: Redis and the embedded Postgres, each in a short temp dir.

Short paths matter: unix socket paths are limited to about 100 bytes, and pytest's tmp_path is
often longer.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.config import Settings
from app.embedded import EmbeddedPostgres
from app.migrate import upgrade_head
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user
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


def service_url(server: EmbeddedPostgres) -> str:
    """The server as the service role (bound by row-level security), not its superuser."""
    return with_user(server.url, DEFAULT_APP_ROLE)


def app_settings(pg: EmbeddedPostgres, redis_url: str, **overrides: Any) -> Settings:
    """Settings of an app on the test servers: requests as the service role (row-level security
    on), migrations left to the suite, no rate limit unless asked for."""
    base: dict[str, Any] = {
        "database_url": service_url(pg),
        "migration_database_url": pg.url,
        "redis_url": redis_url,
        "migrate_on_start": False,
        "rate_limit_per_minute": 0,
        "data_dir": Path(tempfile.gettempdir()),
    }
    return Settings(**{**base, **overrides})
