"""Admin commands of `pgrecall`: seed, memories, purge-user, reindex, reembed.

Each command reads settings, finds the database like `pgrecall serve` does (the configured URL or
the embedded server), migrates it, and calls a service function; the logic lives in app/services
so tests drive it with their own sessions.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache, CacheUnavailableError
from app.config import Settings
from app.errors import ServiceError
from app.models.base import MEMORY_TYPES
from app.services.embedding import EmbeddingService

if TYPE_CHECKING:
    from app.models import MemoryItem
    from app.roles import DatabaseUrls
    from app.services.admin import AdminMemoryService
    from app.services.seed import SeedReport

T = TypeVar("T")
memories_app = typer.Typer(no_args_is_help=True, help="inspect and manage one user's memories")
# Admin work runs long statements (bulk inserts, index builds); the service's 5 s limit is for
# requests, not for this.
_STATEMENT_TIMEOUT_MS = 3_600_000
_SHOWN_PROBLEMS = 50


@dataclass
class Runtime:
    settings: Settings
    sessionmaker: async_sessionmaker[AsyncSession]
    cache: Cache
    embeddings: EmbeddingService | None


def _settings() -> Settings:
    from app.cli import settings_or_exit  # app.cli imports this module at its end

    return settings_or_exit()


def _run(work: Callable[[Runtime], Awaitable[T]], *, embedder: bool = False) -> T:
    """Start (or attach to) the database, migrate, and run `work` with fresh resources.

    Admin work connects as the owner (PGRECALL_MIGRATION_DATABASE_URL, the embedded server's
    superuser, or else PGRECALL_DATABASE_URL): index rebuilds need the tables' owner. Row-level
    security still applies to an owner that is not a superuser (FORCE), so every command scopes
    its sessions to one user or to the audited admin mode.
    """
    from app.embedded import EmbeddedPostgres
    from app.roles import database_urls

    settings = _settings()
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
        return asyncio.run(_prepared(settings, urls, work, embedder))
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
) -> T:
    from app.roles import prepare_database

    await prepare_database(urls)
    return await _with_runtime(settings, urls.owner, work, embedder)


async def _with_runtime(
    settings: Settings, url: str, work: Callable[[Runtime], Awaitable[T]], embedder: bool
) -> T:
    async with _runtime(settings, url, embedder) as runtime:
        return await work(runtime)


@asynccontextmanager
async def _runtime(settings: Settings, url: str, embedder: bool) -> AsyncIterator[Runtime]:
    from app.db import create_engine, create_sessionmaker
    from app.runtime import embedder_from_settings

    engine = create_engine(url, pool_size=2, statement_timeout_ms=_STATEMENT_TIMEOUT_MS)
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


# Options several commands share.
UsersOption = Annotated[
    list[str] | None,
    typer.Option("--user", help="only this user (repeatable); default: every user"),
]
QuietOption = Annotated[bool, typer.Option("--quiet", help="no progress bar")]


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"pgrecall: {message}", err=True)
    return typer.Exit(code)


def _show_progress(quiet: bool) -> bool:
    return not quiet and sys.stderr.isatty()


# -- seed ------------------------------------------------------------------------------------


def seed(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="JSON, JSONL or CSV")],
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="load the valid rows, skip bad ones")
    ] = False,
    update_near_duplicates: Annotated[
        bool,
        typer.Option(
            "--update-near-duplicates",
            help="a row with cosine >= 0.90 to a stored memory updates it instead of adding",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="report what would happen; write nothing")
    ] = False,
    quiet: QuietOption = False,
    batch_size: Annotated[int, typer.Option(min=1, max=4096)] = 256,
) -> None:
    """Load curated memories from a file (validated first; safe to re-run)."""
    from app.services.seed import SeedOptions, seed_file
    from app.services.seed_file import SeedFileError

    options = SeedOptions(
        skip_invalid=skip_invalid,
        update_near_duplicates=update_near_duplicates,
        dry_run=dry_run,
        batch_size=batch_size,
        progress=_show_progress(quiet),
    )

    async def work(rt: Runtime) -> SeedReport:
        assert rt.embeddings is not None
        embeddings, cache = rt.embeddings, rt.cache
        return await seed_file(file, rt.sessionmaker, embeddings, options=options, cache=cache)

    try:
        report = _run(work, embedder=True)
    except SeedFileError as exc:
        raise _fail(f"{file}: {exc}; nothing written") from None
    except ServiceError as exc:
        raise _fail(f"{exc.message}; finished batches are kept, run seed again to resume") from None
    for error in report.errors[:_SHOWN_PROBLEMS]:
        typer.echo(str(error), err=True)
    if len(report.errors) > _SHOWN_PROBLEMS:
        typer.echo(f"... and {len(report.errors) - _SHOWN_PROBLEMS} more problems", err=True)
    if report.errors and not skip_invalid:
        raise _fail(
            f"{report.invalid} invalid rows of {report.rows}; nothing written "
            "(fix them, or pass --skip-invalid)"
        )
    for near in report.near_duplicates[:_SHOWN_PROBLEMS]:
        typer.echo(str(near))
    if len(report.near_duplicates) > _SHOWN_PROBLEMS:
        typer.echo(f"... and {len(report.near_duplicates) - _SHOWN_PROBLEMS} more near-duplicates")
    typer.echo(report.summary())
    if report.reindex is not None and report.reindex.rebuilt:
        r = report.reindex
        typer.echo(f"rebuilt {r.table} vector index: lists {r.lists} for {r.rows} rows")
    elif report.dry_run and report.reindex_due:
        typer.echo("the memory_items vector index would be rebuilt (its centroids are stale)")


# -- reindex / reembed -----------------------------------------------------------------------


def reindex(
    if_stale: Annotated[
        bool,
        typer.Option(
            "--if-stale",
            help="only missing indexes, indexes of another method than PGRECALL_VECTOR_INDEX, "
            "and ivfflat indexes whose table more than doubled since built",
        ),
    ] = False,
) -> None:
    """Rebuild the vector indexes as PGRECALL_VECTOR_INDEX says (ivfflat with lists sized to the
    data, or HNSW), and the per-user indexes of the users above PGRECALL_EXACT_SEARCH_MAX_ITEMS
    (PGRECALL_USER_VECTOR_INDEXES); locks each table while it builds."""
    from app.db import admin_sessions
    from app.services.reindex import TABLES, ReindexResult, UserIndexResult, reindex_users
    from app.services.reindex import reindex as rebuild

    async def work(rt: Runtime) -> tuple[list[ReindexResult], list[UserIndexResult]]:
        results, per_user = [], []
        sessions = admin_sessions(rt.sessionmaker, "reindex")  # counts every user's rows
        for table in TABLES:
            async with sessions() as session, session.begin():
                results.append(
                    await rebuild(
                        session,
                        table,
                        only_if_stale=if_stale,
                        method=rt.settings.vector_index,
                    )
                )
            async with sessions() as session, session.begin():
                per_user.append(
                    await reindex_users(
                        session,
                        table,
                        # Off: every per-user index is dropped (no user is "more than" that).
                        more_than=rt.settings.exact_search_max_items
                        if rt.settings.user_vector_indexes
                        else 2**62,
                        only_if_stale=if_stale,
                    )
                )
        return results, per_user

    tables, users = _run(work)
    for r in tables:
        built = "unknown" if r.previous_rows is None else r.previous_rows
        before = (
            f"lists {r.previous_lists}, built on {built} rows"
            if r.previous_method == "ivfflat"
            else f"{r.previous_method or 'no'} index, built on {built} rows"
        )
        if r.rebuilt:
            how = f"lists {r.lists}" if r.method == "ivfflat" else "HNSW"
            typer.echo(f"{r.table}: rebuilt with {how} for {r.rows} rows (was {before})")
        else:
            typer.echo(f"{r.table}: fresh ({before}; now {r.rows} rows)")
    for u in users:
        typer.echo(
            f"{u.table}: {u.users} per-user indexes ({u.built} built, {u.fresh} fresh, "
            f"{u.dropped} dropped)"
        )


def reembed(
    batch_size: Annotated[int, typer.Option(min=1, max=4096)] = 256,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only count the rows to move")] = False,
    quiet: QuietOption = False,
) -> None:
    """Move every stored vector to the configured embedding model (resumable)."""
    from app.services.reembed import ReembedError, ReembedReport
    from app.services.reembed import reembed as run_reembed

    async def work(rt: Runtime) -> ReembedReport:
        assert rt.embeddings is not None
        return await run_reembed(
            rt.sessionmaker,
            rt.embeddings,
            batch_size=batch_size,
            dry_run=dry_run,
            progress=_show_progress(quiet),
        )

    try:
        report = _run(work, embedder=True)
    except ReembedError as exc:
        raise _fail(str(exc)) from None
    except ServiceError as exc:
        raise _fail(f"{exc.message}; committed batches stay done, run reembed again") from None
    typer.echo(report.summary())
    for r in report.reindexed:
        typer.echo(f"rebuilt {r.table} vector index: lists {r.lists} for {r.rows} rows")
    for u in report.user_indexes:
        if u.built:
            typer.echo(f"rebuilt {u.built} per-user {u.table} vector indexes")


def rebuild_keywords(
    users: UsersOption = None,
    quiet: QuietOption = False,
) -> None:
    """Rebuild keyword postings from stored memories and messages (after an upgrade that
    changes how documents are made; one transaction per user)."""
    from app.services.keywords import KeywordReport
    from app.services.keywords import rebuild_keywords as run_rebuild

    for user_id in users or []:
        _user(user_id)

    async def work(rt: Runtime) -> KeywordReport:
        return await run_rebuild(
            rt.sessionmaker, users or None, cache=rt.cache, progress=_show_progress(quiet)
        )

    try:
        report = _run(work)
    except ServiceError as exc:
        raise _fail(f"{exc.message}; users done so far stay rebuilt, run it again") from None
    typer.echo(
        f"rebuilt keyword postings of {report.users} users ({report.documents} documents) "
        f"in {report.elapsed_s:.1f} s"
    )


def rebuild_passages(
    users: UsersOption = None,
    quiet: QuietOption = False,
) -> None:
    """Give every message its sentence passages for the configured model (messages stored
    before migration 0009_passages, or after a re-embed); resumable, a page per transaction."""
    from app.services.keywords import all_users
    from app.services.passages import PassageReport
    from app.services.passages import rebuild_passages as run_rebuild

    for user_id in users or []:
        _user(user_id)

    async def work(rt: Runtime) -> PassageReport:
        assert rt.embeddings is not None
        chosen = users or await all_users(rt.sessionmaker)
        return await run_rebuild(
            rt.sessionmaker,
            rt.embeddings,
            chosen,
            cache=rt.cache,
            progress=_show_progress(quiet),
        )

    try:
        report = _run(work, embedder=True)
    except ServiceError as exc:
        raise _fail(f"{exc.message}; pages done so far stay done, run it again") from None
    typer.echo(
        f"passages of {report.users} users: {report.messages} messages read, "
        f"{report.passages} passages written, {report.dropped} of another model dropped, "
        f"in {report.elapsed_s:.1f} s"
    )


# -- purge -----------------------------------------------------------------------------------


def purge_user(
    user_id: Annotated[str, typer.Argument(help="the user whose data is deleted")],
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
) -> None:
    """Delete everything of one user: conversations, messages, memories, index rows, Redis keys."""
    from app.services.purge import PurgeIncompleteError, PurgeReport, count_user_rows
    from app.services.purge import purge_user as run_purge

    _user(user_id)

    async def work(rt: Runtime) -> PurgeReport | None:
        counts = await count_user_rows(rt.sessionmaker, user_id)
        listed = ", ".join(f"{table} {n}" for table, n in counts.items())
        if not yes:
            question = f"Delete user {user_id}: {listed}, and their Redis keys?"
            if not await asyncio.to_thread(typer.confirm, question):
                return None
        return await run_purge(rt.sessionmaker, rt.cache, user_id)

    try:
        report = _run(work)
    except CacheUnavailableError as exc:
        raise _fail(f"{exc}; nothing was deleted, retry when Redis is back") from None
    except PurgeIncompleteError as exc:
        raise _fail(str(exc)) from None
    if report is None:
        raise _fail("aborted; nothing deleted")
    typer.echo(report.summary())


# -- memories --------------------------------------------------------------------------------

UserOption = Annotated[str, typer.Option("--user", help="the user the memories belong to")]


def _line(item: MemoryItem) -> str:
    state = " [deleted]" if item.deleted_at else ""
    state += " [superseded]" if item.valid_to else ""
    text = item.content if len(item.content) <= 80 else item.content[:77] + "..."
    when = f"{item.created_at:%Y-%m-%d}"
    return f"{item.id}  {item.type:<10} {item.importance:.2f}  {when}{state}  {text}"


def _dump(item: MemoryItem) -> str:
    from app.schemas.admin import AdminMemoryOut

    return AdminMemoryOut.model_validate(item).model_dump_json()


def _admin_call(
    user: str, call: Callable[[AdminMemoryService], Awaitable[T]], *, invalidate: bool = False
) -> T:
    """Run one AdminMemoryService call on the user's rows in a transaction; 404s become a
    message and exit 1."""
    from app.db import user_session
    from app.services.admin import AdminMemoryService

    async def work(rt: Runtime) -> T:
        async with user_session(rt.sessionmaker, user) as session, session.begin():
            # Listing and state changes never embed; content edits go through the HTTP API.
            result = await call(AdminMemoryService(session, None))
        if invalidate:
            await rt.cache.invalidate_user(user)
        return result

    try:
        return _run(work)
    except ServiceError as exc:
        raise _fail(exc.message) from None


@memories_app.command("list")
def memories_list(
    user: UserOption,
    type_: Annotated[str | None, typer.Option("--type", help=", ".join(MEMORY_TYPES))] = None,
    q: Annotated[str | None, typer.Option("--q", help="full-text search")] = None,
    created_after: Annotated[datetime | None, typer.Option()] = None,
    created_before: Annotated[datetime | None, typer.Option()] = None,
    include_deleted: Annotated[bool, typer.Option("--include-deleted")] = False,
    include_superseded: Annotated[
        bool, typer.Option("--include-superseded", help="also earlier, superseded versions")
    ] = False,
    limit: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """List a user's memories, newest first."""
    from app.repositories.admin import MemoryFilter

    if type_ is not None and type_ not in MEMORY_TYPES:
        raise _fail(f"--type must be one of {', '.join(MEMORY_TYPES)}", 2)
    filters = MemoryFilter(
        user_id=_user(user),
        type=type_,
        q=q,
        created_after=_aware(created_after),
        created_before=_aware(created_before),
        include_deleted=include_deleted,
        include_superseded=include_superseded,
    )
    items, total = _admin_call(
        filters.user_id, lambda s: s.list(filters, limit=limit, offset=offset)
    )
    for item in items:
        typer.echo(_dump(item) if as_json else _line(item))
    if not as_json:
        typer.echo(f"{len(items)} of {total} (offset {offset})", err=True)


