"""The `pgrecall` command: serve, and the admin commands."""

from __future__ import annotations

import fcntl
import logging
import signal
import sys
from types import FrameType
from typing import Annotated

import typer

from app.config import Settings, SettingsError, load_settings
from app.observability import configure_logging

app = typer.Typer(no_args_is_help=True, add_completion=False, help="pgrecall: memory for agents")
db_app = typer.Typer(no_args_is_help=True, help="database maintenance")
app.add_typer(db_app, name="db")
log = logging.getLogger("app.cli")


def settings_or_exit(**overrides: object) -> Settings:
    """Settings from the environment; one clear line and exit 2 when invalid."""
    try:
        settings = load_settings(**overrides)
    except SettingsError as exc:
        typer.echo(f"pgrecall: {exc}", err=True)
        raise typer.Exit(2) from None
    configure_logging(settings.log_level, settings.log_format.value)
    return settings


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="overrides PGRECALL_PORT")] = None,
    host: Annotated[str | None, typer.Option(help="overrides PGRECALL_HOST")] = None,
) -> None:
    """Run the HTTP service (embedded Postgres unless PGRECALL_DATABASE_URL is set)."""
    import uvicorn

    from app.doctor import StartupError, explain_start_failure, preflight
    from app.doctor.checks import check_writable
    from app.embedded import EmbeddedPostgres
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


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations and grant the service role its privileges (as the owner)."""
    import asyncio

    from app.embedded import EmbeddedPostgres
    from app.roles import database_urls, prepare_database

    settings = settings_or_exit()
    embedded = None if settings.database_url else EmbeddedPostgres(settings.data_dir)
    try:
        asyncio.run(prepare_database(database_urls(settings, embedded)))
    finally:
        if embedded is not None and embedded.started_here:  # leave a server `serve` runs alone
            embedded.stop()
    typer.echo("database at head")


@db_app.command("distribute")
def db_distribute(
    shards: Annotated[int, typer.Option(min=1, help="shards per table (Citus)")] = 32,
) -> None:
    """On a Citus coordinator: distribute the user tables by user_id, co-located (as the owner,
    after `pgrecall db upgrade`; docs/scaling.md). Safe to repeat."""
    import asyncio

    from app.citus import CitusError, distribute

    settings = settings_or_exit()
    if not settings.database_url:
        typer.echo("pgrecall: db distribute needs PGRECALL_DATABASE_URL (a Citus coordinator)")
        raise typer.Exit(2)
    owner = settings.migration_database_url or settings.database_url
    try:
        done = asyncio.run(distribute(owner, shard_count=shards))
    except CitusError as exc:
        typer.echo(f"pgrecall: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"distributed: {', '.join(done)}" if done else "already distributed")


@db_app.command("url")
def db_url() -> None:
    """Print the database URL (starting the embedded server if needed; it keeps running)."""
    from app.embedded import EmbeddedPostgres

    settings = settings_or_exit()
    typer.echo(settings.database_url or EmbeddedPostgres(settings.data_dir).start())


# Admin commands (app/cli_admin.py); imported last because they use settings_or_exit above.
from app.cli_admin import (  # noqa: E402
    memories_app,
    purge_user,
    rebuild_keywords,
    rebuild_passages,
    reembed,
    reindex,
    seed,
)
from app.cli_keys import keys_app  # noqa: E402
from app.cli_mcp import mcp_stdio  # noqa: E402
from app.cli_portable import export, import_  # noqa: E402
from app.cli_worker import worker  # noqa: E402
from app.doctor import doctor  # noqa: E402

app.command()(seed)
app.command()(reindex)
app.command()(reembed)
app.command("rebuild-keywords")(rebuild_keywords)
app.command("rebuild-passages")(rebuild_passages)
app.command("purge-user")(purge_user)
app.add_typer(memories_app, name="memories")
app.command()(doctor)
app.add_typer(keys_app, name="keys")
app.command("mcp")(mcp_stdio)
app.command()(export)
app.command("import")(import_)
app.command("worker")(worker)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
