"""The admin HTTP API: create, list with filters, update with re-embedding, delete, restore."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import numpy as np
import pytest
from pydantic import SecretStr
from sqlalchemy import text

from app.adapters.embedder import LocalEmbedder
from app.db import create_engine
from app.embedded import EmbeddedPostgres
from tests.helpers import as_stored, headers

ADMIN_KEY = "admin-key-for-tests-123"
SERVICE_KEY = "service-key-for-tests-123"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
BASE = "/v1/admin/memories"


@pytest.fixture
async def admin(make_client: Callable[..., Any]) -> AsyncIterator[httpx.AsyncClient]:
    """An app with service and admin keys; the client sends the admin key."""
    async with make_client(api_key=SecretStr(SERVICE_KEY), admin_api_key=SecretStr(ADMIN_KEY)) as (
        client,
        _,
    ):
        client.headers.update(ADMIN)
        yield client


async def _create(
    client: httpx.AsyncClient, user: str, content: str, **extra: Any
) -> dict[str, Any]:
    r = await client.post(BASE, json={"user_id": user, "content": content, "type": "fact", **extra})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def _stored(pg: EmbeddedPostgres, user: str, item_id: str) -> Any:
    engine = create_engine(pg.url)
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    text(
                        "SELECT content_hash, embedding::text AS vec FROM memory_items "
                        "WHERE user_id = :u AND id = :i"
                    ),
                    {"u": user, "i": uuid.UUID(item_id)},
                )
            ).one()
            lexemes = {
                r.lexeme
                for r in await conn.execute(
                    text("SELECT lexeme FROM search_postings WHERE user_id = :u AND item_id = :i"),
                    {"u": user, "i": uuid.UUID(item_id)},
                )
            }
        return row, lexemes
    finally:
        await engine.dispose()


async def test_admin_routes_need_the_admin_key(admin: httpx.AsyncClient, user_id: str) -> None:
    no_key = await admin.get(BASE, params={"user_id": user_id}, headers={"Authorization": ""})
    assert no_key.status_code == 401
    service_key = await admin.get(
        BASE, params={"user_id": user_id}, headers={"Authorization": f"Bearer {SERVICE_KEY}"}
    )
    assert service_key.status_code == 403
    assert (await admin.get(BASE, params={"user_id": user_id})).status_code == 200


async def test_create_one_is_idempotent_by_content(admin: httpx.AsyncClient, user_id: str) -> None:
    created = await _create(
        admin, user_id, "Uses  Neovim with LazyVim", importance=0.9, source="crm"
    )
    assert created["user_id"] == user_id and created["importance"] == 0.9
    assert created["embedding_model"] == LocalEmbedder.model and created["deleted_at"] is None
    # Same text up to whitespace: 200 with the stored item, nothing new.
    again = await admin.post(
        BASE, json={"user_id": user_id, "content": "Uses Neovim with  LazyVim", "type": "note"}
    )
    assert again.status_code == 200 and again.json()["id"] == created["id"]
    page = (await admin.get(BASE, params={"user_id": user_id})).json()
    assert page["total"] == 1


async def test_bulk_create_reports_duplicates(
    admin: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    first = await _create(admin, user_id, "Prefers dark mode")
    body = {
        "items": [
            {"user_id": user_id, "content": "Prefers dark mode", "type": "preference"},
            {"user_id": user_id, "content": "Works from Lisbon", "type": "fact"},
            {"user_id": other_user_id, "content": "Prefers dark mode", "type": "preference"},
            {"user_id": user_id, "content": "Works from Lisbon", "type": "fact"},
            {"user_id": user_id, "content": "Cycles to work", "type": "fact"},
        ]
    }
    r = await admin.post(f"{BASE}:bulk", json=body)
    assert r.status_code == 201, r.text
    result = r.json()
    assert [(m["user_id"], m["content"]) for m in result["items"]] == [  # request order
        (user_id, "Works from Lisbon"),
        (other_user_id, "Prefers dark mode"),
        (user_id, "Cycles to work"),
    ]
    lisbon = result["items"][0]["id"]
    assert result["duplicates"] == [{"index": 0, "id": first["id"]}, {"index": 3, "id": lisbon}]


async def test_create_validates_rows(admin: httpx.AsyncClient, user_id: str) -> None:
    bad = await admin.post(
        BASE, json={"user_id": "a b", "content": "", "type": "opinion", "importance": 2}
    )
    assert bad.status_code == 422
    fields = {f["field"] for f in bad.json()["fields"]}
    assert {"body.user_id", "body.content", "body.type", "body.importance"} <= fields
    too_many = {
        "items": [{"user_id": user_id, "content": f"m{i}", "type": "note"} for i in range(1001)]
    }
    assert (await admin.post(f"{BASE}:bulk", json=too_many)).status_code == 422


async def test_list_filters_and_pages(
    admin: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    items = [
        ("Deploys happen on Tuesdays after the standup", "decision", "2024-01-10T09:00:00Z"),
        ("Prefers green tea without sugar", "preference", "2024-02-10T09:00:00Z"),
        ("The staging database runs Postgres 16", "fact", "2024-03-10T09:00:00Z"),
        ("Deployment freezes start in mid December", "decision", "2024-04-10T09:00:00Z"),
    ]
    ids = [(await _create(admin, user_id, c, type=t, created_at=at))["id"] for c, t, at in items]
    await _create(admin, other_user_id, "Deploys happen on Fridays", type="decision")

    async def listed(**params: Any) -> dict[str, Any]:
        r = await admin.get(BASE, params={"user_id": user_id, **params})
        assert r.status_code == 200, r.text
        return dict(r.json())

    everything = await listed()
    assert [m["id"] for m in everything["items"]] == ids[::-1]  # newest first
    assert [m["id"] for m in (await listed(type="decision"))["items"]] == [ids[3], ids[0]]
    # Full text with stemming ("deploys" ~ "deployment"), only this user's rows.
    assert [m["id"] for m in (await listed(q="deploy"))["items"]] == [ids[3], ids[0]]
    assert [m["id"] for m in (await listed(q="postgres database"))["items"]] == [ids[2]]
    # Or, negation, and a negation alone (it matches the items without the word).
    assert [m["id"] for m in (await listed(q="deploy or staging"))["items"]] == [
        ids[3],
        ids[2],
        ids[0],
    ]
    assert [m["id"] for m in (await listed(q="deploy -freezes"))["items"]] == [ids[0]]
    assert [m["id"] for m in (await listed(q="-deploy"))["items"]] == [ids[2], ids[1]]
    assert (await listed(q="the"))["items"] == []  # only a stop word: nothing to match
    # A text filter's total comes with its page, and a page past the end still knows it.
    first = await listed(q="deploy", limit=1)
    assert ([m["id"] for m in first["items"]], first["total"]) == ([ids[3]], 2)
    beyond = await listed(q="deploy", limit=1, offset=5)
    assert (beyond["items"], beyond["total"]) == ([], 2)
    ranged = await listed(
        created_after="2024-02-01T00:00:00Z", created_before="2024-04-01T00:00:00Z"
    )
    assert [m["id"] for m in ranged["items"]] == [ids[2], ids[1]]
    page = await listed(limit=3)
    assert (len(page["items"]), page["total"], page["next_offset"]) == (3, 4, 3)
    last = await listed(limit=3, offset=3)
    assert ([m["id"] for m in last["items"]], last["next_offset"]) == ([ids[0]], None)
    assert (await admin.get(BASE, params={"user_id": "bad id"})).status_code == 422
    assert (await admin.get(BASE)).status_code == 422
    naive = await admin.get(
        BASE, params={"user_id": user_id, "created_after": "2024-01-01T00:00:00"}
    )
    assert naive.status_code == 422


async def test_new_content_supersedes_with_a_reembedded_reindexed_version(
    admin: httpx.AsyncClient, pg: EmbeddedPostgres, embedder: LocalEmbedder, user_id: str
) -> None:
    item = await _create(admin, user_id, "Favourite editor is Emacs", importance=0.4)
    before, old_lexemes = await _stored(pg, user_id, item["id"])
    assert "emac" in old_lexemes
    r = await admin.patch(
        f"{BASE}/{item['id']}",
        params={"user_id": user_id},
        json={"content": "Favourite editor is Helix", "type": "preference"},
    )
    assert r.status_code == 200, r.text
    updated = r.json()
    assert (updated["content"], updated["type"], updated["importance"]) == (
        "Favourite editor is Helix",
        "preference",
        0.4,
    )
    # The edit made a new version; the old one is closed, unchanged, and still indexed.
    assert updated["id"] != item["id"] and updated["supersedes_id"] == item["id"]
    assert updated["valid_to"] is None and updated["valid_from"] >= item["valid_from"]
    closed = (await admin.get(f"{BASE}/{item['id']}", params={"user_id": user_id})).json()
    assert closed["content"] == item["content"] and closed["valid_to"] == updated["valid_from"]
    still, still_lexemes = await _stored(pg, user_id, item["id"])
    assert still.content_hash == before.content_hash and still_lexemes == old_lexemes
    after, lexemes = await _stored(pg, user_id, updated["id"])
    assert after.content_hash != before.content_hash
    np.testing.assert_array_equal(
        np.array(json.loads(after.vec), dtype=np.float32),
        as_stored(embedder.embed_sync(["Favourite editor is Helix"])[0]),
    )
    assert "helix" in lexemes and "emac" not in lexemes

    # Type, importance and expiry change the valid version in place.
    item = updated
    expiry = await admin.patch(
        f"{BASE}/{item['id']}",
        params={"user_id": user_id},
        json={"expires_at": "2031-01-01T00:00:00Z"},
    )
    assert expiry.json()["expires_at"].startswith("2031-01-01")
    cleared = await admin.patch(
        f"{BASE}/{item['id']}", params={"user_id": user_id}, json={"expires_at": None}
    )
    assert cleared.json()["expires_at"] is None
    assert cleared.json()["id"] == item["id"]
    # A superseded version cannot be superseded again: the chain stays linear.
    again = await admin.patch(
        f"{BASE}/{closed['id']}", params={"user_id": user_id}, json={"content": "Uses vi"}
    )
    assert again.status_code == 409 and again.json()["error"] == "ConflictError"
    for body in ({}, {"content": None}, {"importance": 3}):
        bad = await admin.patch(f"{BASE}/{item['id']}", params={"user_id": user_id}, json=body)
        assert bad.status_code == 422, body


async def test_update_to_an_existing_text_conflicts(admin: httpx.AsyncClient, user_id: str) -> None:
    await _create(admin, user_id, "Lives in Porto")
    other = await _create(admin, user_id, "Lives in Braga")
    r = await admin.patch(
        f"{BASE}/{other['id']}", params={"user_id": user_id}, json={"content": "Lives  in Porto"}
    )
    assert r.status_code == 409 and r.json()["error"] == "ConflictError"


async def test_unknown_and_foreign_ids_are_404(
    admin: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    item = await _create(admin, user_id, "Owns a red bicycle")
    foreign = {"user_id": other_user_id}
    for method, path, body in [
        ("GET", f"{BASE}/{item['id']}", None),
        ("PATCH", f"{BASE}/{item['id']}", {"importance": 0.1}),
        ("DELETE", f"{BASE}/{item['id']}", None),
        ("POST", f"{BASE}/{item['id']}/restore", None),
        ("GET", f"{BASE}/{uuid.uuid4()}", None),
    ]:
        params = foreign if path.find(item["id"]) >= 0 else {"user_id": user_id}
        r = await admin.request(method, path, params=params, json=body)
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"] == "NotFoundError"
    assert (await admin.get(f"{BASE}/{item['id']}", params={"user_id": user_id})).json()[
        "importance"
    ] == 0.5


async def test_delete_hides_from_retrieval_and_restore_brings_back(
    admin: httpx.AsyncClient, user_id: str
) -> None:
    item = await _create(admin, user_id, "The quarterly report is due on the fifth of July")
    service = {"Authorization": f"Bearer {SERVICE_KEY}", **headers(user_id)}

    async def recalled() -> list[str]:
        r = await admin.post(
            "/v1/tools/query_memory",
            json={"query": "when is the quarterly report due"},
            headers=service,
        )
        assert r.status_code == 200, r.text
        return [m["id"] for m in r.json()["memories"]]

    assert item["id"] in await recalled()  # also caches this query's result
    deleted = await admin.delete(f"{BASE}/{item['id']}", params={"user_id": user_id})
    assert deleted.status_code == 204
    assert item["id"] not in await recalled()  # the cached answer was invalidated
    shown = (await admin.get(f"{BASE}/{item['id']}", params={"user_id": user_id})).json()
    assert shown["deleted_at"] is not None
    assert (await admin.get(BASE, params={"user_id": user_id})).json()["total"] == 0
    listed = (await admin.get(BASE, params={"user_id": user_id, "include_deleted": True})).json()
    assert [m["id"] for m in listed["items"]] == [item["id"]]
    again = await admin.delete(f"{BASE}/{item['id']}", params={"user_id": user_id})
    assert again.status_code == 204
    kept = (await admin.get(f"{BASE}/{item['id']}", params={"user_id": user_id})).json()
    assert kept["deleted_at"] == shown["deleted_at"]  # the first deletion time stays

    restored = await admin.post(f"{BASE}/{item['id']}/restore", params={"user_id": user_id})
    assert restored.status_code == 200 and restored.json()["deleted_at"] is None
    assert item["id"] in await recalled()


async def test_update_invalidates_cached_query_results(
    admin: httpx.AsyncClient, user_id: str
) -> None:
    item = await _create(admin, user_id, "The office wifi password rotates every Monday")
    service = {"Authorization": f"Bearer {SERVICE_KEY}", **headers(user_id)}
    query = {"query": "when does the wifi password rotate"}
    first = await admin.post("/v1/tools/query_memory", json=query, headers=service)
    assert [m["content"] for m in first.json()["memories"]] == [item["content"]]
    await admin.patch(
        f"{BASE}/{item['id']}",
        params={"user_id": user_id},
        json={"content": "The office wifi password rotates every Friday"},
    )
    second = await admin.post("/v1/tools/query_memory", json=query, headers=service)
    assert [m["content"] for m in second.json()["memories"]] == [
        "The office wifi password rotates every Friday"
    ]
