"""One place that turns exceptions into JSON: {"error": <class>, "detail": <message>}."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Route

from app.errors import DatabaseUnavailableError, ServiceError, ValidationFailedError
from app.runtime.failures import database_error

log = logging.getLogger(__name__)


def _render(error: ServiceError) -> JSONResponse:
    content: dict[str, object] = {"error": error.name, "detail": error.message}
    if isinstance(error, ValidationFailedError):
        # Every 422 lists its fields, whether the schema or a service rule rejected the input.
        content["fields"] = [{"field": error.field or "request", "reason": error.message}]
    return JSONResponse(
        status_code=error.status_code,
        content=content,
        headers={"Retry-After": "1"} if error.status_code == 503 else None,
    )


def _field(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in {"body", "query", "path", "header"}:
        where, rest = parts[0], parts[1:]
        return f"{where}.{'.'.join(rest)}" if rest else where
    return ".".join(parts)


def _methods_at(routes: Sequence[BaseRoute], path: str) -> set[str]:
    methods: set[str] = set()
    for route in routes:
        included = getattr(route, "original_router", None)  # FastAPI's wrapper of a router
        if included is not None:
            methods |= _methods_at(included.routes, path)
        elif isinstance(route, Route) and route.path_regex.match(path):
            methods |= set(route.methods or ())
    return methods


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's)."""
    return sorted(_methods_at(request.app.router.routes, request.url.path))


def install_handlers(app: FastAPI) -> None:
    """Register the error handlers on the app."""

    @app.exception_handler(ServiceError)
    async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return _render(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"field": _field(tuple(e.get("loc", ()))), "reason": e.get("msg", "invalid")}
            for e in exc.errors()
        ]
        summary = "; ".join(f"{p['field']}: {p['reason']}" for p in problems)
        return JSONResponse(
            status_code=422,
            content={"error": "ValidationError", "detail": summary, "fields": problems},
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Routing and framework errors (unknown path, wrong method, unreadable body) in the
        # service's own error body, keeping their headers (Allow on 405).
        if exc.status_code == 400:
            # FastAPI's "error parsing the body" (bytes that are not UTF-8 JSON): the same 422
            # as any other malformed JSON.
            problem = {"field": "body", "reason": f"not valid JSON: {exc.detail}"}
            return JSONResponse(
                status_code=422,
                content={
                    "error": "ValidationError",
                    "detail": problem["reason"],
                    "fields": [problem],
                },
            )
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        try:
            name = HTTPStatus(exc.status_code).phrase.title().replace(" ", "").replace("-", "")
        except ValueError:
            name = "HTTPError"
        return JSONResponse(
            status_code=exc.status_code,
            content={"error": name, "detail": str(exc.detail)},
            headers=headers,
        )

    @app.exception_handler(sa_exc.SQLAlchemyError)
    async def _db_error(_: Request, exc: sa_exc.SQLAlchemyError) -> JSONResponse:
        mapped = database_error(exc)
        if mapped is None:
            log.exception("unexpected database error")
            mapped = ServiceError("internal error", 500)
        else:
            log.warning("database error: %s", type(exc).__name__)
        return _render(mapped)

    @app.exception_handler(OSError)
    async def _os_error(_: Request, exc: OSError) -> JSONResponse:
        log.warning("connection error: %s", exc)
        return _render(
            DatabaseUnavailableError("database unavailable; nothing was stored, retry later")
        )
