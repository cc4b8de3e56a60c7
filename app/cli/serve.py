"""`pgrecall serve`: the HTTP service (embedded Postgres unless PGRECALL_DATABASE_URL is set)."""

from __future__ import annotations

import fcntl
import logging
import signal
from types import FrameType
from typing import Annotated

import typer
import uvicorn

from app.cli.common import settings_or_exit
from app.doctor import StartupError, explain_start_failure, preflight
from app.doctor.checks import check_writable
from app.embedded import EmbeddedPostgres

log = logging.getLogger("app.cli")


def serve(
    port: Annotated[int | None, typer.Option(help="overrides PGRECALL_PORT")] = None,
    host: Annotated[str | None, typer.Option(help="overrides PGRECALL_HOST")] = None,
) -> None:
    """Run the HTTP service (embedded Postgres unless PGRECALL_DATABASE_URL is set)."""
    # Lazy: the HTTP app (FastAPI and every route) takes about 3 s to import; the other
    # commands, and `pgrecall --help`, should not wait for it.
    from app.main import create_app

    overrides: dict[str, object] = {}
    if port is not None:
        overrides["port"] = port
    if host is not None:
        overrides["host"] = host
    settings = settings_or_exit(**overrides)
    embedded: EmbeddedPostgres | None = None
    lock = None
    if settings.embedded_database:
        writable = check_writable(settings.data_dir)
        if not writable.ok:
            typer.echo(f"pgrecall: {writable.name}: {writable.message}", err=True)
            raise typer.Exit(1)
        lock = open(settings.data_dir / "serve.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            typer.echo(f"pgrecall: another `pgrecall serve` uses {settings.data_dir}", err=True)
            raise typer.Exit(1) from None
    # uvicorn shuts down gracefully on SIGINT/SIGTERM and then re-raises the signal with the
    # handler that was installed before it: with Python's defaults SIGTERM would kill the
    # process before the `finally` below stops Postgres, and SIGINT would end as "Aborted!".
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_cleanly)
    try:
        if lock is not None:
            # Started here so that it is stopped here; the app's start-up attaches to it, runs
            # the migrations as its superuser and serves as the service role (app/roles.py).
            embedded = EmbeddedPostgres(settings.data_dir)
            try:
                owner_url = embedded.start()
            except Exception as exc:  # one line naming the cause, not a traceback
                raise explain_start_failure(settings, exc) from exc
            log.info("embedded postgres ready in %s", embedded.pgdata)
        else:
            owner_url = settings.migration_database_url or settings.database_url
        assert owner_url is not None
        # As the owner (it migrates). The app keeps database_url unset for the embedded server:
        # its start-up attaches, creates the service role and serves requests as that role.
        preflight(settings, owner_url, embedded=embedded is not None)
        # The preflight has applied the migrations (with a one-line cause on failure); the
        # app's start-up still creates the service role, but need not migrate a second time.
        uvicorn.run(
            create_app(settings.model_copy(update={"migrate_on_start": False})),
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            timeout_graceful_shutdown=10,
        )
    except StartupError as exc:
        typer.echo(f"pgrecall: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        # A second signal must not interrupt the database's clean stop.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if embedded is not None:
            embedded.stop()
        if lock is not None:
            lock.close()


def _exit_cleanly(signum: int, _frame: FrameType | None) -> None:
    """A stop request (before uvicorn runs, or re-raised by it after its shutdown): exit 0."""
    raise SystemExit(0)
