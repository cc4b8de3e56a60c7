"""Maintenance commands of `pgrecall`: seed, reindex, reembed, rebuild-keywords,
rebuild-passages, purge-user (registered in app/cli/__init__.py).

Each command runs its service function through the shared runner (app/cli/common.py), which
finds the database like `pgrecall serve` does and migrates it first.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated

import typer

from app.adapters.cache import CacheUnavailableError
from app.cli.common import (
    QuietOption,
    Runtime,
    UsersOption,
    checked_user,
    fail,
    run,
    show_progress,
)
from app.errors import ServiceError
from app.runtime import admin_transaction
from app.services.keywords import KeywordReport, all_users
from app.services.keywords import rebuild_keywords as run_rebuild_keywords
from app.services.passages import PassageReport
from app.services.passages import rebuild_passages as run_rebuild_passages
from app.services.purge import PurgeIncompleteError, PurgeReport, count_user_rows
from app.services.purge import purge_user as run_purge
from app.services.reembed import ReembedError, ReembedReport
from app.services.reembed import reembed as run_reembed
from app.services.reindex import (
    TABLES,
    OwnIndexBands,
    ReindexResult,
    UserIndexResult,
    reindex_users,
)
from app.services.reindex import reindex as rebuild_index
from app.services.seed import SeedOptions, SeedReport, seed_file
from app.services.seed_file import SeedFileError

_SHOWN_PROBLEMS = 50


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
    options = SeedOptions(
        skip_invalid=skip_invalid,
        update_near_duplicates=update_near_duplicates,
        dry_run=dry_run,
        batch_size=batch_size,
        progress=show_progress(quiet),
    )

    async def work(rt: Runtime) -> SeedReport:
        assert rt.embeddings is not None
        embeddings, cache = rt.embeddings, rt.cache
        return await seed_file(file, rt.sessionmaker, embeddings, options=options, cache=cache)

    try:
        report = run(work, embedder=True)
    except SeedFileError as exc:
        raise fail(f"{file}: {exc}; nothing written") from None
    except ServiceError as exc:
        raise fail(f"{exc.message}; finished batches are kept, run seed again to resume") from None
    for error in report.errors[:_SHOWN_PROBLEMS]:
        typer.echo(str(error), err=True)
    if len(report.errors) > _SHOWN_PROBLEMS:
        typer.echo(f"... and {len(report.errors) - _SHOWN_PROBLEMS} more problems", err=True)
    if report.errors and not skip_invalid:
        raise fail(
            f"{report.invalid} invalid rows of {report.rows}; nothing written "
            "(fix them, or pass --skip-invalid)"
        )
    for near in report.near_duplicates[:_SHOWN_PROBLEMS]:
        typer.echo(str(near))
    if len(report.near_duplicates) > _SHOWN_PROBLEMS:
        typer.echo(f"... and {len(report.near_duplicates) - _SHOWN_PROBLEMS} more near-duplicates")
    if report.reindex is not None and report.reindex.rebuilt:
        r = report.reindex
        typer.echo(f"rebuilt {r.table} vector index: lists {r.lists} for {r.rows} rows")
    elif report.dry_run and report.reindex_due:
        typer.echo("the memory_items vector index would be rebuilt (its centroids are stale)")
    typer.echo(report.summary())  # last: the one line a script reads (counts and seconds)


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
    data, or HNSW), and the per-user indexes (PGRECALL_USER_VECTOR_INDEXES): ivfflat for the
    users above PGRECALL_EXACT_SEARCH_MAX_ITEMS, HNSW for those under it with more than
    PGRECALL_USER_HNSW_MIN_ITEMS vectors; locks each table while it builds."""

    async def work(rt: Runtime) -> tuple[list[ReindexResult], list[UserIndexResult]]:
        results, per_user = [], []
        for table in TABLES:  # admin mode: the index builds count every user's rows
            async with admin_transaction(rt.sessionmaker, "reindex") as session:
                results.append(
                    await rebuild_index(
                        session,
                        table,
                        only_if_stale=if_stale,
                        method=rt.settings.vector_index,
                    )
                )
            async with admin_transaction(rt.sessionmaker, "reindex") as session:
                per_user.append(
                    await reindex_users(
                        session,
                        table,
                        **OwnIndexBands.of(
                            enabled=rt.settings.user_vector_indexes,
                            exact_max_items=rt.settings.exact_search_max_items,
                            hnsw_min_items=rt.settings.user_hnsw_min_items,
                        )._asdict(),
                        only_if_stale=if_stale,
                    )
                )
        return results, per_user

    started = time.monotonic()
    tables, users = run(work)
    elapsed = time.monotonic() - started
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
    typer.echo(
        f"reindex: {sum(r.rebuilt for r in tables)} of {len(tables)} vector indexes rebuilt, "
        f"{sum(u.built for u in users)} per-user indexes built, "
        f"{sum(u.dropped for u in users)} dropped; {elapsed:.1f} s"
    )


