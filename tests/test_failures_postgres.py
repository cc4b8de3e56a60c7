"""Postgres going away under a running service: writes 503 and leave nothing, reads fail closed.

These tests stop and kill the shared embedded server, and always bring it back before they end.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.adapters.embedder import LocalEmbedder, Vectors
from app.embedded import EmbeddedPostgres
from tests.helpers import add_messages, headers, new_conversation


async def count_messages(pg: EmbeddedPostgres, content: str) -> int:
    engine = create_async_engine(pg.url)
    try:
        async with engine.connect() as conn:
            found = await conn.scalar(
                text("SELECT count(*) FROM messages WHERE content = :c"), {"c": content}
            )
            return int(found or 0)
    finally:
        await engine.dispose()


@pytest.fixture
def restore_pg(pg: EmbeddedPostgres) -> Iterator[EmbeddedPostgres]:
    """Whatever the test does to the server, it is running again afterwards."""
    try:
        yield pg
    finally:
        pg.start()
        assert pg.is_running()


async def test_write_while_postgres_stopped_is_503_and_leaves_nothing(
    make_client: Callable[..., Any], restore_pg: EmbeddedPostgres, user_id: str
) -> None:
    pg = restore_pg
    async with make_client() as (client, _):
        cid = await new_conversation(client, user_id)
        # Warm the pool so the outage hits connections the service already holds.
        await add_messages(client, user_id, ["before the outage"], conversation=cid)
        lost = f"written during the outage {uuid.uuid4()}"

        pg.stop()
        assert not pg.is_running()
        try:
            response = await client.post(
                f"/v1/conversations/{cid}/messages",
                json={"role": "user", "content": lost},
                headers=headers(user_id),
            )
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["error"] == "DatabaseUnavailableError"
            assert "nothing was stored" in body["detail"]
            assert response.headers["retry-after"] == "1"
            assert response.headers["x-correlation-id"]

            created = await client.post("/v1/conversations", json={}, headers=headers(user_id))
            assert created.status_code == 503
            listed = await client.get("/v1/conversations", headers=headers(user_id))
            assert listed.status_code == 503
            not_ready = await client.get("/ready")
            assert not_ready.status_code == 503
            assert not_ready.json()["ready"] is False
        finally:
            pg.start()

        assert await count_messages(pg, lost) == 0
        # Same app, same engine: the pool recovers on its own.
        retried = await client.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": lost},
            headers=headers(user_id),
        )
        assert retried.status_code == 201, retried.text
        assert await count_messages(pg, lost) == 1
        assert (await client.get("/ready")).status_code == 200


class PausingEmbedder:
    """The real embedder, holding each call until the test lets it go (to stop Postgres then)."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.model = inner.model
        self.dimension = inner.dimension
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> Vectors:
        self.entered.set()
        await self.release.wait()
        return await self.inner.embed(texts)


async def test_postgres_stopping_mid_request_is_503_and_leaves_nothing(
    make_client: Callable[..., Any],
    restore_pg: EmbeddedPostgres,
    embedder: LocalEmbedder,
    user_id: str,
) -> None:
    pg = restore_pg
    pausing = PausingEmbedder(embedder)
    async with make_client(embedder=pausing) as (client, _):
        cid = await new_conversation(client, user_id)
        lost = f"in flight during the outage {uuid.uuid4()}"
        # The request has read the conversation inside its transaction and is now embedding.
        request = asyncio.create_task(
            client.post(
                f"/v1/conversations/{cid}/messages",
                json={"role": "user", "content": lost},
                headers=headers(user_id),
            )
        )
        await asyncio.wait_for(pausing.entered.wait(), 30)
        try:
            await asyncio.to_thread(pg.stop)
            pausing.release.set()
            response = await asyncio.wait_for(request, 30)
        finally:
            pausing.release.set()
            pg.start()
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "DatabaseUnavailableError"
        assert await count_messages(pg, lost) == 0
        retried = await client.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": lost},
            headers=headers(user_id),
        )
        assert retried.status_code == 201, retried.text
        assert await count_messages(pg, lost) == 1


