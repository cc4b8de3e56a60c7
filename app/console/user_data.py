"""Console pages about a user's data as a whole: export (JSON Lines) and purge."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import CacheUnavailableError
from app.api.deps import ResourcesDep
from app.console.user_routes import UserParam
from app.console.web import ConsoleRoute, FormDep, SessionDep, record, render
from app.db import user_session
from app.errors import ServiceError
from app.services.portable import SNAPSHOT, export_user
from app.services.purge import PurgeIncompleteError, count_user_rows, purge_user
from app.services.users import UserDirectoryService

log = logging.getLogger(__name__)
router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


@router.get("/export")
async def export(session: SessionDep, resources: ResourcesDep, user_id: UserParam) -> Response:
    """Download everything of the user as JSON Lines (the service behind GET /v1/export)."""
    db = user_session(resources.sessionmaker, user_id)
    try:
        # One snapshot for the whole stream; a database failure here is a page, not a cut file.
        await db.connection(execution_options=SNAPSHOT)
        await UserDirectoryService(db).counts(user_id)
    except BaseException:
        await db.close()
        raise
    record(session, "user.export", user_id)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", user_id)[:100]
    return StreamingResponse(
        _export_lines(db, user_id),
        media_type="application/x-ndjson",
        headers={
            "Content-Disposition": f'attachment; filename="pgrecall-{name}.jsonl"',
            "Cache-Control": "no-store",
        },
    )


async def _export_lines(db: AsyncSession, user_id: str) -> AsyncIterator[str]:
    try:
        async for line in export_user(db, user_id):
            yield json.dumps(line, ensure_ascii=False) + "\n"
    except Exception:
        # Headers are sent: the missing end line tells the reader the export is incomplete.
        log.exception("console export of a user failed mid-stream")
    finally:
        await db.close()


@router.get("/purge")
async def purge_page(
    request: Request, session: SessionDep, resources: ResourcesDep, user_id: UserParam
) -> Response:
    """What a purge would delete, and the typed confirmation."""
    counts = await count_user_rows(resources.sessionmaker, user_id)
    return render(
        request, "purge.html", session=session, user_id=user_id, counts=counts, error=None
    )


@router.post("/purge")
async def purge(
    request: Request,
    session: SessionDep,
    form: FormDep,
    resources: ResourcesDep,
    user_id: UserParam,
) -> Response:
    """Delete everything of the user (the `pgrecall purge-user` service) once the id is typed."""
    if form.get("confirm", "") != user_id:
        counts = await count_user_rows(resources.sessionmaker, user_id)
        return render(
            request,
            "purge.html",
            422,
            session=session,
            user_id=user_id,
            counts=counts,
            error="type the user id exactly to confirm",
        )
    try:
        report = await purge_user(resources.sessionmaker, resources.cache, user_id)
    except CacheUnavailableError:
        raise ServiceError("Redis is unreachable: nothing was deleted; retry later", 503) from None
    except PurgeIncompleteError as exc:
        record(session, "user.purge", user_id, outcome="rows deleted, Redis keys remain")
        raise ServiceError(str(exc), 503) from None
    record(session, "user.purge", user_id, **report.rows, redis_keys=report.redis_keys)
    return render(request, "purged.html", session=session, user_id=user_id, report=report)
