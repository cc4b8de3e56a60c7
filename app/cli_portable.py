"""`pgrecall export` and `pgrecall import`: one user's data as one JSON Lines file.

The format and the rules (ids kept or remapped, vectors reused or recomputed) are in
app/services/portable.py; docs/admin.md shows the commands.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Annotated

import typer

from app.cli_admin import QuietOption, Runtime, _fail, _run, _show_progress, _user
from app.errors import ServiceError

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
    from tqdm import tqdm

    from app.db import user_session
    from app.repositories.portable import PortableRepository
    from app.services.portable import SNAPSHOT, export_user

    user = _user(user)

    async def work(rt: Runtime) -> dict[str, int]:
        target: IO[str] = sys.stdout if output is None else output.open("w", encoding="utf-8")
        written: dict[str, int] = {}
        try:
            async with user_session(rt.sessionmaker, user) as session:
                await session.connection(execution_options=SNAPSHOT)
                counts = await PortableRepository(session).counts(user)
                total = counts["messages"] + counts["memories"]
                show = _show_progress(quiet) and output is not None
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

    try:
        counts = _run(work)
    except ServiceError as exc:
        raise _fail(exc.message) from None
    rows = ", ".join(f"{k} {v}" for k, v in counts.items())
    typer.echo(f"exported {user}: {rows}", err=True)


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
    from tqdm import tqdm

    from app.db import admin_sessions, user_session
    from app.services.portable import ImportReport, import_export, parse_export
    from app.services.reindex import TABLES, reindex

    target = _user(user) if user is not None else None
    try:
        with file.open(encoding="utf-8") as handle:
            parsed = parse_export(handle)
    except ServiceError as exc:
        raise _fail(f"{file}: {exc.message}; nothing imported") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"{file}: {exc}; nothing imported") from None
    into = target or _user(parsed.header.user_id)

    async def work(rt: Runtime) -> ImportReport:
        assert rt.embeddings is not None
        total = parsed.counts["messages"] + parsed.counts["memories"]
        with tqdm(
            total=total, unit="text", disable=not _show_progress(quiet), file=sys.stderr
        ) as bar:
            async with user_session(rt.sessionmaker, into) as session, session.begin():
                report = await import_export(
                    session,
                    parsed,
                    rt.embeddings,
                    user_id=into,
                    allow_non_empty=into_non_empty,
                    progress=bar.update,
                    passages=rt.settings.message_passages,
                )
        await rt.cache.invalidate_user(into)
        sessions = admin_sessions(rt.sessionmaker, "import: vector index refresh")
        for table in TABLES:  # an import can be most of a table: centroids may be stale
            async with sessions() as session, session.begin():
                await reindex(session, table, only_if_stale=True)
        return report

    try:
        report = _run(work, embedder=True)
    except ServiceError as exc:
        raise _fail(f"{exc.message}; nothing imported") from None
    typer.echo(report.summary())