@memories_app.command("show")
def memories_show(user: UserOption, item_id: Annotated[uuid.UUID, typer.Argument()]) -> None:
    """Print one memory as JSON."""
    user = _user(user)
    item = _admin_call(user, lambda s: s.get(user, item_id))
    typer.echo(json.dumps(json.loads(_dump(item)), indent=2))


@memories_app.command("delete")
def memories_delete(user: UserOption, item_id: Annotated[uuid.UUID, typer.Argument()]) -> None:
    """Soft-delete one memory (restore undoes it)."""
    user = _user(user)
    _admin_call(user, lambda s: s.set_deleted(user, item_id, True), invalidate=True)
    typer.echo(f"deleted {item_id}")


@memories_app.command("restore")
def memories_restore(user: UserOption, item_id: Annotated[uuid.UUID, typer.Argument()]) -> None:
    """Restore a soft-deleted memory."""
    user = _user(user)
    _admin_call(user, lambda s: s.set_deleted(user, item_id, False), invalidate=True)
    typer.echo(f"restored {item_id}")


def _user(value: str) -> str:
    from app.schemas.common import check_user_id

    try:
        return check_user_id(value)
    except ValueError as exc:
        raise _fail(f"user id: {exc}", 2) from None


def _aware(value: datetime | None) -> datetime | None:
    """Command-line times without an offset are UTC."""
    from datetime import UTC

    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value
