"""Run Alembic programmatically (upgrade to head, current revision) against a given URL."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import AsyncEngine


def _project_root() -> Path:
    """The checkout (editable install) or the working directory (image: /srv/pgrecall)."""
    for candidate in (Path(__file__).resolve().parent.parent, Path.cwd()):
        if (candidate / "alembic.ini").is_file() and (candidate / "migrations").is_dir():
            return candidate
    raise FileNotFoundError("alembic.ini and migrations/ not found next to app/ or in the cwd")


ROOT = _project_root()


def alembic_config(database_url: str | None = None) -> Config:
    """Config pointing at this checkout's migrations; logging left to the caller."""
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["skip_logging_config"] = True
    if database_url:
        cfg.attributes["database_url"] = database_url
    return cfg


def upgrade_head(database_url: str) -> None:
    """Apply every pending migration (synchronous: call it before the event loop serves)."""
    command.upgrade(alembic_config(database_url), "head")


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (None if never migrated)."""
    async with engine.connect() as conn:
        return await conn.run_sync(
            lambda sync_conn: MigrationContext.configure(sync_conn).get_current_revision()
        )
