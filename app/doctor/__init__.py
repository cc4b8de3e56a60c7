"""`pgrecall doctor`, and the start-up checks of `pgrecall serve`: one line per thing it needs.

`doctor` prints every check (checks that depend on a failed one are printed as skipped) and
exits 1 naming the first failure; `serve` runs the same functions before it listens and stops
with the same line instead of a traceback. The checks: app/doctor/checks.py and postgres.py.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING

from app.config import Settings
from app.doctor.checks import (
    Check,
    check_cpu,
    check_data_dir,
    check_embedder,
    check_exposure,
    check_local_model_installed,
    check_python,
    check_reachable_by_postgres,
    check_redis,
    check_settings,
    check_tokenizer,
    one_line,
)
from app.doctor.postgres import (
    check_index_build,
    check_migrations,
    check_reachable,
    check_versions,
    prepare_database_check,
    probe_engine,
)

if TYPE_CHECKING:
    from app.embedded import EmbeddedPostgres


class StartupError(Exception):
    """A check `pgrecall serve` needs failed; str() is the one line to print."""

    def __init__(self, check: Check) -> None:
        super().__init__(f"{check.name}: {check.message}")
        self.check = check


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
        checks.append(await check_row_security(settings, url))
        citus = await check_citus(settings, url)
        if citus is not None:  # a Citus coordinator: one more line
            checks.append(citus)
        return checks
    finally:
        await engine.dispose()


async def check_row_security(settings: Settings, url: str) -> Check:
    """Row-level security binds the role requests run as (app/roles.py, docs/security.md)."""
    from app.roles import service_role_status, with_user

    if settings.database_url:
        service, owner = settings.database_url, settings.migration_database_url or url
    else:  # embedded: `url` is the server's superuser, requests run as the service role
        service, owner = with_user(url, settings.app_role), url
    status = await service_role_status(
        owner,
        service,
        created_at_start=settings.embedded_database,
        migrate_on_start=settings.migrate_on_start,
    )
    if status is None:
        return _skipped(["row security"], "the migrations")[0]
    return Check("row security", *status)


async def check_citus(settings: Settings, url: str) -> Check | None:
    """On a Citus coordinator: tables distributed and co-located, and the service role writing
    and reading back its own row through the workers (app/citus/doctor.py). None on plain
    Postgres."""
    from app.citus import cluster_status

    if not settings.database_url:
        return None  # the embedded server is a single node
    service, owner = settings.database_url, settings.migration_database_url or url
    status = await cluster_status(
        owner, service, direct_reads=settings.citus_direct_reads_ttl_s > 0
    )
    return None if status is None else Check("citus", *status)


def report_ok(report: Callable[[Check], None], check: Check) -> bool:
    report(check)
    return check.ok


def _skipped(names: list[str], because: str) -> list[Check]:
    return [Check(name, False, f"not checked: needs {because}", skipped=True) for name in names]


DB_CHECKS = ["postgres", "versions", "index build", "migrations", "row security"]


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
    elif not report_ok(report, check_cpu()):
        for check in _skipped(DB_CHECKS, "a CPU the bundled pgvector runs on"):
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
    model = check_local_model_installed(settings)
    if not model.ok:
        raise StartupError(model)

    async def database() -> None:
        engine = probe_engine(url)
        try:
            for check in (await check_reachable(engine), await check_versions(engine)):
                if not check.ok:
                    raise StartupError(check)
        finally:
            await engine.dispose()

    asyncio.run(database())
    prepared = prepare_database_check(settings)
    if not prepared.ok:
        raise StartupError(prepared)

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
