"""What every `pgrecall` command shares: settings, the runner that finds and migrates the
database, user-id checks, error lines and the options several commands take.

The runner starts the database like `pgrecall serve` does (the configured URL or the embedded
server), migrates it, and calls the command's `work` with fresh resources; the logic itself lives
in app/services so tests drive it with their own sessions.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from app.config import Settings, SettingsError, load_settings
from app.observability import configure_logging
from app.schemas.user_id import check_user_id

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from app.adapters.cache import Cache
    from app.roles import DatabaseUrls
    from app.services.embedding import EmbeddingService

T = TypeVar("T")
# Admin work runs long statements (bulk inserts, index builds); the service's 5 s limit is for
# requests, not for this.
_STATEMENT_TIMEOUT_MS = 3_600_000

# Options several commands share.
UsersOption = Annotated[
    list[str] | None,
    typer.Option("--user", help="only this user (repeatable); default: every user"),
]
QuietOption = Annotated[bool, typer.Option("--quiet", help="no progress bar")]


def settings_or_exit(*, quiet: bool = False, **overrides: object) -> Settings:
    """Settings from the environment; one clear line and exit 2 when invalid.

    `quiet` keeps logging at WARNING or above (commands whose output is only their result).
    """
    try:
        settings = load_settings(**overrides)
    except SettingsError as exc:
        typer.echo(f"pgrecall: {exc}", err=True)
        raise typer.Exit(2) from None
    level = settings.log_level
    if quiet and logging.getLevelName(level) < logging.WARNING:
        level = "WARNING"
    configure_logging(level, settings.log_format.value)
    return settings


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `pgrecall: message` on stderr; the caller raises the returned Exit."""
    typer.echo(f"pgrecall: {message}", err=True)
    return typer.Exit(code)


def show_progress(quiet: bool) -> bool:
    """A progress bar only for a person watching: not with --quiet, not when stderr is piped."""
    return not quiet and sys.stderr.isatty()


class _AboveBars(logging.Handler):
    """Writes what `inner` would, through tqdm.write: the line goes above the active bars,
    which are redrawn below it, instead of splitting a bar in two."""

    def __init__(self, inner: logging.StreamHandler) -> None:  # type: ignore[type-arg]
        super().__init__(inner.level)
        self.inner = inner
        self.filters = list(inner.filters)  # the context filter the formatter needs
        self.setFormatter(inner.formatter)

    def emit(self, record: logging.LogRecord) -> None:
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.inner.stream)
        except Exception:
            self.handleError(record)


@contextmanager
def logs_above_bars() -> Iterator[None]:
    """While a command runs, route the stderr log handlers through tqdm.write (they print as
    before when no bar is active); restored afterwards."""
    root = logging.getLogger()
    before = list(root.handlers)
    root.handlers = [
        _AboveBars(h)
        if isinstance(h, logging.StreamHandler) and getattr(h, "_pgrecall", False)
        else h
        for h in before
    ]
    try:
        yield
    finally:
        root.handlers = before


def checked_user(value: str, what: str = "user id") -> str:
    """A valid user id (or an id of the same rule: `what` names it), or exit 2 naming the
    problem."""
    try:
        return check_user_id(value)
    except ValueError as exc:
        raise fail(f"{what}: {exc}", 2) from None


def aware(value: datetime | None) -> datetime | None:
    """Command-line times without an offset are UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


# -- the runner ------------------------------------------------------------------------------


@dataclass
class Runtime:
    settings: Settings
    sessionmaker: async_sessionmaker[AsyncSession]
    cache: Cache
    embeddings: EmbeddingService | None


def run(
    work: Callable[[Runtime], Awaitable[T]],
    *,
    embedder: bool = False,
    quiet: bool = False,
    as_service: bool = False,
) -> T:
    """Start (or attach to) the database, migrate, and run `work` with fresh resources.

    Admin work connects as the owner (PGRECALL_MIGRATION_DATABASE_URL, the embedded server's
    superuser, or else PGRECALL_DATABASE_URL): index rebuilds need the tables' owner. Row-level
    security still applies to an owner that is not a superuser (FORCE); migration 0018 makes the
    owner a member of the admin role, so its audited admin sessions see every user's rows, and
    its user sessions are signed with the scope key like the service's. `quiet` logs warnings
    only.

    `as_service`: a door that serves a user's requests (`pgrecall mcp`) connects as the service
    role instead, as `pgrecall serve`'s requests do: an agent's or run's scope is row-level
    security's alone (migration 0019), which the embedded superuser would bypass.
    """
    # Imported here, not at the top: this module is loaded by every command, and `pgrecall keys`
    # must start without the database stack when a running service answers it.
    from app.embedded import EmbeddedPostgres
    from app.roles import database_urls

    settings = settings_or_exit(quiet=quiet)
    embedded = None
    lock = None
    try:
        if settings.database_url is None:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            # Hold `pgrecall serve`'s lock while we may own the server, so a serve starting
            # meanwhile cannot attach to a server this command is about to stop.
            lock = open(settings.data_dir / "serve.lock", "w")  # noqa: SIM115
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # serve is running: attach to its server
                lock.close()
                lock = None
            embedded = EmbeddedPostgres(settings.data_dir)
        urls = database_urls(settings, embedded)
        with logs_above_bars():
            return asyncio.run(_prepared(settings, urls, work, embedder, as_service))
    finally:
        if embedded is not None and embedded.started_here:
            embedded.stop()  # a server `pgrecall serve` started is left alone
        if lock is not None:
            lock.close()


async def _prepared(
    settings: Settings,
    urls: DatabaseUrls,
    work: Callable[[Runtime], Awaitable[T]],
    embedder: bool,
    as_service: bool = False,
) -> T:
    from app.roles import prepare_database

    await prepare_database(urls)
    url = urls.service if as_service else urls.owner
    async with _runtime(settings, url, embedder, key_url=urls.owner) as runtime:
        return await work(runtime)


@asynccontextmanager
async def _runtime(
    settings: Settings, url: str, embedder: bool, *, key_url: str
) -> AsyncIterator[Runtime]:
    from app.adapters.cache import Cache
    from app.db import create_engine, create_sessionmaker
    from app.roles import read_scope_key
    from app.runtime import embedder_from_settings
    from app.services.embedding import EmbeddingService

    key = await read_scope_key(key_url)  # as the owner: the service role may not read it
    engine = create_engine(
        url, pool_size=2, statement_timeout_ms=_STATEMENT_TIMEOUT_MS, scope_key=key
    )
    cache = Cache.from_url(settings.redis_url)
    model = await asyncio.to_thread(embedder_from_settings, settings) if embedder else None
    vectors_cache = cache if cache.enabled else None
    embeddings = None if model is None else EmbeddingService(model, vectors_cache)
    try:
        yield Runtime(settings, create_sessionmaker(engine), cache, embeddings)
    finally:
        await cache.aclose()
        close = getattr(model, "aclose", None)
        if close is not None:
            await close()
        await engine.dispose()
