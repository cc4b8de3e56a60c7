"""The OpenAPI document and its browser page, behind the service key when keys are configured."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from app.api.deps import require_service_key

router = APIRouter(include_in_schema=False, dependencies=[Depends(require_service_key)])


@router.get("/openapi.json")
async def openapi_document(request: Request) -> JSONResponse:
    """The OpenAPI 3 document of this service."""
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def docs_page() -> HTMLResponse:
    """Swagger UI for the document above."""
    return get_swagger_ui_html(openapi_url="/openapi.json", title="pgrecall API")
