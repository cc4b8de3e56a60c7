"""Deleting messages of the caller's own conversation: the newest one (pop), or all of them.

What the Agents SDK session adapter needs (pop_item, clear_session). Postgres, the keyword
index, the Redis session copy and the cached query answers all follow the delete.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
from pydantic import SecretStr

from tests.helpers import add_messages, headers, make_key, new_conversation


def _path(cid: str, suffix: str = "") -> str:
    return f"/v1/conversations/{cid}/messages{suffix}"


async def _contents(client: httpx.AsyncClient, user: str, cid: str) -> list[str]:
    response = await client.get(_path(cid), headers=headers(user))
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["items"]]


async def test_pop_returns_the_newest_message_until_none_is_left(
    client: httpx.AsyncClient, user_id: str
) -> None:
    cid = await new_conversation(client, user_id)
    stored = await add_messages(client, user_id, ["one", "two", "three"], conversation=cid)

    response = await client.delete(_path(cid, "/last"), headers=headers(user_id))
    assert response.status_code == 200, response.text
    assert response.json()["message"]["id"] == stored[2]["id"]
    assert response.json()["message"]["content"] == "three"
    assert await _contents(client, user_id, cid) == ["one", "two"]

    for expected in ("two", "one"):
        response = await client.delete(_path(cid, "/last"), headers=headers(user_id))
        assert response.json()["message"]["content"] == expected
    response = await client.delete(_path(cid, "/last"), headers=headers(user_id))
    assert response.status_code == 200
    assert response.json() == {"message": None}

    # The conversation goes on after a pop: the next append follows the remaining turns.
    await add_messages(client, user_id, ["four"], conversation=cid)
    assert await _contents(client, user_id, cid) == ["four"]


async def test_clear_deletes_every_message_and_keeps_the_conversation(
    client: httpx.AsyncClient, user_id: str
) -> None:
    cid = await new_conversation(client, user_id, "kept")
    await add_messages(client, user_id, ["a", "b", "c", "d"], conversation=cid)
    response = await client.delete(_path(cid), headers=headers(user_id))
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 4}
    assert await _contents(client, user_id, cid) == []
    conversation = await client.get(f"/v1/conversations/{cid}", headers=headers(user_id))
    assert conversation.json()["title"] == "kept"
    again = await client.delete(_path(cid), headers=headers(user_id))
    assert again.json() == {"deleted": 0}


async def test_another_users_conversation_is_404_and_untouched(
    client: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    cid = await new_conversation(client, user_id)
    await add_messages(client, user_id, ["mine", "also mine"], conversation=cid)
    for path in (_path(cid, "/last"), _path(cid)):
        response = await client.delete(path, headers=headers(other_user_id))
        assert response.status_code == 404, response.text
        assert response.json()["detail"] == "conversation not found"
    assert await _contents(client, user_id, cid) == ["mine", "also mine"]


async def test_a_read_key_cannot_delete(make_client: Callable[..., Any], user_id: str) -> None:
    async with make_client(api_key=SecretStr("service-key")) as (client, app):
        service = {"Authorization": "Bearer service-key"}
        cid = await new_conversation_as(client, user_id, service)
        read = await make_key(app, user_id, scope="read")
        bearer = {"Authorization": f"Bearer {read.token}"}
        for path in (_path(cid, "/last"), _path(cid)):
            response = await client.delete(path, headers=bearer)
            assert response.status_code == 403, response.text


async def new_conversation_as(client: httpx.AsyncClient, user: str, auth: dict[str, str]) -> str:
    response = await client.post("/v1/conversations", json={}, headers={**headers(user), **auth})
    assert response.status_code == 201, response.text
    cid = str(response.json()["id"])
    response = await client.post(
        _path(cid), json={"role": "user", "content": "hello"}, headers={**headers(user), **auth}
    )
    assert response.status_code == 201, response.text
    return cid


async def test_session_copy_and_cached_answers_follow_the_delete(
    client: httpx.AsyncClient, user_id: str
) -> None:
    cid = await new_conversation(client, user_id)
    await add_messages(
        client,
        user_id,
        ["We planned a trip to Reykjavik", "The zeppelin museum opens at nine"],
        conversation=cid,
    )
    goal = await client.put(
        f"/v1/conversations/{cid}/session", json={"goal": "plan"}, headers=headers(user_id)
    )
    assert goal.status_code == 200, goal.text
    query = {"query": "zeppelin museum", "min_score": 0.0}
    before = await client.post("/v1/memory/query", json=query, headers=headers(user_id))
    assert any("zeppelin" in i["content"] for i in before.json()["items"])

    await client.delete(_path(cid, "/last"), headers=headers(user_id))
    session = await client.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))
    state = session.json()
    assert [m["content"] for m in state["messages"]] == ["We planned a trip to Reykjavik"]
    assert state["goal"] == "plan"  # the goal survives a pop
    assert state["source"] == "cache"  # the copy was rewritten, not left stale
    after = await client.post("/v1/memory/query", json=query, headers=headers(user_id))
    assert not any("zeppelin" in i["content"] for i in after.json()["items"])

    await client.delete(_path(cid), headers=headers(user_id))
    state = (await client.get(f"/v1/conversations/{cid}/session", headers=headers(user_id))).json()
    assert state["messages"] == []
    assert state["goal"] == "plan"
