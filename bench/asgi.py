"""ASGI factory for `uvicorn --factory --workers N` (the workers experiment; `pgrecall serve`
runs one worker): settings from the environment, as the CLI reads them."""

from __future__ import annotations

from fastapi import FastAPI

from app.config import load_settings
from app.main import create_app
from app.observability import configure_logging


def create() -> FastAPI:
    """The service app, configured from PGRECALL_* variables."""
    settings = load_settings()
    configure_logging(settings.log_level, settings.log_format.value)
    return create_app(settings)
