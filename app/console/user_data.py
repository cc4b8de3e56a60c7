"""Console pages about a user's data as a whole: export (JSON Lines) and purge."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from app.adapters.cache import CacheUnavailableError
from app.console.web import ConsoleRoute, FormDep, SessionDep, UserParam, record, render
from app.errors import ServiceError
from app.http.deps import ResourcesDep
from app.services.portable import open_export
from app.services.purge import PurgeIncompleteError, count_user_rows, purge_user

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)


@router.get("/export")
async def export(session: SessionDep, resources: ResourcesDep, user_id: UserParam) -> Response:
    """Download everything of the user as JSON Lines (the service behind GET /v1/export)."""
    lines = await open_export(resources.sessionmaker, user_id)
    record(session, "user.export", user_id)
    name = re.sub(r"[^A-Za-z0-9._-]", "_", user_id)[:100]
    return StreamingResponse(
        lines,
        media_type="application/x-ndjson",
        headers={
            "Content-Disposition": f'attachment; filename="pgrecall-{name}.jsonl"',
            "Cache-Control": "no-store",
        },
    )


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
