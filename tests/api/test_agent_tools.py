"""The write tools over HTTP: save_memory, forget_memory, rate_message (real Postgres + Redis)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import user_session
from app.services.api_keys import ApiKeyService
from tests.helpers import headers, new_conversation

SAVE = "/v1/tools/save_memory"
FORGET = "/v1/tools/forget_memory"
RATE = "/v1/tools/rate_message"
QUERY = "/v1/tools/query_memory"


async def save(client: httpx.AsyncClient, user: str, **body: Any) -> httpx.Response:
    return await client.post(SAVE, json=body, headers=headers(user))


async def recall(client: httpx.AsyncClient, user: str, query: str) -> list[dict[str, Any]]:
    response = await client.post(QUERY, json={"query": query}, headers=headers(user))
    assert response.status_code == 200, response.text
    return list(response.json()["memories"])


async def row(engine: AsyncEngine, item_id: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        result = await conn.execute(
            text("SELECT * FROM memory_items WHERE id = CAST(:id AS uuid)"), {"id": item_id}
        )
        return dict(result.mappings().one())


async def test_save_then_query_finds_it(
    client: httpx.AsyncClient, db_engine: AsyncEngine, user_id: str
) -> None:
    response = await save(
        client, user_id, content="I am allergic to peanuts", type="fact", importance=0.9
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["action"] == "added"
    memory = body["memory"]
    assert memory["type"] == "fact" and memory["importance"] == 0.9
    stored = await row(db_engine, memory["id"])  # committed before the response
    assert stored["user_id"] == user_id and stored["metadata"] == {"via": "save_memory"}
    found = await recall(client, user_id, "what food allergies do I have?")
    assert found and found[0]["id"] == memory["id"]


async def test_identical_text_is_unchanged_and_near_duplicate_updates(
    client: httpx.AsyncClient, user_id: str
) -> None:
    first = await save(client, user_id, content="My favourite colour is teal", type="preference")
    item = first.json()["memory"]
    again = await save(client, user_id, content="My favourite colour is teal", type="preference")
    assert again.json()["action"] == "unchanged"
    assert again.json()["memory"]["id"] == item["id"]
    near = await save(client, user_id, content="My favourite colour is teal.", type="preference")
    # A near-duplicate supersedes: a new version, linked back to the closed old one.
    assert near.json()["action"] == "updated"
    assert near.json()["superseded"] == item["id"]
    version = near.json()["memory"]
    assert version["id"] != item["id"] and version["supersedes_id"] == item["id"]
    assert version["content"] == "My favourite colour is teal."
    history = await client.get(f"/v1/memories/{item['id']}/history", headers=headers(user_id))
    assert [v["id"] for v in history.json()["versions"]] == [item["id"], version["id"]]
    assert history.json()["current"] == version["id"]
    other = await save(client, user_id, content="I work as a marine biologist", type="fact")
    assert other.json()["action"] == "added"
    assert other.json()["memory"]["id"] != item["id"]


async def test_supersedes_forgets_the_old_memory(
    client: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    old = (await save(client, user_id, content="I live in Lisbon", type="fact")).json()["memory"]
    new = await save(
        client, user_id, content="I moved to Porto in 2026", type="fact", supersedes=old["id"]
    )
    assert new.status_code == 200, new.text
    assert new.json()["superseded"] == old["id"]
    ids = {m["id"] for m in await recall(client, user_id, "where do I live? Lisbon or Porto")}
    assert old["id"] not in ids and new.json()["memory"]["id"] in ids

    # Superseding someone else's memory is a 404 and writes nothing.
    theirs = (await save(client, other_user_id, content="I own a red bicycle", type="fact")).json()
    refused = await save(
        client,
        user_id,
        content="I own a blue bicycle",
        type="fact",
        supersedes=theirs["memory"]["id"],
    )
    assert refused.status_code == 404
    assert refused.json()["detail"] == "memory not found"
    assert not await recall(client, user_id, "blue bicycle")
    assert await recall(client, other_user_id, "red bicycle")


async def test_forget_is_own_only_and_idempotent(
    client: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    mine = (await save(client, user_id, content="My cat is called Miso", type="fact")).json()
    theirs = (await save(client, other_user_id, content="My dog is called Rex", type="fact")).json()
    item = mine["memory"]["id"]

    foreign = await client.post(
        FORGET, json={"id": theirs["memory"]["id"]}, headers=headers(user_id)
    )
    unknown = await client.post(FORGET, json={"id": str(uuid.uuid4())}, headers=headers(user_id))
    assert foreign.status_code == unknown.status_code == 404
    assert foreign.json() == unknown.json()  # the same answer: nothing says the id exists
    assert await recall(client, other_user_id, "what is my dog called?")

    done = await client.post(FORGET, json={"id": item}, headers=headers(user_id))
    assert done.status_code == 200 and done.json() == {"id": item, "forgotten": True}
    assert item not in {m["id"] for m in await recall(client, user_id, "what is my cat called?")}
    again = await client.post(FORGET, json={"id": item}, headers=headers(user_id))
    assert again.status_code == 200

    # Saving the same text again brings it back rather than failing on the stored hash.
    back = await save(client, user_id, content="My cat is called Miso", type="fact")
    assert back.json()["action"] == "restored" and back.json()["memory"]["id"] == item


async def test_rate_message_up_and_down(
    client: httpx.AsyncClient, db_engine: AsyncEngine, user_id: str, other_user_id: str
) -> None:
    cid = await new_conversation(client, user_id)
    posted = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={
            "messages": [
                {"role": "user", "content": "How should I water my bonsai?"},
                {"role": "assistant", "content": "Water the bonsai when the soil feels dry."},
            ]
        },
        headers=headers(user_id),
    )
    question, answer = (m["id"] for m in posted.json()["items"])

    up = await client.post(
        RATE, json={"message_id": answer, "vote": "up"}, headers=headers(user_id)
    )
    assert up.status_code == 200, up.text
    note = up.json()["memory"]
    assert up.json()["action"] == "added" and note["type"] == "note"
    assert note["source_message_id"] == answer
    assert note["content"] == (
        "User: How should I water my bonsai?\nAssistant: Water the bonsai when the soil feels dry."
    )
    repeat = await client.post(
        RATE, json={"message_id": answer, "vote": "up"}, headers=headers(user_id)
    )
    assert repeat.json()["action"] == "unchanged" and repeat.json()["memory"]["id"] == note["id"]

    plain = await client.post(
        RATE, json={"message_id": question, "vote": "up"}, headers=headers(user_id)
    )
    assert plain.json()["memory"]["content"] == "How should I water my bonsai?"

    # Another user can neither rate nor unrate these messages.
    for vote in ("up", "down"):
        foreign = await client.post(
            RATE, json={"message_id": answer, "vote": vote}, headers=headers(other_user_id)
        )
        assert foreign.status_code == 404
    assert (await row(db_engine, note["id"]))["deleted_at"] is None

    down = await client.post(
        RATE, json={"message_id": answer, "vote": "down"}, headers=headers(user_id)
    )
    assert down.json() == {
        "message_id": answer,
        "vote": "down",
        "action": "removed",
        "memory": None,
        "removed": 1,
    }
    assert (await row(db_engine, note["id"]))["deleted_at"] is not None
    again = await client.post(
        RATE, json={"message_id": answer, "vote": "down"}, headers=headers(user_id)
    )
    # Repeated, it has nothing left to remove: "unchanged", as a repeated up says (issue 41).
    assert again.json()["action"] == "unchanged" and again.json()["removed"] == 0
    # The upvoted question's note is untouched by the answer's downvote.
    assert (await row(db_engine, plain.json()["memory"]["id"]))["deleted_at"] is None
    back = await client.post(
        RATE, json={"message_id": answer, "vote": "up"}, headers=headers(user_id)
    )
    assert back.json()["action"] == "restored" and back.json()["memory"]["id"] == note["id"]


async def test_bad_input_is_422_naming_the_field(client: httpx.AsyncClient, user_id: str) -> None:
    cases: list[tuple[str, dict[str, Any], str]] = [
        (SAVE, {"content": "x" * 4001, "type": "fact"}, "body.content"),
        (SAVE, {"content": "   ", "type": "fact"}, "body.content"),
        (SAVE, {"content": "ok", "type": "opinion"}, "body.type"),
        (SAVE, {"content": "ok", "type": "fact", "importance": 2}, "body.importance"),
        (SAVE, {"content": "ok", "type": "fact", "expires_at": "2026-01-01"}, "body.expires_at"),
        (SAVE, {"content": "ok", "type": "fact", "supersedes": "nope"}, "body.supersedes"),
        (SAVE, {"content": "ok", "type": "fact", "user_id": "someone"}, "body.user_id"),
        (FORGET, {"id": "not-a-uuid"}, "body.id"),
        (FORGET, {}, "body.id"),
        (RATE, {"message_id": str(uuid.uuid4()), "vote": "sideways"}, "body.vote"),
    ]
    for path, body, field in cases:
        response = await client.post(path, json=body, headers=headers(user_id))
        assert response.status_code == 422, (path, body, response.text)
        assert any(f["field"] == field for f in response.json()["fields"]), response.json()


async def test_a_past_expiry_stores_the_memory_as_expired(
    client: httpx.AsyncClient, user_id: str
) -> None:
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    saved = await save(
        client, user_id, content="Had a temporary badge for the lab", type="note", expires_at=past
    )
    assert saved.status_code == 200 and saved.json()["action"] == "added"
    assert not await recall(client, user_id, "temporary badge for the lab")
    # Saying it again without an expiry brings the same memory back.
    again = await save(client, user_id, content="Had a temporary badge for the lab", type="note")
    assert again.json()["action"] == "restored"
    assert again.json()["memory"]["id"] == saved.json()["memory"]["id"]
    assert again.json()["memory"]["expires_at"] is None
    assert await recall(client, user_id, "temporary badge for the lab")


async def test_write_rate_limit_is_429_and_stores_nothing(
    make_client: Callable[..., Any], user_id: str, db_engine: AsyncEngine
) -> None:
    async with make_client(write_rate_limit_per_minute=2) as (client, _):
        for n in range(2):
            ok = await save(client, user_id, content=f"Limit test fact number {n}", type="note")
            assert ok.status_code == 200
        refused = await save(client, user_id, content="One too many for this minute", type="note")
        assert refused.status_code == 429
        assert refused.json()["error"] == "RateLimitedError"
        found = await recall(client, user_id, "One too many for this minute")
        assert "One too many for this minute" not in [m["content"] for m in found]
    async with db_engine.connect() as conn:
        stored = await conn.scalars(
            text("SELECT content FROM memory_items WHERE user_id = :u"), {"u": user_id}
        )
        assert sorted(stored) == ["Limit test fact number 0", "Limit test fact number 1"]


async def test_write_limit_fails_open_without_redis(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(redis_url=None, write_rate_limit_per_minute=1) as (client, _):
        for n in range(3):
            response = await save(client, user_id, content=f"No Redis fact {n}", type="note")
            assert response.status_code == 200


async def test_read_key_cannot_use_write_tools(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            token = (await ApiKeyService(session).create(user_id, "read")).token
        auth = {"Authorization": f"Bearer {token}"}
        for path, body in (
            (SAVE, {"content": "I like tea", "type": "preference"}),
            (FORGET, {"id": str(uuid.uuid4())}),
            (RATE, {"message_id": str(uuid.uuid4()), "vote": "up"}),
        ):
            response = await client.post(path, json=body, headers=auth)
            assert response.status_code == 403, response.text


async def test_openapi_documents_the_write_tools(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    for path in (SAVE, FORGET, RATE):
        responses = document["paths"][path]["post"]["responses"]
        assert {"200", "403", "404", "422", "429"} <= set(responses), (path, set(responses))


async def test_32_parallel_saves_of_one_user_all_succeed(
    make_client: Callable[..., Any], db_engine: AsyncEngine, user_id: str
) -> None:
    """An agent calling save_memory in parallel: near-duplicate texts each pick the user's
    nearest memory to replace, so unserialised saves raced (409 "changed concurrently")."""
    import asyncio

    texts = [f"My locker number at the gym is {n}" for n in range(32)]
    async with make_client(write_rate_limit_per_minute=100) as (client, _):
        answers = await asyncio.gather(
            *(save(client, user_id, content=t, type="fact") for t in texts)
        )
    assert [a.status_code for a in answers] == [200] * 32, [a.text for a in answers if a.is_error]
    async with db_engine.connect() as conn:
        stored = await conn.scalar(
            text("SELECT count(*) FROM memory_items WHERE user_id = :u"), {"u": user_id}
        )
    assert stored == 32  # each save stored its text (live, or closed as superseded history)
