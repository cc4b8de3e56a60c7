"""The session cache never serves a history with a gap (issue 10, finding 4).

Redis paused (SIGSTOP) while a message is appended: the 201 stands (Postgres has it), the cache
write fails, and every later read must still show that message, also after further appends.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from tests.helpers import add_messages, headers, new_conversation
from tests.servers import temporary_redis


async def _session(client: Any, user: str, cid: str) -> dict[str, Any]:
    response = await client.get(f"/v1/conversations/{cid}/session", headers=headers(user))
    assert response.status_code == 200, response.text
    return dict(response.json())


def _contents(state: dict[str, Any]) -> list[str]:
    return [m["content"] for m in state["messages"]]


async def test_append_while_redis_is_paused_leaves_no_gap(
    make_client: Callable[..., Any], user_id: str
) -> None:
    with temporary_redis() as redis_server:
        async with make_client(redis_url=redis_server.url) as (client, _):
            cid = await new_conversation(client, user_id)
            await add_messages(client, user_id, ["first"], conversation=cid)
            assert (await _session(client, user_id, cid))["source"] == "cache"

            redis_server.pause()
            try:
                await add_messages(client, user_id, ["second, while Redis is frozen"], cid)
            finally:
                redis_server.resume()
            await asyncio.sleep(1.1)  # the circuit breaker retries Redis after 1 s

            state = await _session(client, user_id, cid)
            assert _contents(state) == ["first", "second, while Redis is frozen"]
            await add_messages(client, user_id, ["third"], conversation=cid)
            state = await _session(client, user_id, cid)
            assert _contents(state) == ["first", "second, while Redis is frozen", "third"]
            assert state["source"] == "cache"  # rebuilt once, then served from Redis again


async def test_a_cached_copy_missing_a_message_is_not_extended(
    client: Any, redis_srv: Any, user_id: str
) -> None:
    cid = await new_conversation(client, user_id)
    await add_messages(client, user_id, ["one", "two"], conversation=cid)
    await _session(client, user_id, cid)
    # Simulate a lost cache write: drop the newest message from the cached copy by hand.
    redis = Redis.from_url(redis_srv.url)
    try:
        key = f"session:{user_id}:{cid}"
        raw = await redis.hget(key, "messages")
        messages = json.loads(raw)
        await redis.hset(key, "messages", json.dumps(messages[:-1]))
        await add_messages(client, user_id, ["three"], conversation=cid)
        assert await redis.exists(key) == 0  # dropped instead of extended with a gap
    finally:
        await redis.aclose()
    state = await _session(client, user_id, cid)
    assert _contents(state) == ["one", "two", "three"]
    assert state["source"] == "database"
