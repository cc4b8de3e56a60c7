"""`pgrecall db`: database maintenance (upgrade, distribute, url)."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from app.cli.common import settings_or_exit
from app.embedded import EmbeddedPostgres
from app.roles import database_urls, prepare_database

db_app = typer.Typer(no_args_is_help=True, help="database maintenance")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations and grant the service role its privileges (as the owner)."""
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
    settings = settings_or_exit()
    typer.echo(settings.database_url or EmbeddedPostgres(settings.data_dir).start())
