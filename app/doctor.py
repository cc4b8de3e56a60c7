"""`pgrecall doctor`, and the start-up checks of `pgrecall serve`: one line per thing it needs.

Each check returns a `Check(name, ok, message)` with a one-line message that names the cause
and, on failure, what to do. `doctor` prints them all (checks that depend on a failed one are
printed as skipped) and exits 1 naming the first failure; `serve` runs the same functions
before it listens and stops with the same line instead of a traceback.
"""

from __future__ import annotations

import asyncio
import fcntl
import grp
import os
import pwd
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.config import Settings, SettingsError, load_settings

if TYPE_CHECKING:
    from app.embedded import EmbeddedPostgres

MIN_PYTHON = (3, 11)
MIN_PGVECTOR = (0, 8)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# Rows for the throwaway index builds: enough for ivfflat's k-means and several hnsw layers.
PROBE_ROWS = 300
PROBE_LISTS = 10
CONNECT_TIMEOUT_S = 5
CRASH_MESSAGE = "pgvector crashed building an index: the bundled vector.so does not run on this CPU"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str
    skipped: bool = False  # not run because a check it depends on failed

    def line(self) -> str:
        status = "skip" if self.skipped else "ok" if self.ok else "FAIL"
        return f"{status:<5} {self.name:<12} {self.message}"


class StartupError(Exception):
    """A check `pgrecall serve` needs failed; str() is the one line to print."""

    def __init__(self, check: Check) -> None:
        super().__init__(f"{check.name}: {check.message}")
        self.check = check


def one_line(exc: BaseException) -> str:
    """An exception as one readable line: the driver's own message, not SQLAlchemy's wrapper."""
    cause = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    head = lines[0] if lines else type(cause).__name__
    # A failed pg_ctl puts the server log below its own output: its FATAL line is the cause.
    telling = [ln for ln in lines[1:] if "FATAL" in ln or "Permission denied" in ln]
    if telling:
        head = f"{head}; {telling[0]}"
    return head if head.startswith(type(cause).__name__) else f"{type(cause).__name__}: {head}"


# -- process and settings ---------------------------------------------------------------------


def check_python() -> Check:
    version = ".".join(str(p) for p in sys.version_info[:3])
    ok = sys.version_info[:2] >= MIN_PYTHON
    need = ".".join(str(p) for p in MIN_PYTHON)
    return Check("python", ok, version if ok else f"{version}: pgrecall needs Python >= {need}")


def check_settings() -> tuple[Check, Settings | None]:
    try:
        settings = load_settings()
    except SettingsError as exc:
        return Check("settings", False, str(exc)), None
    where = "external database" if settings.database_url else f"embedded, {settings.data_dir}"
    return Check("settings", True, f"PGRECALL_ settings valid ({where})"), settings


def check_exposure(settings: Settings) -> Check:
    """The same rule as Settings (a blank key is no key there): exposed without a key fails."""
    loopback = settings.host in LOOPBACK
    if settings.api_key is None:
        if not loopback:
            return Check(
                "exposure",
                False,
                f"PGRECALL_HOST={settings.host} without PGRECALL_API_KEY: set a key or bind to "
                "127.0.0.1",
            )
        return Check("exposure", True, f"no API key: auth off, listening on {settings.host} only")
    admin = "set" if settings.admin_api_key is not None else "unset (admin API disabled)"
    return Check(
        "exposure", True, f"auth on (service key set, admin key {admin}), host {settings.host}"
    )


# -- data dir ---------------------------------------------------------------------------------


def postgres_os_user() -> pwd.struct_passwd | None:
    """The OS user the embedded server runs as when pgrecall runs as root (None otherwise)."""
    if os.geteuid() != 0:
        return None
    from app.embedded import SYSTEM_USER

    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        return None  # not created yet: the first start creates it; judge as "other"


def _can_traverse(path: Path, user: pwd.struct_passwd | None) -> bool:
    """May `user` (None: a user that owns nothing, in no group) pass through directory `path`?"""
    info = path.stat()
    if user is not None and info.st_uid == user.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if user is not None:
        groups = {user.pw_gid} | {g.gr_gid for g in grp.getgrall() if user.pw_name in g.gr_mem}
        if info.st_gid in groups:
            return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def blocking_parents(path: Path, user: pwd.struct_passwd | None) -> list[Path]:
    """The existing directories above `path` that `user` cannot pass through, outermost first."""
    resolved = path.expanduser().resolve()
    parents = [p for p in reversed(resolved.parents) if p.exists()]
    return [p for p in parents if not _can_traverse(p, user)]


def check_writable(data_dir: Path) -> Check:
    """The data dir can be created and written."""
    data_dir = data_dir.expanduser().resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "data dir",
            False,
            f"cannot write {data_dir}: {one_line(exc)}; set PGRECALL_DATA_DIR to a writable "
            "directory",
        )
    return Check("data dir", True, f"{data_dir} writable")


