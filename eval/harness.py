"""The service, in-process, over its own HTTP API: what the eval runners drive.

The app runs with its real lifespan (Postgres, migrations, embedder, optional Redis) and
requests go through httpx's ASGI transport, so every query takes the production path.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from app.api.deps import Resources
from app.config import Settings
from app.db import admin_sessions, user_session
from app.embedded import EmbeddedPostgres
from app.main import create_app
from app.services.memory import MemoryInput, MemoryService


@dataclass
class Harness:
    app: FastAPI
    client: httpx.AsyncClient

    @property
    def resources(self) -> Resources:
        return self.app.state.resources  # type: ignore[no-any-return]

    async def add_memories(self, items: Sequence[MemoryInput]) -> list[uuid.UUID]:
        """Store curated memories through the memory service (the admin write path)."""
        # A dataset seeds many users at once: the admin mode, as `pgrecall seed` does.
        sessions = admin_sessions(self.resources.sessionmaker, "eval seed")
        async with sessions() as session, session.begin():
            return await MemoryService(session, self.resources.embeddings).create_many(items)

    async def set_deleted(self, user_id: str, item_id: uuid.UUID) -> None:
        async with user_session(self.resources.sessionmaker, user_id) as session, session.begin():
            await MemoryService(session, self.resources.embeddings).set_deleted(
                user_id, item_id, True
            )

    async def add_conversation(
        self, user_id: str, messages: Sequence[dict[str, Any]], title: str | None = None
    ) -> list[dict[str, Any]]:
        """Create a conversation and bulk-append messages over HTTP; returns the stored rows."""
        headers = {"X-User-Id": user_id}
        response = await self.client.post(
            "/v1/conversations", json={"title": title}, headers=headers
        )
        response.raise_for_status()
        cid = response.json()["id"]
        stored: list[dict[str, Any]] = []
        for start in range(0, len(messages), 500):
            chunk = list(messages[start : start + 500])
            response = await self.client.post(
                f"/v1/conversations/{cid}/messages:bulk", json={"messages": chunk}, headers=headers
            )
            response.raise_for_status()
            stored.extend(response.json()["items"])
        return stored

    async def query(self, user_id: str, query: str, **body: Any) -> dict[str, Any]:
        """POST /v1/memory/query as the user."""
        response = await self.client.post(
            "/v1/memory/query", json={"query": query, **body}, headers={"X-User-Id": user_id}
        )
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    async def tool_query(self, user_id: str, query: str, **args: Any) -> dict[str, Any]:
        """POST /v1/tools/query_memory as the user (the agent's path, with its cut and floor)."""
        response = await self.client.post(
            "/v1/tools/query_memory", json={"query": query, **args}, headers={"X-User-Id": user_id}
        )
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]


@asynccontextmanager
async def running_service(settings: Settings | None = None) -> AsyncIterator[Harness]:
    """A throwaway embedded database (unless settings name one) and the app on top of it."""
    tmp: Path | None = None
    embedded: EmbeddedPostgres | None = None
    if settings is None or settings.database_url is None:
        tmp = Path(tempfile.mkdtemp(prefix="pgrecall-eval-"))
        embedded = EmbeddedPostgres(tmp)
        embedded.start()  # started (and stopped) here; the app attaches as in the default
        base = settings or Settings()
        settings = base.model_copy(update={"data_dir": tmp})
    app = create_app(settings)
    try:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://eval") as client:
                yield Harness(app, client)
    finally:
        if embedded is not None:
            embedded.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
