"""The OpenAPI document and its browser page: with keys configured, for the service key or a
per-user key (whose holder gets the document where X-User-Id is optional)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from app.api.openapi import openapi_for
from app.http.deps import document_reader

router = APIRouter(include_in_schema=False)


@router.get("/openapi.json")
async def openapi_document(
    request: Request, per_user: Annotated[bool, Depends(document_reader)]
) -> JSONResponse:
    """The OpenAPI 3 document of this service, as the reader's credential uses it."""
    return JSONResponse(openapi_for(request.app, per_user=per_user))


@router.get("/docs", dependencies=[Depends(document_reader)])
async def docs_page() -> HTMLResponse:
    """Swagger UI for the document above."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="pgrecall API")
