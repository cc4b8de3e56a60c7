"""The per-user cap (PGRECALL_MAX_ENTRIES_PER_USER) and the usage data that orders eviction,
over HTTP against the real stack: the evicted memory is named, restorable, never another
user's; query_memory stamps what it returned after answering."""

from __future__ import annotations

import re
from typing import Any

import httpx
from fastapi import FastAPI

from tests.helpers import headers

SAVE = "/v1/tools/save_memory"
QUERY = "/v1/tools/query_memory"
ADMIN = "/v1/admin/memories"


async def _save(client: httpx.AsyncClient, user: str, content: str, **kw: Any) -> dict[str, Any]:
    response = await client.post(
        SAVE, json={"content": content, "type": "fact", **kw}, headers=headers(user)
    )
    assert response.status_code == 200, response.text
    return dict(response.json())


async def _admin_get(client: httpx.AsyncClient, user: str, item: str) -> dict[str, Any]:
    response = await client.get(f"{ADMIN}/{item}", params={"user_id": user})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def _recall(client: httpx.AsyncClient, app: FastAPI, user: str, query: str) -> list[str]:
    response = await client.post(QUERY, json={"query": query}, headers=headers(user))
    assert response.status_code == 200, response.text
    await app.state.resources.usage.drain()  # the usage write follows the answer
    return [m["id"] for m in response.json()["memories"]]


async def test_usage_is_stamped_after_query_memory(
    make_client: Any, user_id: str, other_user_id: str
) -> None:
    async with make_client() as (client, app):
        bees = (await _save(client, user_id, "The user keeps bees on an allotment"))["memory"]
        tea = (await _save(client, user_id, "The user drinks green tea"))["memory"]
        assert (await _admin_get(client, user_id, bees["id"]))["times_retrieved"] == 0
        for _ in range(2):
            assert bees["id"] in await _recall(client, app, user_id, "what animals do I keep?")
        stamped = await _admin_get(client, user_id, bees["id"])
        assert stamped["times_retrieved"] == 2 and stamped["last_retrieved_at"] is not None
        untouched = await _admin_get(client, user_id, tea["id"])
        assert untouched["times_retrieved"] == 0 and untouched["last_retrieved_at"] is None
        # /v1/memory/query counts too; another user's query touches nothing of this user.
        response = await client.post(
            "/v1/memory/query", json={"query": "bees allotment"}, headers=headers(user_id)
        )
        assert response.json()["items"][0]["id"] == bees["id"]
        assert await _recall(client, app, other_user_id, "what animals do I keep?") == []
        assert (await _admin_get(client, user_id, bees["id"]))["times_retrieved"] == 3


async def test_a_save_over_the_cap_evicts_the_least_valuable(
    make_client: Any, user_id: str, other_user_id: str
) -> None:
    async with make_client(max_entries_per_user=3) as (client, app):
        # The other user is at the cap too, with less valuable memories than anyone's.
        for i, text in enumerate(["Likes jazz", "Owns a red bike", "Reads Tolstoy"]):
            await _save(client, other_user_id, text, importance=0.1 * i)
        low = (await _save(client, user_id, "The user has a cat", importance=0.2))["memory"]
        used = (await _save(client, user_id, "The user lives in Porto", importance=0.5))["memory"]
        unused = (await _save(client, user_id, "The user plays chess", importance=0.5))["memory"]
        assert used["id"] in await _recall(client, app, user_id, "which city do I live in?")

        # Fourth memory: the lowest importance goes first.
        fourth = await _save(client, user_id, "The user studies Japanese", importance=0.9)
        assert fourth["action"] == "added"
        assert [m["id"] for m in fourth["evicted"]] == [low["id"]], fourth["evicted"]
        assert fourth["evicted"][0]["content"] == "The user has a cat"
        # Fifth: equal importance, so the one never retrieved goes before the retrieved one.
        fifth = await _save(client, user_id, "The user cycles to work", importance=0.9)
        assert [m["id"] for m in fifth["evicted"]] == [unused["id"]]

        evicted = await _admin_get(client, user_id, low["id"])
        assert evicted["deleted_at"] is not None and evicted["evicted_at"] is not None
        assert await _recall(client, app, user_id, "do I have a pet cat?") == []
        # Never another user's: theirs are all still there.
        listed = await client.get(ADMIN, params={"user_id": other_user_id})
        assert listed.json()["total"] == 3
        for item in listed.json()["items"]:
            assert item["deleted_at"] is None and item["evicted_at"] is None
        # Eviction is never silent: the admin lists, then restores.
        page = await client.get(ADMIN, params={"user_id": user_id, "evicted": "true"})
        assert {i["id"] for i in page.json()["items"]} == {low["id"], unused["id"]}
        restored = await client.post(f"{ADMIN}/{low['id']}/restore", params={"user_id": user_id})
        assert restored.status_code == 200, restored.text
        assert restored.json()["deleted_at"] is None and restored.json()["evicted_at"] is None
        assert low["id"] in await _recall(client, app, user_id, "do I have a pet cat?")
        # An admin restore of another user's id finds nothing.
        foreign = await client.post(
            f"{ADMIN}/{unused['id']}/restore", params={"user_id": other_user_id}
        )
        assert foreign.status_code == 404


async def test_saves_that_add_nothing_evict_nothing(make_client: Any, user_id: str) -> None:
    async with make_client(max_entries_per_user=2) as (client, _):
        first = (await _save(client, user_id, "The user is vegetarian", importance=0.1))["memory"]
        await _save(client, user_id, "The user speaks Portuguese", importance=0.9)
        same = await _save(client, user_id, "The user is vegetarian")
        assert same["action"] == "unchanged" and same["evicted"] == []
        replaced = await _save(
            client, user_id, "The user is vegan now", supersedes=first["id"], importance=0.1
        )
        assert replaced["action"] == "updated" and replaced["evicted"] == []


async def test_no_cap_by_default(client: httpx.AsyncClient, user_id: str) -> None:
    for i in range(5):
        saved = await _save(client, user_id, f"Distinct fact number {i} about trains")
        assert saved["evicted"] == []


def _form_token(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


async def test_the_console_shows_evicted_memories_and_usage_and_restores(
    make_client: Any, user_id: str
) -> None:
    async with make_client(max_entries_per_user=1) as (client, app):
        first = (await _save(client, user_id, "The user grows tomatoes", importance=0.3))["memory"]
        assert first["id"] in await _recall(client, app, user_id, "what do I grow?")
        second = await _save(client, user_id, "The user sails on weekends", importance=0.8)
        assert [m["id"] for m in second["evicted"]] == [first["id"]]

        login = await client.get("/console/login")
        nonce = re.search(r'name="nonce" value="([^"]+)"', login.text)
        assert nonce is not None
        await client.post("/console/login", data={"nonce": nonce.group(1)})
        page = await client.get("/console/user", params={"user": user_id, "deleted": "evicted"})
        assert page.status_code == 200
        assert "The user grows tomatoes" in page.text
        assert "The user sails on weekends" not in page.text  # live, not evicted
        detail = await client.get("/console/memory", params={"user": user_id, "id": first["id"]})
        assert "evicted by the per-user cap" in detail.text
        times = re.search(r'id="memory-times-retrieved">(\d+)<', detail.text)
        assert times is not None and times.group(1) == "1"
        restored = await client.post(
            f"/console/memory/restore?user={user_id}&id={first['id']}",
            data={"csrf_token": _form_token(detail.text)},
        )
        assert restored.status_code == 303
        item = await _admin_get(client, user_id, first["id"])
        assert item["deleted_at"] is None and item["evicted_at"] is None