def check_reachable_by_postgres(data_dir: Path) -> Check:
    """As root, the Postgres OS user must pass through every directory above the data dir."""
    from app.embedded import SYSTEM_USER

    data_dir = data_dir.expanduser().resolve()
    blocked = blocking_parents(data_dir, postgres_os_user()) if os.geteuid() == 0 else []
    if blocked:
        first = blocked[0]
        mode = stat.S_IMODE(first.stat().st_mode)
        return Check(
            "data dir",
            False,
            f"{first} (mode {mode:04o}) cannot be entered by the Postgres OS user "
            f"'{SYSTEM_USER}', so the embedded server fails with Errno 13 (Permission "
            f"denied): run `chmod o+x {first}` or use a PGRECALL_DATA_DIR outside it",
        )
    return Check("data dir", True, f"{data_dir} writable")


def check_data_dir(settings: Settings) -> Check:
    """Writable, and (as root) reachable by the Postgres OS user; unused with an external DB."""
    if not settings.embedded_database:
        return Check("data dir", True, "not used (PGRECALL_DATABASE_URL is set)")
    writable = check_writable(settings.data_dir)
    return writable if not writable.ok else check_reachable_by_postgres(settings.data_dir)


# -- Postgres ---------------------------------------------------------------------------------

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
    """Build a throwaway hnsw and ivfflat index over random vectors in a TEMPORARY table.

    Everything happens in one transaction that is rolled back (CREATE EXTENSION included, for a
    database not migrated yet). A pgvector built for another CPU dies here with SIGILL.
    """
    statements = [
        "CREATE EXTENSION IF NOT EXISTS vector",
        f"CREATE TEMPORARY TABLE doctor_vectors (id int, v vector({dimension})) ON COMMIT DROP",
        f"INSERT INTO doctor_vectors SELECT i, array_agg(random())::vector({dimension}) "
        f"FROM generate_series(1, {rows}) i, generate_series(1, {dimension}) d GROUP BY i",
        "CREATE INDEX ON doctor_vectors USING hnsw (v vector_cosine_ops)",
        f"CREATE INDEX ON doctor_vectors USING ivfflat (v vector_cosine_ops) "
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


def apply_migrations(url: str) -> Check:
    """Upgrade to head (what `serve` does at start), with a one-line cause on failure."""
    from app.migrate import head_revision, upgrade_head

    try:
        upgrade_head(url)
    except Exception as exc:
        if backend_crashed(exc):
            return Check("migrations", False, CRASH_MESSAGE)  # CREATE INDEX in a migration
        return Check("migrations", False, f"upgrade to head failed: {one_line(exc)}")
    return Check("migrations", True, f"at head ({head_revision()})")


# -- Redis, embedder, tokenizer ---------------------------------------------------------------


async def check_redis(url: str | None) -> Check:
    if url is None:
        return Check("redis", True, "not configured: caches and rate limits are off")
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        await client.ping()
    except Exception as exc:
        return Check("redis", False, f"PGRECALL_REDIS_URL {url} unreachable: {one_line(exc)}")
    finally:
        await client.aclose()
    return Check("redis", True, f"answers PING at {url}")


async def check_embedder(settings: Settings) -> Check:
    import numpy as np

    from app.main import embedder_from_settings

    try:
        embedder = await asyncio.to_thread(embedder_from_settings, settings)
        try:
            vectors = await embedder.embed(["pgrecall doctor checks the embedder."])
        finally:
            close = getattr(embedder, "aclose", None)
            if close is not None:
                await close()
    except Exception as exc:
        return Check("embedder", False, f"{settings.embedding_model}: {one_line(exc)}")
    norm = float(np.linalg.norm(vectors[0])) if len(vectors) else 0.0
    if vectors.shape != (1, embedder.dimension) or abs(norm - 1.0) > 1e-3:
        return Check("embedder", False, f"{embedder.model}: bad output shape {vectors.shape}")
    return Check("embedder", True, f"{embedder.model} loads and embeds ({embedder.dimension} dims)")


def check_tokenizer() -> Check:
    from app.retrieval.budget import cl100k

    sample = "pgrecall doctor counts tokens."
    try:
        encoding = cl100k()
        tokens = encoding.encode(sample)
        ok = bool(tokens) and encoding.decode(tokens) == sample
    except Exception as exc:
        return Check("tokenizer", False, f"cl100k_base (offline): {one_line(exc)}")
    if not ok:
        return Check("tokenizer", False, "cl100k_base (offline) does not round-trip text")
    return Check("tokenizer", True, "cl100k_base loads offline")


# -- the embedded server ----------------------------------------------------------------------


@contextmanager
def serve_lock(data_dir: Path) -> Iterator[IO[str] | None]:
    """`serve.lock` if no `pgrecall serve` holds it (None when one does: attach, never stop)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    handle = open(data_dir / "serve.lock", "w")  # noqa: SIM115
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        yield handle
    finally:
        handle.close()


def start_embedded(settings: Settings) -> tuple[Check, EmbeddedPostgres | None]:
    """Start or attach to the embedded server: (check, the server when it is ready)."""
    from app.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres(settings.data_dir)
    try:
        embedded.start()
    except Exception as exc:
        return explain_start_failure(settings, exc).check, None
    return Check("postgres", True, "embedded server ready"), embedded


# -- doctor -----------------------------------------------------------------------------------


async def _database_checks(settings: Settings, url: str) -> list[Check]:
    engine = probe_engine(url)
    try:
        reachable = await check_reachable(engine)
        if not reachable.ok:
            return [reachable]
        checks = [reachable, await check_versions(engine)]
        if checks[-1].ok:
            checks.append(
                await check_index_build(
                    engine, settings.embedding_dimension, embedded=settings.embedded_database
                )
            )
        else:
            checks.extend(_skipped(["index build"], "pgvector"))
        checks.append(await check_migrations(engine, migrate_on_start=settings.migrate_on_start))
        return checks
    finally:
        await engine.dispose()


def _skipped(names: list[str], because: str) -> list[Check]:
    return [Check(name, False, f"not checked: needs {because}", skipped=True) for name in names]


DB_CHECKS = ["postgres", "versions", "index build", "migrations"]


def run_doctor(echo: Callable[[Check], None]) -> list[Check]:
    """Run every check in order, reporting each as it finishes; returns them all."""
    results: list[Check] = []

    def report(check: Check) -> None:
        results.append(check)
        echo(check)

    report(check_python())
    settings_check, settings = check_settings()
    report(settings_check)
    if settings is None:
        return results
    data_dir = check_data_dir(settings)
    report(data_dir)
    if not data_dir.ok:
        for check in _skipped(DB_CHECKS, "the data dir"):
            report(check)
    elif settings.database_url:
        for check in asyncio.run(_database_checks(settings, settings.database_url)):
            report(check)
    else:
        with serve_lock(settings.data_dir) as lock:
            started, embedded = start_embedded(settings)
            if embedded is None:
                report(started)
            try:
                if embedded is not None:
                    for check in asyncio.run(_database_checks(settings, embedded.url)):
                        report(check)
            finally:
                # Stop only a server this doctor started, and never one a `serve` uses.
                if embedded is not None and lock is not None and embedded.started_here:
                    embedded.stop()
    if results[-1].name == "postgres" and not results[-1].ok:
        for check in _skipped(DB_CHECKS[1:], "Postgres"):
            report(check)
    report(asyncio.run(check_redis(settings.redis_url)))
    report(asyncio.run(check_embedder(settings)))
    report(check_tokenizer())
    report(check_exposure(settings))
    return results


def doctor() -> None:
    """Check what the service needs, one line each; exit 1 naming the first failure."""
    import typer

    checks = run_doctor(lambda check: typer.echo(check.line()))
    failed = [c for c in checks if not c.ok and not c.skipped]
    if failed:
        typer.echo(f"pgrecall doctor: {failed[0].name} failed: {failed[0].message}", err=True)
        raise typer.Exit(1)
    typer.echo(f"pgrecall doctor: all {len(checks)} checks ok")


# -- serve ------------------------------------------------------------------------------------


def preflight(settings: Settings, url: str, *, embedded: bool) -> None:
    """What `pgrecall serve` checks before it listens; raises StartupError with one line.

    `url` is the database (an embedded server is already started by the caller).
    """

    async def database() -> None:
        engine = probe_engine(url)
        try:
            for check in (await check_reachable(engine), await check_versions(engine)):
                if not check.ok:
                    raise StartupError(check)
        finally:
            await engine.dispose()

    asyncio.run(database())
    if settings.migrate_on_start:
        migrated = apply_migrations(url)
        if not migrated.ok:
            raise StartupError(migrated)

    async def index_build() -> None:
        engine = probe_engine(url)
        try:
            check = await check_index_build(engine, settings.embedding_dimension, embedded=embedded)
        finally:
            await engine.dispose()
        if not check.ok:
            raise StartupError(check)

    asyncio.run(index_build())


def explain_start_failure(settings: Settings, exc: BaseException) -> StartupError:
    """The embedded server did not start: name a blocked parent directory if that is why."""
    reachable = check_reachable_by_postgres(settings.data_dir)
    if not reachable.ok:
        return StartupError(reachable)
    return StartupError(Check("postgres", False, f"embedded server did not start: {one_line(exc)}"))
