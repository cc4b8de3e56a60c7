"""GDPR purge: every row and Redis key of one user gone, everyone else untouched."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache, CacheUnavailableError
from app.adapters.embedder import LocalEmbedder
from app.services.purge import count_user_rows, purge_user
from tests.helpers import add_messages, headers
from tests.redis_server import RedisServer

Sessions = async_sessionmaker[AsyncSession]
TABLES = (
    "conversations",
    "messages",
    "memory_items",
    "search_postings",
    "search_stats",
    "extraction_jobs",
    "extraction_usage",
    "message_passages",
    "space_members",
)


async def _populate(client: httpx.AsyncClient, user: str) -> list[str]:
    """Two conversations with messages, memories, a read grant on a shared space of its own, a
    cached session, a rate-limit counter and a cached query result; returns every text the user
    had embedded."""
    texts: list[str] = []
    for n in range(2):
        turns = [
            f"{user} turn {n}.{i}: planning the trip to Kyoto in April with the whole family. "
            "We want to see the old temples first, before the crowds arrive."
            for i in range(3)
        ]
        messages = await add_messages(client, user, turns)
        texts += turns
        cid = messages[0]["conversation_id"]
        assert (
            await client.get(f"/v1/conversations/{cid}/session", headers=headers(user))
        ).status_code == 200
    memories = [f"{user} prefers window seats on long flights", f"{user} is allergic to peanuts"]
    r = await client.post(
        "/v1/admin/memories:bulk",
        json={"items": [{"user_id": user, "content": c, "type": "fact"} for c in memories]},
    )
    assert r.status_code == 201, r.text
    texts += memories
    space = f"purge-{user[-12:]}"
    assert (await client.post("/v1/admin/spaces", json={"id": space})).status_code == 201
    grant = await client.put(f"/v1/admin/spaces/{space}/members/{user}", json={"access": "read"})
    assert grant.status_code == 200, grant.text
    q = await client.post(
        "/v1/tools/query_memory", json={"query": "seat preference"}, headers=headers(user)
    )
    assert q.status_code == 200
    return texts


async def _rows(sessions: Sessions, user: str) -> dict[str, int]:
    async with sessions() as s:
        return {
            t: int(
                await s.scalar(text(f"SELECT count(*) FROM {t} WHERE user_id = :u"), {"u": user})
            )
            for t in TABLES
        }


async def _user_keys(cache: Cache, user: str) -> set[bytes]:
    assert cache._redis is not None
    return {k async for k in cache._redis.scan_iter(match=f"*{user}*")}


async def _embedding_keys(cache: Cache, texts: list[str]) -> int:
    assert cache._redis is not None
    return int(
        await cache._redis.exists(*[Cache.embedding_key(LocalEmbedder.model, t) for t in texts])
    )


async def test_purge_user_removes_every_row_and_key_of_that_user_only(
    make_client: Callable[..., Any],
    shared_sessions: Sessions,
    cache: Cache,
    user_id: str,
    other_user_id: str,
) -> None:
    async with make_client(rate_limit_per_minute=100) as (client, _):
        texts = await _populate(client, user_id)
        other_texts = await _populate(client, other_user_id)

    before = await _rows(shared_sessions, user_id)
    assert before == {
        "conversations": 2,
        "messages": 6,
        "memory_items": 2,
        "search_postings": before["search_postings"],
        "search_stats": 1,
        "extraction_jobs": 0,  # extraction is off here: tests/extraction covers its purge
        "extraction_usage": 0,
        "message_passages": 12,  # two sentences per turn; their texts are never cached
        "space_members": 1,  # the user's grant; the space itself is not the user's
    }
    assert before["search_postings"] > 0
    keys = await _user_keys(cache, user_id)
    kinds = {k.split(b":")[0] for k in keys}
    assert {b"session", b"rate_limit", b"query_cache", b"query_gen"} <= kinds, keys
    assert await _embedding_keys(cache, texts) == len(texts)
    other_rows = await _rows(shared_sessions, other_user_id)
    other_keys = await _user_keys(cache, other_user_id)
    assert await count_user_rows(shared_sessions, user_id) == before

    report = await purge_user(shared_sessions, cache, user_id)

    assert report.rows == before
    assert report.redis_keys >= len(keys) and report.cached_embeddings == len(texts)
    assert await _rows(shared_sessions, user_id) == dict.fromkeys(TABLES, 0)
    async with shared_sessions() as s:  # the space stays, without the user
        space = f"purge-{user_id[-12:]}"
        assert await s.scalar(text("SELECT count(*) FROM spaces WHERE id = :s"), {"s": space}) == 1
    assert await _user_keys(cache, user_id) == set()
    assert await _embedding_keys(cache, texts) == 0
    # The other user is intact, rows and keys.
    assert await _rows(shared_sessions, other_user_id) == other_rows
    assert await _user_keys(cache, other_user_id) == other_keys
    assert await _embedding_keys(cache, other_texts) == len(other_texts)
    # A second purge finds nothing and succeeds.
    again = await purge_user(shared_sessions, cache, user_id)
    assert sum(again.rows.values()) == 0


async def test_purge_aborts_with_nothing_deleted_when_redis_is_down(
    make_client: Callable[..., Any], shared_sessions: Sessions, user_id: str
) -> None:
    async with make_client() as (client, _):
        await _populate(client, user_id)
    before = await _rows(shared_sessions, user_id)
    directory = Path(tempfile.mkdtemp(prefix="pgr-redis-"))
    server = RedisServer(directory)  # never started: its socket does not exist
    down = Cache.from_url(server.url)
    try:
        with pytest.raises(CacheUnavailableError):
            await purge_user(shared_sessions, down, user_id)
    finally:
        await down.aclose()
    assert await _rows(shared_sessions, user_id) == before


async def test_purge_without_redis_configured_deletes_rows(
    make_client: Callable[..., Any], shared_sessions: Sessions, user_id: str
) -> None:
    async with make_client() as (client, _):
        await add_messages(client, user_id, ["a single message to purge"])
    report = await purge_user(shared_sessions, Cache.from_url(None), user_id)
    assert report.rows["messages"] == 1 and report.redis_keys == 0
    assert await _rows(shared_sessions, user_id) == dict.fromkeys(TABLES, 0)
