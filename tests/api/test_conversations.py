"""Conversation API success paths against the real Postgres, Redis and embedder."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import numpy as np
import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.adapters.embedder import LocalEmbedder
from app.embedding_models import DEFAULT_MODEL_ID
from app.services.conversation import GATED_WRITE_CHARS
from tests.helpers import add_messages, headers, new_conversation
from tests.redis_server import RedisServer


@pytest.fixture
async def redis(redis_srv: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_srv.url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_health_and_ready(client: httpx.AsyncClient) -> None:
    assert (await client.get("/health")).json() == {"status": "ok"}
    ready = await client.get("/ready")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["ready"] is True
    assert body["checks"]["migrations"]["current"] == body["checks"]["migrations"]["head"]
    assert body["checks"]["redis"] == "ok"


async def test_openapi_docs_served(client: httpx.AsyncClient) -> None:
    assert (await client.get("/docs")).status_code == 200
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert "/v1/conversations/{conversation_id}/messages" in paths


async def test_create_and_get_conversation(client: httpx.AsyncClient, user_id: str) -> None:
    created = await client.post(
        "/v1/conversations", json={"title": "Trip planning"}, headers=headers(user_id)
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["title"] == "Trip planning"
    uuid.UUID(body["id"])
    assert created.headers["location"] == f"/v1/conversations/{body['id']}"
    fetched = await client.get(created.headers["location"], headers=headers(user_id))
    assert fetched.status_code == 200
    assert fetched.json() == body


async def test_create_conversation_without_title(client: httpx.AsyncClient, user_id: str) -> None:
    created = await client.post("/v1/conversations", json={}, headers=headers(user_id))
    assert created.status_code == 201, created.text
    assert created.json()["title"] is None


async def test_list_newest_first_and_paginated(client: httpx.AsyncClient, user_id: str) -> None:
    ids = [await new_conversation(client, user_id, f"c{i}") for i in range(3)]
    listed = await client.get("/v1/conversations", headers=headers(user_id))
    assert listed.status_code == 200
    assert [c["id"] for c in listed.json()["items"]] == ids[::-1]
    assert listed.json()["next_offset"] is None

    # Appending to the oldest conversation makes it the most recently updated.
    await add_messages(client, user_id, ["bump"], conversation=ids[0])
    first = (await client.get("/v1/conversations?limit=2", headers=headers(user_id))).json()
    assert [c["id"] for c in first["items"]] == [ids[0], ids[2]]
    assert first["next_offset"] == 2
    second = await client.get(
        f"/v1/conversations?limit=2&offset={first['next_offset']}", headers=headers(user_id)
    )
    assert [c["id"] for c in second.json()["items"]] == [ids[1]]
    assert second.json()["next_offset"] is None


async def test_list_shows_only_own_conversations(
    client: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    mine = await new_conversation(client, user_id)
    await new_conversation(client, other_user_id)
    listed = (await client.get("/v1/conversations", headers=headers(user_id))).json()
    assert [c["id"] for c in listed["items"]] == [mine]


async def test_post_message_stores_embedding_and_correlation(
    client: httpx.AsyncClient, user_id: str, db_engine: AsyncEngine, embedder: LocalEmbedder
) -> None:
    cid = await new_conversation(client, user_id)
    correlation = str(uuid.uuid4())
    content = f"I moved to Lisbon last spring {uuid.uuid4()}"
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": content},
        headers=headers(user_id, **{"X-Correlation-ID": correlation}),
    )
    assert response.status_code == 201, response.text
    assert response.headers["x-correlation-id"] == correlation
    message = response.json()
    assert message["correlation_id"] == correlation
    assert message["conversation_id"] == cid
    assert (message["role"], message["content"]) == ("user", content)
    assert message["metadata"] == {}

    async with db_engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT user_id, embedding::text AS emb, embedding_model, correlation_id"
                    " FROM messages WHERE id = :id"
                ),
                {"id": uuid.UUID(message["id"])},
            )
        ).one()
    assert row.user_id == user_id
    assert row.embedding_model == DEFAULT_MODEL_ID
    assert str(row.correlation_id) == correlation
    stored = np.array([float(v) for v in row.emb.strip("[]").split(",")], dtype=np.float32)
    assert stored.shape == (384,)
    expected = (await embedder.embed([content]))[0]
    assert float(stored @ expected) > 0.9999  # the embedding of this very content


async def test_correlation_id_generated_when_absent(
    client: httpx.AsyncClient, user_id: str, db_engine: AsyncEngine
) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "assistant", "content": "Noted."},
        headers=headers(user_id),
    )
    assert response.status_code == 201, response.text
    generated = response.headers["x-correlation-id"]
    assert uuid.UUID(generated).version == 4
    assert response.json()["correlation_id"] == generated
    async with db_engine.connect() as conn:
        stored = await conn.scalar(
            text("SELECT correlation_id FROM messages WHERE id = :id"),
            {"id": uuid.UUID(response.json()["id"])},
        )
    assert str(stored) == generated


async def test_message_metadata_round_trip(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "system", "content": "Be brief.", "metadata": {"source": "import", "n": 3}},
        headers=headers(user_id),
    )
    assert response.status_code == 201, response.text
    listed = (
        await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
    ).json()
    assert listed["items"][0]["metadata"] == {"source": "import", "n": 3}


async def test_bulk_append_keeps_order(client: httpx.AsyncClient, user_id: str) -> None:
    contents = [f"turn {i}: {word}" for i, word in enumerate(["alpha", "beta", "gamma", "delta"])]
    cid = await new_conversation(client, user_id)
    items = await add_messages(client, user_id, contents, conversation=cid)
    assert [m["content"] for m in items] == contents
    seqs = [m["seq"] for m in items]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # A second batch continues after the first.
    more = await add_messages(client, user_id, ["epsilon"], conversation=cid)
    assert more[0]["seq"] > seqs[-1]
    listed = (
        await client.get(f"/v1/conversations/{cid}/messages", headers=headers(user_id))
    ).json()
    assert [m["content"] for m in listed["items"]] == [*contents, "epsilon"]


async def test_bulk_append_1000_accepted_1001_rejected(
    client: httpx.AsyncClient, user_id: str, db_engine: AsyncEngine
) -> None:
    cid = await new_conversation(client, user_id)
    too_many = {"messages": [{"role": "user", "content": f"m{i}"} for i in range(1001)]}
    rejected = await client.post(
        f"/v1/conversations/{cid}/messages:bulk", json=too_many, headers=headers(user_id)
    )
    assert rejected.status_code == 422
    assert "body.messages" in rejected.json()["detail"]

    # 1000 short turns, so the real embedder stays quick on two cores.
    contents = [f"m{i}" for i in range(1000)]
    items = await add_messages(client, user_id, contents, conversation=cid)
    assert [m["content"] for m in items] == contents
    assert all(a["seq"] < b["seq"] for a, b in itertools.pairwise(items))
    async with db_engine.connect() as conn:
        count = await conn.scalar(
            text(
                "SELECT count(*) FROM messages WHERE conversation_id = :cid"
                " AND embedding IS NOT NULL AND embedding_model IS NOT NULL"
            ),
            {"cid": uuid.UUID(cid)},
        )
    assert count == 1000


async def test_messages_paginated_with_after_cursor(
    client: httpx.AsyncClient, user_id: str
) -> None:
    contents = [f"page turn {i}" for i in range(5)]
    cid = await new_conversation(client, user_id)
    await add_messages(client, user_id, contents, conversation=cid)
    seen: list[str] = []
    after: int | None = None
    pages = 0
    while True:
        query = "limit=2" + (f"&after={after}" if after is not None else "")
        page = await client.get(
            f"/v1/conversations/{cid}/messages?{query}", headers=headers(user_id)
        )
        assert page.status_code == 200, page.text
        body = page.json()
        pages += 1
        seen += [m["content"] for m in body["items"]]
        if body["next_after"] is None:
            break
        assert body["next_after"] == body["items"][-1]["seq"]
        after = body["next_after"]
    assert seen == contents
    assert pages == 3


async def test_created_at_override_for_imports(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    when = datetime(2023, 5, 8, 13, 56, tzinfo=timezone(timedelta(hours=2)))
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={
            "messages": [
                {"role": "user", "content": "old turn", "created_at": when.isoformat()},
                {"role": "assistant", "content": "new turn"},
            ]
        },
        headers=headers(user_id),
    )
    assert response.status_code == 201, response.text
    old, new = response.json()["items"]
    assert datetime.fromisoformat(old["created_at"]) == when
    assert datetime.fromisoformat(new["created_at"]) > datetime.now(UTC) - timedelta(minutes=5)
    assert old["seq"] < new["seq"]


async def test_naive_created_at_rejected(client: httpx.AsyncClient, user_id: str) -> None:
    cid = await new_conversation(client, user_id)
    response = await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"role": "user", "content": "x", "created_at": "2023-05-08T13:56:00"},
        headers=headers(user_id),
    )
    assert response.status_code == 422
    assert "body.created_at" in response.json()["detail"]


async def test_session_from_cache_then_rebuilt_from_database(
    client: httpx.AsyncClient, user_id: str, redis: Redis
) -> None:
    cid = await new_conversation(client, user_id)
    await add_messages(client, user_id, ["first question", "first answer"], conversation=cid)
    url = f"/v1/conversations/{cid}/session"
    cached = await client.get(url, headers=headers(user_id))
    assert cached.status_code == 200, cached.text
    assert cached.json()["source"] == "cache"
    assert [m["content"] for m in cached.json()["messages"]] == ["first question", "first answer"]

    assert await redis.delete(f"session:{user_id}:{cid}") == 1
    rebuilt = await client.get(url, headers=headers(user_id))
    assert rebuilt.json()["source"] == "database"
    assert [m["content"] for m in rebuilt.json()["messages"]] == ["first question", "first answer"]
    again = await client.get(url, headers=headers(user_id))
    assert again.json()["source"] == "cache"
    assert again.json()["messages"] == rebuilt.json()["messages"]


async def test_session_keeps_last_n_messages(make_client, user_id: str) -> None:  # type: ignore[no-untyped-def]
    async with make_client(session_messages=3) as (client, _):
        cid = await new_conversation(client, user_id)
        await add_messages(client, user_id, [f"s{i}" for i in range(5)], conversation=cid)
        session = (
            await client.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))
        ).json()
        assert [m["content"] for m in session["messages"]] == ["s2", "s3", "s4"]


async def test_session_after_cache_loss_is_complete(
    client: httpx.AsyncClient, user_id: str, redis: Redis
) -> None:
    """A cached session lost (TTL, eviction) and then appended to must not claim a partial list."""
    cid = await new_conversation(client, user_id)
    await add_messages(client, user_id, ["one", "two"], conversation=cid)
    await redis.delete(f"session:{user_id}:{cid}")
    await add_messages(client, user_id, ["three"], conversation=cid)
    session = (
        await client.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))
    ).json()
    assert [m["content"] for m in session["messages"]] == ["one", "two", "three"]


async def test_bulk_imports_write_one_at_a_time_and_others_go_on(
    make_client: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    """An import waits for the bulk write gate (held here as another import would hold it)
    after embedding; single appends and queries meanwhile are not held up, and the import is
    stored once the gate is free."""
    async with make_client() as (client, app):
        gate = app.state.resources.bulk_writes
        cid = await new_conversation(client, user_id)
        other = await new_conversation(client, other_user_id)
        line = "an imported line of a long conversation history " * 50  # 2,450 characters
        size = GATED_WRITE_CHARS // len(line) + 1
        body = {"messages": [{"role": "user", "content": f"{i} {line}"} for i in range(size)]}
        await gate.acquire()
        try:
            url = f"/v1/conversations/{cid}/messages:bulk"
            importing = asyncio.create_task(client.post(url, json=body, headers=headers(user_id)))
            await asyncio.sleep(3.0)  # ample time to embed the lines and reach the gate
            assert not importing.done()
            # Another user's small batch (under GATED_WRITE_CHARS) does not wait for the gate.
            small = ["I water the ferns on Sundays"]
            await asyncio.wait_for(add_messages(client, other_user_id, small, other), 10)
            asked = await client.post(
                "/v1/tools/query_memory",
                json={"query": "when do I water the ferns?"},
                headers=headers(other_user_id),
            )
            assert asked.status_code == 200 and asked.json()["memories"]
            await asyncio.sleep(5.0)  # the import's embedding is long done: it waits to write
            assert not importing.done()
        finally:
            gate.release()
        response = await asyncio.wait_for(importing, 30)
        assert response.status_code == 201, response.text
        assert len(response.json()["items"]) == size
