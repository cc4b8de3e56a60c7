"""`pgrecall export` and `pgrecall import`: one user's data as one JSON Lines file.

The format and the rules (ids kept or remapped, vectors reused or recomputed) are in
app/services/portable.py; docs/admin.md shows the commands.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import IO, Annotated

import typer
from tqdm import tqdm

from app.cli.common import QuietOption, Runtime, checked_user, fail, run, show_progress
from app.errors import ServiceError
from app.runtime import admin_transaction, user_transaction
from app.services.portable import (
    SNAPSHOT,
    ImportReport,
    export_counts,
    export_user,
    import_export,
    parse_export,
)
from app.services.reindex import TABLES, reindex

UserOption = Annotated[str, typer.Option("--user", help="the user whose data is exported")]


def export(
    user: UserOption,
    embeddings: Annotated[
        bool, typer.Option("--embeddings", help="include the stored vectors (large)")
    ] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", dir_okay=False, help="file (default stdout)")
    ] = None,
    quiet: QuietOption = False,
) -> None:
    """Write one user's conversations, messages and memories (with history) as JSON Lines."""
    user = checked_user(user)

    async def work(rt: Runtime) -> dict[str, int]:
        target: IO[str] = sys.stdout if output is None else output.open("w", encoding="utf-8")
        written: dict[str, int] = {}
        try:
            async with user_transaction(rt.sessionmaker, user) as session:
                await session.connection(execution_options=SNAPSHOT)
                counts = await export_counts(session, user)
                total = counts["messages"] + counts["memories"]
                show = show_progress(quiet) and output is not None
                with tqdm(total=total, unit="row", disable=not show, file=sys.stderr) as bar:
                    async for line in export_user(
                        session, user, embeddings=embeddings, progress=bar.update
                    ):
                        target.write(json.dumps(line, ensure_ascii=False) + "\n")
                        if line["kind"] == "end":
                            written = line["counts"]
        finally:
            if output is not None:
                target.close()
        return written

    started = time.monotonic()
    try:
        counts = run(work)
    except ServiceError as exc:
        raise fail(exc.message) from None
    rows = ", ".join(f"{k} {v}" for k, v in counts.items())
    typer.echo(f"exported {user}: {rows}; {time.monotonic() - started:.1f} s", err=True)


def import_(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="an export file")],
    user: Annotated[
        str | None, typer.Option("--user", help="import into this user (default: the exported one)")
    ] = None,
    into_non_empty: Annotated[
        bool,
        typer.Option("--into-non-empty", help="add to a user who already has data (new ids)"),
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Restore an export into an empty user (or, when told, one with data): all or nothing."""
    target = checked_user(user) if user is not None else None
    try:
        with file.open(encoding="utf-8") as handle:
            parsed = parse_export(handle)
    except ServiceError as exc:
        raise fail(f"{file}: {exc.message}; nothing imported") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"{file}: {exc}; nothing imported") from None
    into = target or checked_user(parsed.header.user_id)

    async def work(rt: Runtime) -> ImportReport:
        assert rt.embeddings is not None
        total = parsed.counts["messages"] + parsed.counts["memories"]
        with tqdm(
            total=total, unit="text", disable=not show_progress(quiet), file=sys.stderr
        ) as bar:
            async with user_transaction(rt.sessionmaker, into) as session:
                report = await import_export(
                    session,
                    parsed,
                    rt.embeddings,
                    user_id=into,
                    allow_non_empty=into_non_empty,
                    progress=bar.update,
                    passages=rt.settings.message_passages,
                    cache=rt.cache,
                )
        for table in TABLES:  # an import can be most of a table: centroids may be stale
            async with admin_transaction(rt.sessionmaker, "import: vector index refresh") as s:
                await reindex(s, table, only_if_stale=True)
        return report

    started = time.monotonic()
    try:
        report = run(work, embedder=True)
    except ServiceError as exc:
        raise fail(f"{exc.message}; nothing imported") from None
    # Counts and seconds (the start-up of the embedder and the database included).
    typer.echo(f"{report.summary()}; {time.monotonic() - started:.1f} s")
