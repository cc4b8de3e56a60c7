"""The database checks of `pgrecall doctor` and `pgrecall serve`: each returns one `Check`."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.doctor.checks import Check, one_line
from app.models.base import CREATE_VECTOR_EXTENSION

if TYPE_CHECKING:
    from app.config import Settings

MIN_PGVECTOR = (0, 8)
# Rows for the throwaway index builds: enough for ivfflat's k-means and several hnsw layers.
PROBE_ROWS = 300
PROBE_LISTS = 10
CONNECT_TIMEOUT_S = 5
CRASH_MESSAGE = "pgvector crashed building an index: the bundled vector.so does not run on this CPU"

_CRASH_HINTS = (
    "connection was closed in the middle of operation",
    "server closed the connection unexpectedly",
    "terminating connection because of crash of another server process",
    "the database system is in recovery mode",
)


def backend_crashed(exc: BaseException) -> bool:
    """Did the server process serving us die (a signal), rather than report an error?"""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DBAPIError) and current.connection_invalidated:
            return True
        if type(current).__name__ == "ConnectionDoesNotExistError" or isinstance(
            current, ConnectionResetError
        ):
            return True
        if any(hint in str(current) for hint in _CRASH_HINTS):
            return True
        nxt = current.orig if isinstance(current, DBAPIError) else None
        current = nxt or current.__cause__ or current.__context__
    return False


def probe_engine(url: str) -> AsyncEngine:
    """A one-connection engine for checks: short connect timeout, nothing pooled."""
    from sqlalchemy.pool import NullPool

    return create_async_engine(url, poolclass=NullPool, connect_args={"timeout": CONNECT_TIMEOUT_S})


def _where(url: str) -> str:
    """Where the database is, for messages (never the password)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    socket = parsed.query.get("host")
    if parsed.host is None and isinstance(socket, str):  # unix socket: name its directory
        return f"{parsed.database} via socket {socket}/.s.PGSQL.{parsed.query.get('port', 5432)}"
    return parsed.render_as_string(hide_password=True)


async def check_reachable(engine: AsyncEngine) -> Check:
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:  # any failure to connect is the answer
        return Check(
            "postgres", False, f"cannot connect to {_where(str(engine.url))}: {one_line(exc)}"
        )
    return Check("postgres", True, f"reachable at {_where(str(engine.url))}")


def _version(text_version: str) -> tuple[int, ...]:
    parts = []
    for piece in text_version.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


async def check_versions(engine: AsyncEngine) -> Check:
    """Server version, and pgvector >= 0.8 (installed, or available to CREATE EXTENSION)."""
    try:
        async with engine.connect() as conn:
            server = await conn.scalar(text("SHOW server_version"))
            installed = await conn.scalar(
                text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            )
            available = await conn.scalar(
                text("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'")
            )
    except Exception as exc:
        return Check("versions", False, f"cannot read versions: {one_line(exc)}")
    vector = installed or available
    need = ".".join(str(p) for p in MIN_PGVECTOR)
    if vector is None:
        return Check(
            "versions", False, f"Postgres {server} has no pgvector: install pgvector >= {need}"
        )
    if _version(str(vector))[:2] < MIN_PGVECTOR:
        return Check(
            "versions",
            False,
            f"Postgres {server}, pgvector {vector}: pgrecall needs pgvector >= {need} "
            "(iterative index scans)",
        )
    state = "" if installed else " (available, not yet created)"
    return Check("versions", True, f"Postgres {server}, pgvector {vector}{state}")


async def check_index_build(
    engine: AsyncEngine, dimension: int, *, rows: int = PROBE_ROWS, embedded: bool = True
) -> Check:
    """Build a throwaway hnsw and ivfflat index over random halfvec vectors (the schema's type,
    app/vectors.py) in a TEMPORARY table.

    Everything happens in one transaction that is rolled back (CREATE EXTENSION included, for a
    database not migrated yet). A pgvector built for another CPU dies here with SIGILL.
    """
    statements = [
        CREATE_VECTOR_EXTENSION,
        f"CREATE TEMPORARY TABLE doctor_vectors (id int, v halfvec({dimension})) ON COMMIT DROP",
        f"INSERT INTO doctor_vectors SELECT i, array_agg(random())::halfvec({dimension}) "
        f"FROM generate_series(1, {rows}) i, generate_series(1, {dimension}) d GROUP BY i",
        "CREATE INDEX ON doctor_vectors USING hnsw (v halfvec_cosine_ops)",
        f"CREATE INDEX ON doctor_vectors USING ivfflat (v halfvec_cosine_ops) "
        f"WITH (lists = {PROBE_LISTS})",
        "SET LOCAL enable_seqscan = off",
        "SELECT count(*) FROM (SELECT id FROM doctor_vectors "
        "ORDER BY v <=> (SELECT v FROM doctor_vectors LIMIT 1) LIMIT 5) nearest",
    ]
    try:
        async with engine.connect() as conn:
            try:
                for sql in statements:
                    await conn.execute(text(sql))
            finally:
                if not conn.invalidated:
                    await conn.rollback()
    except Exception as exc:
        if backend_crashed(exc):
            message = (
                CRASH_MESSAGE
                if embedded
                else CRASH_MESSAGE.replace("the bundled vector.so", "the server's vector.so")
            )
            return Check("index build", False, message)
        return Check("index build", False, f"hnsw/ivfflat build failed: {one_line(exc)}")
    return Check("index build", True, f"hnsw and ivfflat built over {rows} random vectors")


async def check_migrations(engine: AsyncEngine, *, migrate_on_start: bool) -> Check:
    from app.migrate import current_revision, head_revision

    try:
        current = await current_revision(engine)
    except Exception as exc:
        return Check("migrations", False, f"cannot read the revision: {one_line(exc)}")
    head = head_revision()
    if current == head:
        return Check("migrations", True, f"at head ({head})")
    if migrate_on_start:
        return Check(
            "migrations",
            True,
            f"at {current or 'none'}, head {head}: `pgrecall serve` applies them at start",
        )
    return Check(
        "migrations",
        False,
        f"at {current or 'none'}, head {head}, PGRECALL_MIGRATE_ON_START is off: run "
        "`pgrecall db upgrade`",
    )


def prepare_database_check(settings: Settings) -> Check:
    """What the app's start-up does to the database - migrate (when PGRECALL_MIGRATE_ON_START)
    and create or grant the service role - once, with a one-line cause on failure."""
    from app.migrate import head_revision
    from app.roles import database_urls, prepare_database

    try:
        asyncio.run(prepare_database(database_urls(settings), migrate=settings.migrate_on_start))
    except Exception as exc:
        if backend_crashed(exc):
            return Check("migrations", False, CRASH_MESSAGE)  # CREATE INDEX in a migration
        return Check("migrations", False, f"database set-up failed: {one_line(exc)}")
    if settings.migrate_on_start:
        return Check("migrations", True, f"at head ({head_revision()}), service role granted")
    return Check("migrations", True, "service role granted (PGRECALL_MIGRATE_ON_START is off)")
