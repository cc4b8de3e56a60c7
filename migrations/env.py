"""Alembic environment: async engine, URL from settings (or the embedded server)."""

from __future__ import annotations

import asyncio
import logging
from logging.config import fileConfig

import pgvector.sqlalchemy  # noqa: F401  (registers the vector type for autogenerate/check)
from alembic import context
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.models import Base

config = context.config
if config.config_file_name is not None and not config.attributes.get("skip_logging_config"):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata
log = logging.getLogger("alembic.env")


def _database_url() -> str:
    """The URL handed in by the caller (app.migrate), else settings, else the embedded server."""
    url = config.attributes.get("database_url")
    if url:
        return str(url)
    from app.config import get_settings

    settings = get_settings()
    if settings.database_url:
        return settings.database_url
    from app.embedded import EmbeddedPostgres

    return EmbeddedPostgres(settings.data_dir).start()


def _include_object(obj, name, type_, reflected, compare_to):  # type: ignore[no-untyped-def]
    # alembic_version is Alembic's own table; pgrecall_scope_key is the database's scope key
    # (migration 0018), read by app/roles.py in raw SQL and by no model. Per-user vector indexes
    # (`pgrecall reindex`, app/repositories/admin.py user_index_name) are data-dependent, not
    # part of the schema.
    if type_ == "index" and reflected and compare_to is None and "_embedding_u_" in (name or ""):
        return False
    return not (type_ == "table" and name in ("alembic_version", "pgrecall_scope_key"))


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        include_object=_include_object,
        compare_type=True,
        compare_server_default=False,
    )


def run_migrations_offline() -> None:
    _configure(url=_database_url())
    with context.begin_transaction():
        context.run_migrations()


def _run_sync(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_online() -> None:
    engine = create_async_engine(_database_url(), poolclass=pool.NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run_sync)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
    else:
        asyncio.run(run_migrations_online())
