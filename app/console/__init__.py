"""The admin console at /console: server-rendered pages over the same services as the API."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.config import Settings
from app.console import routes, spaces, user_data, user_routes
from app.console.auth import ConsoleAuth
from app.console.web import STATIC, ConsoleConfig


def default_tracking_uri() -> str:
    """The store `python -m eval` writes to when MLFLOW_TRACKING_URI is unset."""
    return f"sqlite:///{(Path.cwd() / 'mlruns' / 'mlflow.db').as_posix()}"


def install_console(app: FastAPI, settings: Settings) -> None:
    """Mount the console's pages and static files on the app."""
    admin_key = settings.admin_api_key.get_secret_value() if settings.admin_api_key else None
    app.state.console = ConsoleConfig(
        auth=ConsoleAuth(admin_key, open_mode=not settings.auth_enabled and admin_key is None),
        mlflow_tracking_uri=settings.mlflow_tracking_uri or default_tracking_uri(),
    )
    app.include_router(routes.router)
    app.include_router(user_routes.router)
    app.include_router(user_data.router)
    app.include_router(spaces.router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