async def test_committed_data_survives_kill_9(
    make_client: Callable[..., Any], restore_pg: EmbeddedPostgres, user_id: str
) -> None:
    pg = restore_pg
    contents = [f"durable {i} {uuid.uuid4()}" for i in range(3)]
    async with make_client() as (client, _):
        cid = await new_conversation(client, user_id, "kept")
        await add_messages(client, user_id, contents, conversation=cid)

        old_pid = pg.postmaster().pid  # type: ignore[union-attr]
        pg.kill()
        assert not pg.is_running()
        pg.start()
        assert pg.postmaster().pid != old_pid  # type: ignore[union-attr]
        # A crash and a restart take time in which the service's event loop reads the closed
        # sockets (the pool then replaces those connections at checkout, app/db.py); kill and
        # start here run back to back on the loop's own thread, so give it that moment.
        await asyncio.sleep(0.1)

        listed = await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
        assert listed.status_code == 200, listed.text
        assert [m["content"] for m in listed.json()["items"]] == contents
        conversation = await client.get(f"/v1/conversations/{cid}", headers=headers(user_id))
        assert conversation.json()["title"] == "kept"
        # And it takes writes again.
        await add_messages(client, user_id, ["after the crash"], conversation=cid)


async def test_query_memory_fails_closed_while_postgres_down(
    make_client: Callable[..., Any], restore_pg: EmbeddedPostgres, user_id: str
) -> None:
    pg = restore_pg
    async with make_client() as (client, _):
        await add_messages(client, user_id, ["My favourite editor is Helix"])
        pg.stop()
        try:
            response = await client.post(
                "/v1/tools/query_memory",
                json={"query": "which editor do I like?"},
                headers=headers(user_id),
            )
        finally:
            pg.start()
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["memories"] == []
        assert body["metadata"]["count"] == 0
        assert body["metadata"]["error"]

        # Back up: the same query finds the memory.
        again = await client.post(
            "/v1/tools/query_memory",
            json={"query": "what is my favourite editor?"},
            headers=headers(user_id),
        )
        assert again.status_code == 200
        assert again.json()["metadata"]["error"] is None
        assert [m["content"] for m in again.json()["memories"]] == ["My favourite editor is Helix"]


async def test_connections_the_server_closed_are_replaced_before_use(
    make_client: Callable[..., Any], pg: EmbeddedPostgres, user_id: str
) -> None:
    """No pre-ping round trip (app/db.py): a pooled connection whose backend was terminated is
    replaced at checkout, so the next query answers normally instead of failing closed."""
    async with make_client() as (client, app):
        await add_messages(client, user_id, ["My favourite editor is Helix"])
        # Distinct questions: a repeated one would come from the answer cache, not Postgres.
        for question in ("which editor do I like?", "my favourite editor?"):
            first = await client.post(
                "/v1/tools/query_memory", json={"query": question}, headers=headers(user_id)
            )
            assert first.json()["metadata"]["error"] is None
        pool = app.state.resources.engine.sync_engine.pool
        assert pool.checkedin() >= 1
        owner = create_async_engine(pg.url)
        try:
            async with owner.connect() as conn:
                pids = await conn.scalars(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgrecall' "
                        "AND pid <> pg_backend_pid()"
                    )
                )
                ended = 0
                for pid in list(pids):
                    ended += bool(
                        await conn.scalar(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                    )
        finally:
            await owner.dispose()
        assert ended >= 1
        await asyncio.sleep(0.2)  # the event loop reads the servers' goodbyes
        again = await client.post(
            "/v1/tools/query_memory",
            json={"query": "what is my favourite editor?"},
            headers=headers(user_id),
        )
        assert again.status_code == 200
        assert again.json()["metadata"]["error"] is None
        assert [m["content"] for m in again.json()["memories"]] == ["My favourite editor is Helix"]
