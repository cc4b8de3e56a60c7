"""The service, in-process, over its own HTTP API: what the eval runners drive.

The app runs with its real lifespan (Postgres, migrations, embedder, optional Redis) and
requests go through the project's client (`pgrecall.client.AsyncClient.for_app`: the ASGI
app in this process), so every query takes the production path and eval speaks to the service
the way users do.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from app.config import Settings
from app.embedded import EmbeddedPostgres
from app.main import create_app
from app.retrieval.presets import RetrievalPreset
from app.runtime import Resources, admin_transaction, user_transaction
from app.services.memory import MemoryInput, MemoryService
from app.services.spaces import SpaceService
from pgrecall.client import AsyncClient, TimeFilters


@dataclass
class Harness:
    app: FastAPI
    client: AsyncClient

    @property
    def resources(self) -> Resources:
        return self.app.state.resources  # type: ignore[no-any-return]

    def use_preset(self, preset: RetrievalPreset) -> None:
        """Put a run's preset into the running service (every query reads it per request)."""
        config = self.resources.query_config
        if config.preset != preset:
            self.resources.query_config = replace(config, preset=preset)

    async def add_memories(self, items: Sequence[MemoryInput]) -> list[uuid.UUID]:
        """Store curated memories through the memory service (the admin write path)."""
        # A dataset seeds many users at once: the admin mode, as `pgrecall seed` does.
        async with admin_transaction(self.resources.sessionmaker, "eval seed") as session:
            return await MemoryService(session, self.resources.embeddings).create_many(items)

    async def set_deleted(self, user_id: str, item_id: uuid.UUID) -> None:
        async with user_transaction(self.resources.sessionmaker, user_id) as session:
            await MemoryService(session, self.resources.embeddings).set_deleted(
                user_id, item_id, True
            )

    async def add_conversation(
        self, user_id: str, messages: Sequence[dict[str, Any]], title: str | None = None
    ) -> list[dict[str, Any]]:
        """Create a conversation and bulk-append messages over HTTP; returns the stored rows."""
        pgr = self.client.as_user(user_id)
        conversation = await pgr.create_conversation(title)
        stored: list[dict[str, Any]] = []
        for start in range(0, len(messages), 500):
            chunk = list(messages[start : start + 500])
            page = await pgr.import_messages(conversation.id, chunk)
            stored.extend(m.model_dump(mode="json") for m in page.items)
        return stored

    async def query(self, user_id: str, query: str, **body: Any) -> dict[str, Any]:
        """POST /v1/memory/query as the user (body: the client's memory_query arguments)."""
        answer = await self.client.as_user(user_id).memory_query(query, **body)
        return answer.model_dump(mode="json")

    async def tool_query(
        self,
        user_id: str,
        query: str,
        *,
        types: Sequence[str] | None = None,
        times: TimeFilters | None = None,
        spaces: Sequence[str] = (),
    ) -> dict[str, Any]:
        """POST /v1/tools/query_memory as the user (the agent's path, with its cut and floor);
        `spaces`: the shared spaces it reads besides (X-Spaces)."""
        pgr = self.client.as_user(user_id)
        if spaces:
            pgr = pgr.scoped(spaces=list(spaces))
        answer = await pgr.query_memory(query, types=types, times=times)
        return answer.model_dump(mode="json")

    async def add_space(self, name: str, members: Mapping[str, str]) -> None:
        """A shared space and its members' grants (user -> read | write), as the admin does."""
        async with admin_transaction(self.resources.sessionmaker, "eval spaces") as session:
            spaces = SpaceService(session)
            await spaces.create(name)
            for user, access in members.items():
                await spaces.grant(name, user, access)

    async def tool_call(self, user_id: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """One agent write tool (save_memory, forget_memory, rate_message) as the user."""
        pgr = self.client.as_user(user_id)
        if tool == "save_memory":
            known = {"importance", "expires_at", "supersedes"}
            extra = set(args) - known - {"content", "type"}
            if extra:
                raise ValueError(f"save_memory: unknown arguments {sorted(extra)}")
            answer: Any = await pgr.save_memory(
                args["content"], args["type"], **{k: v for k, v in args.items() if k in known}
            )
        elif tool == "forget_memory":
            answer = await pgr.forget_memory(args["id"])
        elif tool == "rate_message":
            answer = await pgr.rate_message(args["message_id"], args["vote"])
        else:
            raise ValueError(f"unknown tool {tool!r}")
        return dict(answer.model_dump(mode="json"))


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
        async with app.router.lifespan_context(app), AsyncClient.for_app(app) as client:
            yield Harness(app, client)
    finally:
        if embedded is not None:
            embedded.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