def reembed(
    batch_size: Annotated[int, typer.Option(min=1, max=4096)] = 256,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only count the rows to move")] = False,
    quiet: QuietOption = False,
) -> None:
    """Move every stored vector to the configured embedding model (resumable)."""

    async def work(rt: Runtime) -> ReembedReport:
        assert rt.embeddings is not None
        return await run_reembed(
            rt.sessionmaker,
            rt.embeddings,
            batch_size=batch_size,
            dry_run=dry_run,
            progress=show_progress(quiet),
        )

    try:
        report = run(work, embedder=True)
    except ReembedError as exc:
        raise fail(str(exc)) from None
    except ServiceError as exc:
        raise fail(f"{exc.message}; committed batches stay done, run reembed again") from None
    for r in report.reindexed:
        typer.echo(f"rebuilt {r.table} vector index: lists {r.lists} for {r.rows} rows")
    for u in report.user_indexes:
        if u.built:
            typer.echo(f"rebuilt {u.built} per-user {u.table} vector indexes")
    typer.echo(report.summary())  # last: the one line a script reads (counts and seconds)


def rebuild_keywords(
    users: UsersOption = None,
    quiet: QuietOption = False,
) -> None:
    """Rebuild keyword postings from stored memories and messages (after an upgrade that
    changes how documents are made; one transaction per user)."""
    for user_id in users or []:
        checked_user(user_id)

    async def work(rt: Runtime) -> KeywordReport:
        return await run_rebuild_keywords(
            rt.sessionmaker, users or None, cache=rt.cache, progress=show_progress(quiet)
        )

    try:
        report = run(work)
    except ServiceError as exc:
        raise fail(f"{exc.message}; users done so far stay rebuilt, run it again") from None
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
    for user_id in users or []:
        checked_user(user_id)

    async def work(rt: Runtime) -> PassageReport:
        assert rt.embeddings is not None
        chosen = users or await all_users(rt.sessionmaker)
        return await run_rebuild_passages(
            rt.sessionmaker,
            rt.embeddings,
            chosen,
            cache=rt.cache,
            progress=show_progress(quiet),
        )

    try:
        report = run(work, embedder=True)
    except ServiceError as exc:
        raise fail(f"{exc.message}; pages done so far stay done, run it again") from None
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
    checked_user(user_id)

    async def work(rt: Runtime) -> PurgeReport | None:
        counts = await count_user_rows(rt.sessionmaker, user_id)
        listed = ", ".join(f"{table} {n}" for table, n in counts.items())
        if not yes:
            question = f"Delete user {user_id}: {listed}, and their Redis keys?"
            if not await asyncio.to_thread(typer.confirm, question):
                return None
        return await run_purge(rt.sessionmaker, rt.cache, user_id)

    try:
        report = run(work)
    except CacheUnavailableError as exc:
        raise fail(f"{exc}; nothing was deleted, retry when Redis is back") from None
    except PurgeIncompleteError as exc:
        raise fail(str(exc)) from None
    if report is None:
        raise fail("aborted; nothing deleted")
    typer.echo(report.summary())
