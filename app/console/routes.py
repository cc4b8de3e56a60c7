"""Console pages that span users: sign-in, the user directory, health."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from app.console.auth import LOGIN_COOKIE, LOGIN_TTL_S, SESSION_COOKIE, SESSION_TTL_S
from app.console.health import gather
from app.console.web import (
    ConfigDep,
    ConsoleRoute,
    FormDep,
    SessionDep,
    paging,
    read_form,
    record,
    render,
    see_other,
    url,
    window,
)
from app.http.deps import ResourcesDep
from app.runtime import admin_transaction
from app.services.users import UserDirectoryService

audit = logging.getLogger("app.audit")

router = APIRouter(prefix="/console", route_class=ConsoleRoute, include_in_schema=False)

Page = Annotated[int, Query(ge=1, le=100_000)]


def _next_target(value: str | None) -> str:
    """Where to go after signing in: a console path only (never another site)."""
    if value and value.startswith("/console/") and not value.startswith("//"):
        return value
    return url("/users")


@router.get("")
async def index(_: SessionDep) -> Response:
    """The console's start page is the user directory."""
    return see_other(url("/users"))


@router.get("/login")
async def login_page(
    request: Request, config: ConfigDep, next: Annotated[str | None, Query(max_length=2000)] = None
) -> Response:
    """The sign-in form (with the admin key; a button only when no keys are configured)."""
    nonce = config.auth.login_nonce()
    page = render(request, "login.html", nonce=nonce, auth=config.auth, next=next, error=None)
    _set_cookie(request, page, LOGIN_COOKIE, nonce, LOGIN_TTL_S, "/console/login")
    return page


@router.post("/login")
async def login(request: Request, config: ConfigDep) -> Response:
    """Check the admin key, then start a session (cookie) and go where the admin was headed."""
    form = await read_form(request)
    nonce = request.cookies.get(LOGIN_COOKIE)
    fresh = config.auth.login_nonce()

    def refuse(message: str, status: int) -> Response:
        page = render(
            request,
            "login.html",
            status,
            nonce=fresh,
            auth=config.auth,
            next=form.get("next"),
            error=message,
        )
        _set_cookie(request, page, LOGIN_COOKIE, fresh, LOGIN_TTL_S, "/console/login")
        return page

    if not nonce or not config.auth.csrf_nonce_ok(nonce, form.get("nonce")):
        return refuse("the form expired: sign in again", 403)
    if not config.auth.enabled:
        return refuse("the console is off: set PGRECALL_ADMIN_API_KEY", 403)
    if not config.auth.check_key(form.get("admin_key", "")):
        audit.warning("console sign-in refused: wrong admin key", extra={"fields": {}})
        return refuse("wrong admin key", 401)
    cookie, session = config.auth.issue()
    record(session, "sign-in", None, open_mode=config.auth.open_mode)
    response = see_other(_next_target(form.get("next")))
    _set_cookie(request, response, SESSION_COOKIE, cookie, SESSION_TTL_S, "/console")
    response.delete_cookie(LOGIN_COOKIE, path="/console/login")
    return response


@router.post("/logout")
async def logout(session: SessionDep, config: ConfigDep, _: FormDep) -> Response:
    """End the session: the cookie is cleared and the session id refused from now on."""
    config.auth.revoke(session)
    record(session, "sign-out", None)
    response = see_other(url("/login"))
    response.delete_cookie(SESSION_COOKIE, path="/console")
    return response


def _set_cookie(
    request: Request, response: Response, name: str, value: str, max_age: int, path: str
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@router.get("/users")
async def users(
    request: Request,
    session: SessionDep,
    resources: ResourcesDep,
    q: Annotated[str, Query(max_length=255)] = "",
    page: Page = 1,
) -> Response:
    """Every user (paginated, in id order) with their conversations, messages and memories."""
    async with admin_transaction(resources.sessionmaker, "console: user directory") as db:
        rows, total = await UserDirectoryService(db).page(q.strip(), **window(page))
    return render(request, "users.html", session=session, rows=rows, q=q, **paging(total, page))


@router.get("/health")
async def health(
    request: Request, session: SessionDep, resources: ResourcesDep, config: ConfigDep
) -> Response:
    """Database, migrations, Redis, embedder, cache hit ratio and the last evaluation runs."""
    report = await gather(resources, config.mlflow_tracking_uri)
    return render(
        request,
        "health.html",
        session=session,
        report=report,
        mlflow_uri=config.mlflow_tracking_uri,
    )
