"""Extraction against a real HTTP server speaking the chat completions protocol.

The app runs with PGRECALL_EXTRACTION=llm pointed at the scripted server (tests/proxy/
upstream_server.py) and no worker tasks of its own: each test drives the worker itself
(`drain`), so what runs when is deterministic. No backoff keeps it fast; tests of timeouts
set their own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import user_session
from app.extraction.runtime import Extraction
from app.models import ExtractionJob, MemoryItem
from app.repositories.extraction import ExtractionRepository
from tests.proxy.upstream_server import Answer, Upstream

FAST = {
    "extraction": "llm",
    "extraction_workers": 0,
    "extraction_timeout_s": 5.0,  # one deadline per call: room for a loaded machine
    "extraction_backoff_s": 0.0,
    "extraction_max_attempts": 3,
    "extraction_max_output_tokens": 200,
    "extraction_poll_interval_s": 0.05,
    # One model call per batch in these tests: the summary's own call is tested apart
    # (tests/extraction/test_conversation_settings.py).
    "extraction_summary_tokens": 0,
}


@dataclass
class Env:
    client: httpx.AsyncClient
    app: FastAPI
    upstream: Upstream

    @property
    def extraction(self) -> Extraction:
        extraction = self.app.state.extraction
        assert extraction is not None
        return extraction  # type: ignore[no-any-return]

    def script(self, *answers: Answer) -> None:
        self.upstream.answers.extend(answers)

    async def drain(self) -> list[Any]:
        return await self.extraction.worker.drain()

    async def jobs(self, user: str) -> list[ExtractionJob]:
        sessions = self.app.state.resources.sessionmaker
        async with user_session(sessions, user) as session:
            return list(await ExtractionRepository(session).jobs(user))

    async def memories(self, user: str, *, live: bool = True) -> list[MemoryItem]:
        from sqlalchemy import select

        sessions = self.app.state.resources.sessionmaker
        async with user_session(sessions, user) as session:
            stmt = select(MemoryItem).where(MemoryItem.user_id == user)
            if live:
                stmt = stmt.where(MemoryItem.deleted_at.is_(None))
            return list((await session.execute(stmt.order_by(MemoryItem.created_at))).scalars())

    def requests(self) -> list[dict[str, Any]]:
        """The JSON payload (turns, memories) of every request the model got."""
        return [json.loads(s.body["messages"][1]["content"]) for s in self.upstream.seen]


def facts(*items: dict[str, Any]) -> str:
    return json.dumps({"facts": list(items)})


def fact(
    content: str,
    *sources: str,
    action: str = "add",
    replaces: str | None = None,
    type: str = "fact",
) -> dict[str, Any]:
    return {
        "content": content,
        "type": type,
        "sources": list(sources) or ["t1"],
        "action": action,
        "replaces": replaces,
    }


def alias_of(payload: dict[str, Any], word: str) -> str:
    """The alias the model was shown for the memory whose text contains `word`."""
    return next(m["id"] for m in payload["memories"] if word in m["text"])


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


@pytest.fixture
def make_env(
    make_client: Callable[..., Any], upstream: Upstream, db_engine: AsyncEngine
) -> Callable[..., Any]:
    """`async with make_env(**overrides) as env:` the app on the scripted model, on a job queue
    of its own: unfinished jobs are removed before the test (another test file on this worker's
    database may have queued some, or left retries that fall due later: `drain()` would claim
    them) and after it, so no later test's worker picks up this one's."""

    async def clear_unfinished_jobs() -> None:
        async with db_engine.begin() as conn:
            await conn.execute(
                text("DELETE FROM extraction_jobs WHERE state IN ('queued', 'running')")
            )

    @asynccontextmanager
    async def factory(**overrides: Any) -> AsyncIterator[Env]:
        settings = {**FAST, "extraction_base_url": upstream.base, **overrides}
        await clear_unfinished_jobs()
        async with make_client(**settings) as (client, app):
            try:
                yield Env(client, app, upstream)
            finally:
                await clear_unfinished_jobs()

    return factory
