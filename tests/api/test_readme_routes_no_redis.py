"""`make serve` with no Redis (the embedded defaults): every route of README's table answers
2xx for valid input. Redis only makes things faster; nothing needs it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.helpers import headers, make_key
from tests.proxy.upstream_server import Answer, Upstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


def ok(response: Any) -> Any:
    assert 200 <= response.status_code < 300, (response.request.url, response.text)
    if not response.headers.get("content-type", "").startswith("application/json"):
        return response.text  # JSON Lines (export), HTML, empty
    return response.json()


async def test_every_readme_route_without_redis(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str
) -> None:
    h = headers(user_id)
    async with make_client(redis_url=None, chat_upstream_url=upstream.base) as (c, app):
        ok(await c.get("/health"))
        ok(await c.get("/ready"))
        ok(await c.get("/v1/tools", headers=h))

        cid = ok(await c.post("/v1/conversations", json={"title": "t"}, headers=h))["id"]
        ok(await c.get("/v1/conversations", headers=h))
        ok(await c.get(f"/v1/conversations/{cid}", headers=h))
        one = {"role": "user", "content": "I moved to Porto in May."}
        ok(await c.post(f"/v1/conversations/{cid}/messages", json=one, headers=h))
        bulk = {"messages": [{"role": "assistant", "content": "Noted."}] * 2}
        ok(await c.post(f"/v1/conversations/{cid}/messages:bulk", json=bulk, headers=h))
        page = ok(await c.get(f"/v1/conversations/{cid}/messages", headers=h))
        message_id = page["items"][0]["id"]
        session = ok(await c.get(f"/v1/conversations/{cid}/session", headers=h))
        assert len(session["messages"]) == 3
        goal = ok(await c.put(f"/v1/conversations/{cid}/session", json={"goal": "move"}, headers=h))
        assert goal["goal"] == "move"
        assert ok(await c.get(f"/v1/conversations/{cid}/session", headers=h))["goal"] == "move"

        saved = ok(
            await c.post(
                "/v1/tools/save_memory",
                json={"content": "Lives in Porto", "type": "fact"},
                headers=h,
            )
        )
        memory_id = saved["memory"]["id"]
        answer = ok(
            await c.post(
                "/v1/tools/query_memory", json={"query": "Which city do I live in?"}, headers=h
            )
        )
        assert answer["memories"], answer
        ok(await c.post("/v1/memory/query", json={"query": "where do I live?"}, headers=h))
        vote = {"message_id": message_id, "vote": "up"}
        ok(await c.post("/v1/tools/rate_message", json=vote, headers=h))
        ok(await c.get(f"/v1/memories/{memory_id}/history", headers=h))
        ok(await c.post("/v1/tools/forget_memory", json={"id": memory_id}, headers=h))

        address = {"namespace": ["memories", "fact"], "key": "city"}
        put = {**address, "value": {"content": "Porto"}, "ttl": 60}
        ok(await c.put("/v1/store/items", json=put, headers=h))
        ok(await c.post("/v1/store/items:get", json=address, headers=h))
        ok(await c.post("/v1/store/items:search", json={"query": "city"}, headers=h))
        ok(await c.post("/v1/store/namespaces", json={}, headers=h))
        ok(await c.post("/v1/store/ttl:sweep", headers=h))
        ok(await c.post("/v1/store/items:delete", json=address, headers=h))

        ok(await c.delete(f"/v1/conversations/{cid}/messages/last", headers=h))
        ok(await c.delete(f"/v1/conversations/{cid}/messages", headers=h))
        ok(await c.get("/v1/export", headers=h))

        admin = "/v1/admin/memories"
        created = ok(
            await c.post(admin, json={"user_id": user_id, "content": "Has a cat", "type": "fact"})
        )
        item = created["id"]
        ok(await c.get(admin, params={"user_id": user_id}))
        edited = ok(
            await c.patch(f"{admin}/{item}", params={"user_id": user_id}, json={"importance": 0.9})
        )
        item = edited["id"]
        ok(await c.get(f"{admin}/{item}/history", params={"user_id": user_id}))
        ok(await c.delete(f"{admin}/{item}", params={"user_id": user_id}))
        ok(await c.post(f"{admin}/{item}/restore", params={"user_id": user_id}))
        key = ok(await c.post("/v1/admin/keys", json={"user_id": user_id}))
        ok(await c.get("/v1/admin/keys", params={"user_id": user_id}))
        ok(await c.post(f"/v1/admin/keys/{key['key']['id']}/revoke"))
        space = f"s-{user_id[-8:]}"
        ok(await c.post("/v1/admin/spaces", json={"id": space}))
        ok(await c.get("/v1/admin/spaces"))
        member = f"/v1/admin/spaces/{space}/members/{user_id}"
        ok(await c.put(member, json={"access": "write"}))
        ok(await c.get(f"/v1/admin/spaces/{space}/members"))
        ok(await c.get("/v1/spaces", headers=h))
        note = {"content": "The team meets on Mondays", "type": "fact"}
        ok(await c.post(f"/v1/spaces/{space}/memories", json=note, headers=h))
        ok(await c.delete(member))
        ok(await c.delete(f"/v1/admin/spaces/{space}"))
        login = await c.get("/console/login")
        assert login.status_code == 200, login.text

        upstream.answers.append(Answer(text="You live in Porto."))
        chat = {"model": "m", "messages": [{"role": "user", "content": "Where do I live?"}]}
        reply = ok(await c.post("/v1/chat/completions", json=chat, headers=h))
        assert reply["choices"][0]["message"]["content"] == "You live in Porto."

        token = (await make_key(app, user_id)).token
        initialize = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "readme", "version": "1"},
            },
        }
        mcp = await c.post(
            "/mcp",
            content=json.dumps(initialize),
            headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )
        assert mcp.status_code == 200, mcp.text
