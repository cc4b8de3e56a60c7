"""Run Alembic programmatically (upgrade to head, current revision) against a given URL."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
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


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The newest migration in this checkout (read once: scripts do not change at run time)."""
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def current_revision(engine: AsyncEngine) -> str | None:
    """The revision the database is at (None if never migrated); one round trip, no log noise."""
    async with engine.connect() as conn:
        if await conn.scalar(text("SELECT to_regclass('alembic_version') IS NULL")):
            return None
        return await conn.scalar(text("SELECT version_num FROM alembic_version LIMIT 1"))
