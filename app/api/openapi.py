"""The OpenAPI document, true to the service: one error body, every status a route can return.

FastAPI documents its own 422 shape (`detail` as a list) and nothing else; pgrecall answers
every error with `ErrorBody`. `build_openapi` takes FastAPI's document and, per operation, puts
`ErrorBody` on 422 and adds the statuses the route can actually produce (auth, not found, body
too large, database unavailable).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from app.tools import TOOLS


class FieldProblem(BaseModel):
    field: str = Field(
        description="where the bad input is, e.g. `body.content`, `header.X-User-Id`"
    )
    reason: str


class ErrorBody(BaseModel):
    """Every error response of the service."""

    error: str = Field(description="error class, e.g. ValidationError, NotFoundError")
    detail: str = Field(description="what went wrong, for a person")
    fields: list[FieldProblem] | None = Field(
        default=None, description="on 422: each rejected field and why"
    )


_REF = {"$ref": "#/components/schemas/ErrorBody"}
_DESCRIPTIONS = {
    "401": "missing or malformed credentials",
    "403": "credentials do not allow this",
    "404": "no such resource for this caller (another user's ids are not found either)",
    "409": "the write conflicts with stored data (e.g. the user already has this content)",
    "413": "request body over the size limit",
    "415": "request body in a charset other than UTF-8",
    "422": "invalid input: `fields` names each rejected field and why",
    "429": "too many agent writes for this user this minute: nothing was stored",
    "503": "Postgres unavailable or timing out: nothing was stored, retry (Retry-After)",
}
# Routes that never touch the database or need credentials.
_OPEN = {"/health", "/ready"}
# The agent's writes count against the per-user write limit (the catalog's writing tools).
_WRITE_LIMITED = {f"/v1/tools/{tool.name}" for tool in TOOLS if tool.writes}
# Operations that name a resource in the body rather than the path (404 when it is not the
# caller's): the write tools, the store's get, and an admin create with `supersedes`.
_BODY_ADDRESSED = {("post", path) for path in _WRITE_LIMITED} | {
    ("post", "/v1/store/items:get"),
    ("post", "/v1/admin/memories"),
}


def _error(status: str) -> dict[str, Any]:
    return {"description": _DESCRIPTIONS[status], "content": {"application/json": {"schema": _REF}}}


def _statuses(path: str, method: str, operation: dict[str, Any], auth_routes: bool) -> list[str]:
    statuses: list[str] = []
    if path in _OPEN:
        return statuses
    if auth_routes or path.startswith("/v1"):
        statuses += ["401", "403"]
    if "{" in path or (method, path) in _BODY_ADDRESSED:
        statuses.append("404")
    if "requestBody" in operation:
        statuses += ["413", "415"]
    if path.startswith("/v1") and method in {"post", "put", "patch", "delete"}:
        statuses.append("409")
    if operation.get("parameters") or "requestBody" in operation:
        statuses.append("422")
    if path in _WRITE_LIMITED:
        statuses.append("429")
    if path.startswith("/v1"):
        statuses.append("503")
    return statuses


# The two credentials that name the user (app/http/deps.py::current_caller).
_SECURITY_SCHEMES = {
    "serviceKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "the service key (PGRECALL_API_KEY): a trusted backend that names the "
        "user in `X-User-Id` (required with this key)",
    },
    "userKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "a per-user key (`pgrecall keys create --user alice`, `pgr_...`): fixes "
        "the user; `X-User-Id` may be left out (refused with 403 when it names another user)",
    },
}


def build_openapi(app: FastAPI, *, auth_configured: bool, per_user: bool = False) -> dict[str, Any]:
    """FastAPI's document with pgrecall's error body and statuses on every operation.

    `per_user`: the document as a per-user key's holder reads it, `X-User-Id` optional; else
    as the service key's (or, without auth, an anonymous caller's), `X-User-Id` required.
    Both describe both credentials (`securitySchemes`, and the header's description)."""
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["FieldProblem"] = FieldProblem.model_json_schema()
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    error_schema.pop("$defs", None)
    schemas["ErrorBody"] = error_schema
    if auth_configured:
        document["components"]["securitySchemes"] = _SECURITY_SCHEMES
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            names_user = False
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "header" and parameter.get("name") == "X-User-Id":
                    parameter["required"] = not per_user
                    names_user = True
            if auth_configured and names_user:
                operation["security"] = [{"serviceKey": []}, {"userKey": []}]
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for status in _statuses(path, method, operation, auth_configured):
                responses.setdefault(status, _error(status))
    return document


def install_openapi(app: FastAPI, *, auth_configured: bool) -> None:
    """Serve `build_openapi`'s documents (each built once): `app.openapi()` is the service
    key's, `openapi_for(app, per_user=True)` a per-user key's."""
    documents: dict[bool, dict[str, Any]] = {}

    def document(per_user: bool) -> dict[str, Any]:
        if per_user not in documents:
            documents[per_user] = build_openapi(
                app, auth_configured=auth_configured, per_user=per_user
            )
        return documents[per_user]

    def openapi() -> dict[str, Any]:
        return document(False)

    app.state.openapi_document = document
    app.openapi = openapi  # type: ignore[method-assign]


def openapi_for(app: FastAPI, *, per_user: bool) -> dict[str, Any]:
    """The document for a reader holding a per-user key (`per_user`) or not."""
    return app.state.openapi_document(per_user)  # type: ignore[no-any-return]
