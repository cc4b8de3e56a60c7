"""Supersession on the real database: closed versions, validity at as_of, history, conflicts.

The acceptance case of issue 14: after "The user moved to Lisbon" supersedes "The user lives
in Berlin", query_memory for "where does the user live" returns only Lisbon, `as_of` before the
move returns Berlin, and the history shows both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.db import user_session
from app.errors import ValidationFailedError
from app.services.agent_memory import AgentMemoryService
from app.services.supersession import SupersessionService

ADMIN_KEY = "admin-key-for-supersession-1"
SERVICE_KEY = "service-key-for-supersession-1"
BASE = "/v1/admin/memories"
QUERY = "/v1/tools/query_memory"
SEARCH = "/v1/memory/query"
BERLIN = "The user lives in Berlin"
LISBON = "The user moved to Lisbon"
WHERE = "where does the user live"


@pytest.fixture
async def served(make_client: Callable[..., Any]) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    async with make_client(
        api_key=SecretStr(SERVICE_KEY), admin_api_key=SecretStr(ADMIN_KEY)
    ) as pair:
        yield pair


def as_admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


def as_user(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {SERVICE_KEY}", "X-User-Id": user}


async def create(client: httpx.AsyncClient, user: str, content: str, **extra: Any) -> Any:
    body = {"user_id": user, "content": content, "type": "fact", **extra}
    r = await client.post(BASE, json=body, headers=as_admin())
    assert r.status_code == 201, r.text
    return r.json()


async def recall(client: httpx.AsyncClient, user: str, **body: Any) -> list[str]:
    r = await client.post(QUERY, json={"query": WHERE, **body}, headers=as_user(user))
    assert r.status_code == 200, r.text
    return [m["content"] for m in r.json()["memories"]]


async def search(client: httpx.AsyncClient, user: str, **body: Any) -> list[str]:
    body = {"query": WHERE, "min_score": 0.0, **body}
    r = await client.post(SEARCH, json=body, headers=as_user(user))
    assert r.status_code == 200, r.text
    return [i["content"] for i in r.json()["items"]]


async def test_moved_to_lisbon_supersedes_berlin(served: Any, user_id: str) -> None:
    client, _ = served
    berlin = await create(client, user_id, BERLIN, created_at="2025-01-10T09:00:00Z")
    assert await recall(client, user_id) == [BERLIN]
    r = await client.post(
        "/v1/tools/save_memory",
        json={"content": LISBON, "type": "fact", "supersedes": berlin["id"]},
        headers=as_user(user_id),
    )
    assert r.status_code == 200, r.text
    saved = r.json()
    assert (saved["action"], saved["superseded"]) == ("updated", berlin["id"])
    lisbon = saved["memory"]
    assert lisbon["supersedes_id"] == berlin["id"] and lisbon["valid_to"] is None

    # Now: only Lisbon, on both query endpoints, even with every candidate let through.
    assert await recall(client, user_id) == [LISBON]
    assert await search(client, user_id) == [LISBON]
    # Before the move: Berlin (Lisbon was not stated yet, Berlin not yet superseded).
    assert await recall(client, user_id, as_of="2025-06-01T00:00:00Z") == [BERLIN]
    assert await search(client, user_id, as_of="2025-06-01T00:00:00Z") == [BERLIN]
    # Before anything was known: nothing.
    assert await search(client, user_id, as_of="2024-12-31T00:00:00Z") == []

    for item in (berlin, lisbon):  # from either end, the whole chain, oldest first
        h = await client.get(f"/v1/memories/{item['id']}/history", headers=as_user(user_id))
        assert h.status_code == 200, h.text
        assert [v["content"] for v in h.json()["versions"]] == [BERLIN, LISBON]
        assert h.json()["current"] == lisbon["id"]
        a = await client.get(
            f"{BASE}/{item['id']}/history", params={"user_id": user_id}, headers=as_admin()
        )
        assert [v["id"] for v in a.json()["versions"]] == [berlin["id"], lisbon["id"]]
    closed = a.json()["versions"][0]
    assert closed["valid_to"] == lisbon["valid_from"]  # the windows meet exactly

    # Lists show the valid version; the admin can ask for the superseded ones too.
    res = served[1].state.resources
    async with user_session(res.sessionmaker, user_id) as session:
        items, total = await AgentMemoryService(session, res.embeddings).page(
            user_id, limit=10, offset=0
        )  # the MCP list_memories tool
    assert ([m.content for m in items], total) == ([LISBON], 1)
    page = await client.get(BASE, params={"user_id": user_id}, headers=as_admin())
    assert [m["id"] for m in page.json()["items"]] == [lisbon["id"]]
    page = await client.get(
        BASE, params={"user_id": user_id, "include_superseded": "true"}, headers=as_admin()
    )
    assert {m["id"] for m in page.json()["items"]} == {berlin["id"], lisbon["id"]}


async def test_observed_time_bounds_the_windows(served: Any, user_id: str) -> None:
    """An admin (or extraction) supersession dated in the past: as_of follows the dates."""
    client, _ = served
    berlin = await create(client, user_id, BERLIN, created_at="2025-01-10T09:00:00Z")
    lisbon = await create(
        client, user_id, LISBON, supersedes=berlin["id"], created_at="2025-09-01T00:00:00Z"
    )
    assert lisbon["valid_from"].startswith("2025-09-01") and lisbon["supersedes_id"]
    assert await search(client, user_id, as_of="2025-08-31T23:59:59Z") == [BERLIN]
    assert await search(client, user_id, as_of="2025-09-01T00:00:00Z") == [LISBON]
    assert await search(client, user_id) == [LISBON]

    # Superseded once only; not before the old version began; never in the future.
    again = await create_raw(client, user_id, "The user lives in Porto", supersedes=berlin["id"])
    assert again.status_code == 409 and again.json()["error"] == "ConflictError"
    early = await create_raw(
        client,
        user_id,
        "The user lives in Porto",
        supersedes=lisbon["id"],
        created_at="2025-08-01T00:00:00Z",
    )
    assert early.status_code == 422
    assert early.json()["fields"][0]["field"] == "body.created_at"
    future = await create_raw(
        client,
        user_id,
        "The user lives in Porto",
        supersedes=lisbon["id"],
        created_at="2999-01-01T00:00:00Z",
    )
    assert future.status_code == 422
    # Berlin again, later: the superseded text may be stated anew, as a new valid version.
    back = await create(client, user_id, BERLIN, supersedes=lisbon["id"])
    assert back["id"] != berlin["id"]
    assert await search(client, user_id) == [BERLIN]
    h = await client.get(f"/v1/memories/{berlin['id']}/history", headers=as_user(user_id))
    assert [v["id"] for v in h.json()["versions"]] == [berlin["id"], lisbon["id"], back["id"]]


async def create_raw(client: httpx.AsyncClient, user: str, content: str, **extra: Any) -> Any:
    body = {"user_id": user, "content": content, "type": "fact", **extra}
    return await client.post(BASE, json=body, headers=as_admin())


async def test_history_and_supersede_are_per_user(
    served: Any, user_id: str, other_user_id: str
) -> None:
    client, _ = served
    mine = await create(client, user_id, BERLIN)
    theirs = await create(client, other_user_id, BERLIN)
    # The admin names the user: another user's id is 404, for history and for supersedes.
    for item in (theirs,):
        r = await client.get(
            f"{BASE}/{item['id']}/history", params={"user_id": user_id}, headers=as_admin()
        )
        assert r.status_code == 404
        r = await create_raw(client, user_id, LISBON, supersedes=item["id"])
        assert r.status_code == 404 and r.json()["detail"] == "memory not found"
    r = await client.get(f"/v1/memories/{theirs['id']}/history", headers=as_user(user_id))
    assert r.status_code == 404 and r.json()["detail"] == "memory not found"
    # Nothing changed for the other user.
    assert await search(client, other_user_id) == [BERLIN]
    assert await search(client, user_id) == [BERLIN]
    r = await client.get(f"/v1/memories/{mine['id']}/history", headers=as_user(other_user_id))
    assert r.status_code == 404


async def test_forgotten_memory_has_no_user_history(served: Any, user_id: str) -> None:
    client, _ = served
    item = await create(client, user_id, BERLIN)
    r = await client.post(
        "/v1/tools/forget_memory", json={"id": item["id"]}, headers=as_user(user_id)
    )
    assert r.status_code == 200
    r = await client.get(f"/v1/memories/{item['id']}/history", headers=as_user(user_id))
    assert r.status_code == 404
    r = await client.get(
        f"{BASE}/{item['id']}/history", params={"user_id": user_id}, headers=as_admin()
    )
    assert r.status_code == 200 and r.json()["versions"][0]["deleted_at"] is not None
    assert r.json()["current"] is None


async def test_supersede_service_keeps_the_old_version_indexed(served: Any, user_id: str) -> None:
    """The function extraction calls: one transaction, old closed, new linked, both findable."""
    client, app = served
    berlin = await create(client, user_id, BERLIN, created_at="2025-01-10T09:00:00Z")
    res = app.state.resources
    async with user_session(res.sessionmaker, user_id) as session, session.begin():
        done = await SupersessionService(session, res.embeddings).supersede(
            user_id, berlin["id"], LISBON, metadata={"via": "test"}
        )
    assert done.old.valid_to is not None and done.old.valid_to == done.new.valid_from
    assert done.new.supersedes_id == done.old.id and done.new.type == "fact"
    assert done.new.metadata_ == {"via": "test"}
    assert await search(client, user_id) == [LISBON]
    assert await search(client, user_id, as_of="2025-06-01T00:00:00Z") == [BERLIN]
    async with user_session(res.sessionmaker, user_id) as session, session.begin():
        with pytest.raises(ValidationFailedError, match="time zone"):
            await SupersessionService(session, res.embeddings).supersede(
                user_id, done.new.id, BERLIN, observed_at=datetime(2026, 1, 1)
            )
