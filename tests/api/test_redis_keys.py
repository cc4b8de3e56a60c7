"""Redis state after real requests: keys, TTLs and values as the spec names them."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from app.db import user_session
from app.embedding_models import DEFAULT_MODEL_ID
from tests.helpers import add_messages, as_stored, headers, new_conversation


@pytest.fixture
async def redis(redis_srv):
    client = Redis.from_url(redis_srv.url)
    try:
        yield client
    finally:
        await client.aclose()


async def test_message_write_caches_its_embedding_for_seven_days(make_client, redis, user_id):
    content = f"My sister Ines moved to Porto last spring ({user_id})"
    async with make_client() as (client, app):
        await add_messages(client, user_id, [content])
        digest = hashlib.sha256(f"{DEFAULT_MODEL_ID}:{content}".encode()).hexdigest()
        key = f"embedding_cache:{digest}"
        raw = await redis.get(key)
        assert raw is not None and len(raw) == 384 * 4
        assert 7 * 86400 - 60 <= await redis.ttl(key) <= 7 * 86400
        async with user_session(app.state.resources.sessionmaker, user_id) as session:
            stored = await session.scalar(
                text("SELECT embedding::text FROM messages WHERE user_id = :u"), {"u": user_id}
            )
        cached = np.frombuffer(raw, dtype=np.float32)
        # The store keeps half precision (app/vectors.py); the cache the embedder's float32.
        np.testing.assert_array_equal(
            as_stored(cached), np.array(json.loads(stored), dtype=np.float32)
        )


async def test_session_hash_holds_the_last_messages_for_a_day(make_client, redis, user_id):
    async with make_client(session_messages=3) as (client, _):
        cid = await new_conversation(client, user_id)
        await add_messages(client, user_id, [f"turn {i}" for i in range(5)], conversation=cid)
        key = f"session:{user_id}:{cid}"
        assert await redis.type(key) == b"hash"
        messages = json.loads(await redis.hget(key, "messages"))
        assert [m["content"] for m in messages] == ["turn 2", "turn 3", "turn 4"]
        assert 86400 - 60 <= await redis.ttl(key) <= 86400


async def test_rate_limit_counter_has_a_sixty_second_window(make_client, redis, user_id):
    async with make_client(rate_limit_per_minute=5) as (client, _):
        for _ in range(3):
            r = await client.post(
                "/v1/tools/query_memory", json={"query": "anything"}, headers=headers(user_id)
            )
            assert r.status_code == 200
        assert await redis.get(f"rate_limit:{user_id}") == b"3"
        assert 0 < await redis.ttl(f"rate_limit:{user_id}") <= 60


async def test_query_cache_is_invalidated_by_a_new_message(make_client, redis, user_id):
    async with make_client() as (client, _):
        await add_messages(client, user_id, ["I keep bees on the roof of the garage"])
        body = {"query": "beekeeping hobby"}
        first = await client.post("/v1/tools/query_memory", json=body, headers=headers(user_id))
        keys = [k async for k in redis.scan_iter(match=f"query_cache:{user_id}:*")]
        assert len(keys) == 1
        assert 0 < await redis.ttl(keys[0]) <= 60
        await add_messages(client, user_id, ["The bees produced twelve jars of honey this year"])
        second = await client.post("/v1/tools/query_memory", json=body, headers=headers(user_id))
        before = {m["content"] for m in first.json()["memories"]}
        after = {m["content"] for m in second.json()["memories"]}
        assert "The bees produced twelve jars of honey this year" in after - before
