"""Recency as a per-request ranking option (issue 28 item 2, the blend of issue 29), through
every door against the real stack: /v1/memory/query, the HTTP tool, MCP and the chat proxy's
`memory` object. score = (1 - w) x relevance + w x exp(-age_days / 30)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.helpers import headers
from tests.proxy.upstream_server import Answer, Upstream

# OLD says it in the question's words; NEW is the later statement in other words.
OLD = "The user's favourite colour is blue"
NEW = "These days the user prefers green for everything they paint"
QUESTION = "what is my favourite colour?"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


async def store_old_and_new(client: httpx.AsyncClient, user: str) -> tuple[str, str]:
    ids = []
    for content, age in ((OLD, timedelta(days=400)), (NEW, timedelta(days=1))):
        created = (datetime.now(UTC) - age).isoformat()
        response = await client.post(
            "/v1/admin/memories",
            json={"user_id": user, "content": content, "type": "fact", "created_at": created},
        )
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])
    return ids[0], ids[1]


async def _ranked(client: httpx.AsyncClient, user: str, **extra: Any) -> list[tuple[str, float]]:
    body = {"query": QUESTION, "min_score": 0.0, "sources": ["memory"], **extra}
    response = await client.post("/v1/memory/query", json=body, headers=headers(user))
    assert response.status_code == 200, response.text
    return [(i["id"], i["relevance_score"]) for i in response.json()["items"]]


async def test_recency_reorders_and_rescores_through_http(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(min_relevance=0.0) as (client, _):
        old, new = await store_old_and_new(client, user_id)
        default = await _ranked(client, user_id)
        assert [i for i, _ in default] == [old, new]  # relevance alone: the words match OLD
        assert await _ranked(client, user_id, recency=0.0) == default  # the default is 0
        recent = await _ranked(client, user_id, recency=0.9)
        assert [i for i, _ in recent] == [new, old]
        scores = dict(recent)
        relevance = dict(default)
        # 400 days old: exp(-400/30) ~ 0, so OLD keeps about a tenth of its relevance.
        assert scores[old] == pytest.approx(0.1 * relevance[old], abs=0.002)
        assert scores[new] == pytest.approx(
            0.1 * relevance[new] + 0.9 * 2.718281828 ** (-1 / 30), abs=0.01
        )
        tool = await client.post(
            "/v1/tools/query_memory",
            json={"query": QUESTION, "sources": ["memory"], "recency": 0.9},
            headers=headers(user_id),
        )
        assert [m["id"] for m in tool.json()["memories"]] == [new, old]
        plain = await client.post(
            "/v1/tools/query_memory",
            json={"query": QUESTION, "sources": ["memory"]},
            headers=headers(user_id),
        )
        assert [m["id"] for m in plain.json()["memories"]] == [old, new]
        for bad in (-0.1, 1.5, "0.5", True):
            response = await client.post(
                "/v1/tools/query_memory",
                json={"query": QUESTION, "recency": bad},
                headers=headers(user_id),
            )
            assert response.status_code == 422 and "recency" in response.text, bad


async def test_recency_in_the_proxys_memory_object(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    upstream.answers.extend([Answer(text="Blue."), Answer(text="Green.")])
    async with make_client(chat_upstream_url=upstream.base, min_relevance=0.0) as (client, _):
        old, new = await store_old_and_new(client, user_id)
        ask = {"model": "m", "messages": [{"role": "user", "content": QUESTION}]}
        # The proxy also stores each turn (new messages, which recency favours too): compare
        # where the two memories come among what it injected.
        for memory, first, second in (({}, old, new), ({"recency": 0.9}, new, old)):
            response = await client.post(
                "/v1/chat/completions",
                json={**ask, "memory": memory},
                headers=headers(user_id),
            )
            assert response.status_code == 200, response.text
            ids = response.headers["x-pgrecall-memory-ids"].split(",")
            assert ids.index(first) < ids.index(second), (memory, ids)
        bad = await client.post(
            "/v1/chat/completions",
            json={**ask, "memory": {"recency": 2}},
            headers=headers(user_id),
        )
        assert bad.status_code == 422
        assert bad.json()["fields"][0]["field"] == "body.memory.recency"
