"""What every console page shares: templates, the route class that turns failures into pages,
the signed-in admin, the user a page acts for, CSRF-checked forms, and the audit record of each
change."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode

from fastapi import Depends, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, ValidationError
from sqlalchemy import exc as sa_exc

from app.console.auth import SESSION_COOKIE, ConsoleAuth, ConsoleSession
from app.errors import ServiceError, ValidationFailedError
from app.http.deps import ResourcesDep
from app.runtime.failures import database_error
from app.runtime.identity import ScopeFields, resolve_caller, scope_claim
from app.services.api_keys import Caller

log = logging.getLogger(__name__)
audit = logging.getLogger("app.audit")

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
PAGE_SIZE = 50
MAX_FORM_FIELDS = 50

# No script, no inline style, nothing from elsewhere: the console is plain server-rendered HTML.
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

# The scope fields of "Ask as this user" (query parameters), as a refusal names them.
QUERY_FIELDS = ScopeFields("query.agent_id", "query.run_id", "query.scope_mode", "query.spaces")


def url(path: str, **params: Any) -> str:
    """A console URL with its query string (None and "" values left out)."""
    kept = {k: v for k, v in params.items() if v is not None and v != ""}
    return f"/console{path}" + (f"?{urlencode(kept)}" if kept else "")


env = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def _score(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


env.filters["score"] = _score
env.globals["url"] = url


@dataclass(frozen=True)
class ConsoleConfig:
    """What the console needs besides the shared Resources (built once in install_console)."""

    auth: ConsoleAuth
    mlflow_tracking_uri: str


async def config_of(request: Request) -> ConsoleConfig:
    return request.app.state.console  # type: ignore[no-any-return]


ConfigDep = Annotated[ConsoleConfig, Depends(config_of)]


class SignInRequired(Exception):
    """No valid console session: the caller is sent to the login page."""


class CsrfRefused(Exception):
    """A form came without the session's CSRF token."""


def render(
    request: Request,
    template: str,
    status_code: int = 200,
    session: ConsoleSession | None = None,
    **context: Any,
) -> HTMLResponse:
    """A page, with the headers every console page carries."""
    html = env.get_template(template).render(request=request, session=session, **context)
    return HTMLResponse(html, status_code=status_code, headers=_HEADERS)


def window(page: int) -> dict[str, int]:
    """The rows of a page: `limit` and `offset` for the service's list."""
    return {"limit": PAGE_SIZE, "offset": (page - 1) * PAGE_SIZE}


def paging(total: int, page: int) -> dict[str, int]:
    """The template context of a paginated list: its total, this page and how many pages of
    PAGE_SIZE there are (at least one)."""
    return {"total": total, "page": page, "pages": max(1, -(-total // PAGE_SIZE))}


def see_other(location: str) -> RedirectResponse:
    """After a POST: the browser GETs the result page (post/redirect/get)."""
    return RedirectResponse(location, status_code=303, headers=_HEADERS)


def _error_page(request: Request, status_code: int, message: str, fields: list[str]) -> Response:
    session = getattr(request.state, "console_session", None)
    return render(
        request, "error.html", status_code, session=session, message=message, fields=fields
    )


class ConsoleRoute(APIRoute):
    """Failures of console routes are pages (or a redirect to sign in), never JSON."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        original = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                return await original(request)
            except SignInRequired:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return see_other(url("/login", next=target if request.method == "GET" else None))
            except CsrfRefused:
                audit.warning(
                    "console form refused: CSRF token missing or wrong",
                    extra={"fields": {"path": request.url.path}},
                )
                return _error_page(request, 403, "form refused: missing or wrong CSRF token", [])
            except RequestValidationError as exc:
                fields = [
                    ".".join(str(p) for p in e.get("loc", ())) + f": {e.get('msg', 'invalid')}"
                    for e in exc.errors()
                ]
                return _error_page(request, 422, "invalid input", fields)
            except ValidationFailedError as exc:
                return _error_page(request, 422, exc.message, [exc.field or "request"])
            except ServiceError as exc:
                return _error_page(request, exc.status_code, exc.message, [])
            except (sa_exc.SQLAlchemyError, OSError) as exc:
                mapped = database_error(exc)
                if mapped is None:
                    log.exception("console: unexpected database error")
                    mapped = ServiceError("internal error", 500)
                return _error_page(request, mapped.status_code, mapped.message, [])

        return handler


async def console_session(request: Request, config: ConfigDep) -> ConsoleSession:
    """The signed-in admin; SignInRequired otherwise (every page but the login page)."""
    session = config.auth.verify(request.cookies.get(SESSION_COOKIE))
    if session is None:
        raise SignInRequired
    request.state.console_session = session
    return session


SessionDep = Annotated[ConsoleSession, Depends(console_session)]


# The memory scope a page of one user may name (docs/agents.md): an empty field of a GET form
# is no value.
ScopeQuery = Annotated[str | None, Query(max_length=1000)]


def _given(value: str | None) -> str | None:
    return (value.strip() or None) if value is not None else None


async def console_caller(
    _: SessionDep,
    resources: ResourcesDep,
    user: Annotated[str, Query()],
    agent_id: ScopeQuery = None,
    run_id: ScopeQuery = None,
    scope_mode: ScopeQuery = None,
    spaces: ScopeQuery = None,
) -> Caller:
    """Whom a page of one user acts for: the signed-in admin (the console checked the session,
    so resolve_caller trusts the operator) names the user in `?user=`, and may name the memory
    scope in `agent_id`, `run_id`, `scope_mode` and `spaces` (the headers' rules: an invalid one
    is a 422 page naming `query.<name>`); resolve_caller's rules decide, as for every other door
    (an invalid user id is a 422 page naming `query.user`)."""
    claim = scope_claim(
        _given(agent_id), _given(run_id), _given(scope_mode), _given(spaces), fields=QUERY_FIELDS
    )
    return await resolve_caller(
        resources, None, user, trusted=True, user_field="query.user", claim=claim
    )


async def console_user(caller: Annotated[Caller, Depends(console_caller)]) -> str:
    """The id of the user a page acts for (every statement of the page is scoped to it)."""
    return caller.user_id


UserParam = Annotated[str, Depends(console_user)]
CallerParam = Annotated[Caller, Depends(console_caller)]


def parse_form(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """A form validated by the API's own schema; errors name the form field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("form", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


async def read_form(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (what an HTML form posts) as a dict."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ValidationFailedError("body: expected an HTML form", field="body")
    raw = await request.body()
    try:
        pairs = parse_qsl(
            raw.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise ValidationFailedError("body: not a readable form", field="body") from None
    return dict(pairs)


async def checked_form(request: Request, session: SessionDep) -> dict[str, str]:
    """The posted form of a signed-in admin, refused unless it carries the session's token."""
    form = await read_form(request)
    if not ConsoleAuth.csrf_ok(session, form.get("csrf_token")):
        raise CsrfRefused
    return form


FormDep = Annotated[dict[str, str], Depends(checked_form)]


def record(session: ConsoleSession, action: str, user_id: str | None, **fields: Any) -> None:
    """One audit line per change the console made (after it committed)."""
    audit.info(
        "console admin action",
        extra={
            "fields": {
                "action": action,
                "user_id": user_id,
                "console_session": session.audit_id,
                **{k: str(v) for k, v in fields.items()},
            }
        },
    )
