"""A query's Redis round trips (Cache.admit_query): one before the database (rate limit, cached
answer, cached query vector), then the two writes of what it computed; a repeated query is
answered from the first one alone."""

from __future__ import annotations

from typing import Any

import pytest

from app.adapters.cache import Cache
from tests.helpers import add_messages, headers


async def test_a_query_makes_one_redis_round_trip_before_the_database(
    make_client: Any, monkeypatch: pytest.MonkeyPatch, user_id: str
) -> None:
    calls: list[str] = []
    guarded = Cache._guarded

    async def counted(self: Cache, op: str, *a: Any, **kw: Any) -> Any:
        calls.append(op)
        return await guarded(self, op, *a, **kw)

    monkeypatch.setattr(Cache, "_guarded", counted)
    async with make_client(rate_limit_per_minute=100) as (client, _):
        await add_messages(client, user_id, ["The spare key hangs behind the garden shed door"])
        body = {"query": "Where is the spare key kept?", "min_score": 0.0}
        calls.clear()
        first = await client.post("/v1/memory/query", json=body, headers=headers(user_id))
        assert first.status_code == 200, first.text
        # Looked up once; then the vector the embedder made and the answer are stored.
        assert calls == ["admit_query", "set_embeddings", "set_query_result"]
        calls.clear()
        again = await client.post("/v1/memory/query", json=body, headers=headers(user_id))
        assert again.status_code == 200, again.text
        assert calls == ["admit_query"]
    assert again.json()["items"] == first.json()["items"]
