"""`pgrecall db`: database maintenance (upgrade, url)."""

from __future__ import annotations

import asyncio

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


@db_app.command("url")
def db_url() -> None:
    """Print the database URL (starting the embedded server if needed; it keeps running)."""
    settings = settings_or_exit()
    typer.echo(settings.database_url or EmbeddedPostgres(settings.data_dir).start())
