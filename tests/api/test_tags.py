"""Tags over HTTP (real Postgres + Redis): set by save_memory, the admin API and seed files,
filtered by query_memory and /v1/memory/query (any/all), validated, never across users."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from app.services.seed import SeedOptions, SeedReport, seed_file
from tests.helpers import add_messages, headers, new_conversation

SAVE = "/v1/tools/save_memory"
QUERY = "/v1/tools/query_memory"
ADMIN = "/v1/admin/memories"


async def _save(client: httpx.AsyncClient, user: str, content: str, tags: list[str]) -> str:
    response = await client.post(
        SAVE, json={"content": content, "type": "fact", "tags": tags}, headers=headers(user)
    )
    assert response.status_code == 200, response.text
    assert response.json()["memory"]["tags"] == tags
    return str(response.json()["memory"]["id"])


async def _tool(client: httpx.AsyncClient, user: str, **body: Any) -> list[str]:
    response = await client.post(QUERY, json=body, headers=headers(user))
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["memories"]]


async def _seed(app: FastAPI, path: Path) -> SeedReport:
    res = app.state.resources
    options = SeedOptions(progress=False, reindex=False)
    return await seed_file(path, res.sessionmaker, res.embeddings, options=options, cache=res.cache)


async def _internal(client: httpx.AsyncClient, user: str, **body: Any) -> list[str]:
    response = await client.post("/v1/memory/query", json=body, headers=headers(user))
    assert response.status_code == 200, response.text
    return [i["content"] for i in response.json()["items"]]


DENTIST = "The user's dentist appointment is on Friday at the clinic"
STANDUP = "The user's team standup moved to Friday mornings"
GYM = "The user goes to the gym on Friday evenings"


async def test_tag_filters_any_and_all(
    client: httpx.AsyncClient, user_id: str, other_user_id: str
) -> None:
    await _save(client, user_id, DENTIST, ["health", "calendar"])
    await _save(client, user_id, STANDUP, ["work", "calendar"])
    await _save(client, user_id, GYM, ["health"])
    # Another user's memory with the same tags and words is never seen.
    await _save(client, other_user_id, "The user's dentist is on Friday too", ["health"])
    # A past message that matches the words: a tag filter leaves messages out.
    conversation = await new_conversation(client, user_id)
    await add_messages(client, user_id, ["What happens on Friday?"], conversation=conversation)

    ask = {"query": "what happens on Friday?", "min_score": 0.0}
    everything = await _internal(client, user_id, **ask)
    assert {DENTIST, STANDUP, GYM} <= set(everything)
    assert "What happens on Friday?" in everything
    assert set(await _internal(client, user_id, **ask, tags=["health"])) == {DENTIST, GYM}
    assert set(await _internal(client, user_id, **ask, tags=["health", "work"])) == {
        DENTIST,
        STANDUP,
        GYM,
    }
    both = await _internal(client, user_id, **ask, tags=["health", "calendar"], tags_match="all")
    assert both == [DENTIST]
    assert await _internal(client, user_id, **ask, tags=["travel"]) == []
    # The agent tool filters the same way.
    assert set(await _tool(client, user_id, query="what happens on Friday?", tags=["work"])) == {
        STANDUP
    }
    found = await _tool(
        client, user_id, query="Friday", tags=["calendar", "health"], tags_match="all"
    )
    assert found == [DENTIST]
    assert set(await _tool(client, other_user_id, query="dentist Friday", tags=["health"])) == {
        "The user's dentist is on Friday too"
    }


async def test_tags_are_validated_with_the_field_named(
    client: httpx.AsyncClient, user_id: str
) -> None:
    bad = [
        (SAVE, {"content": "x", "type": "fact", "tags": ["Work"]}, "tags"),
        (SAVE, {"content": "x", "type": "fact", "tags": ["a b"]}, "tags"),
        (SAVE, {"content": "x", "type": "fact", "tags": ["x" * 33]}, "tags"),
        (SAVE, {"content": "x", "type": "fact", "tags": [f"t{i}" for i in range(17)]}, "tags"),
        (SAVE, {"content": "x", "type": "fact", "tags": ["a", "a"]}, "tags"),
        (QUERY, {"query": "x", "tags": []}, "tags"),
        (QUERY, {"query": "x", "tags": ["ok"], "tags_match": "some"}, "tags_match"),
        ("/v1/memory/query", {"query": "x", "tags": "work"}, "tags"),
    ]
    for path, body, field in bad:
        response = await client.post(path, json=body, headers=headers(user_id))
        assert response.status_code == 422, (path, body, response.text)
        assert field in response.text, response.text
    admin = {"user_id": user_id, "content": "x", "type": "fact", "tags": ["no_UPPER"]}
    assert (await client.post(ADMIN, json=admin)).status_code == 422


async def test_admin_create_update_and_seed_files_set_tags(
    make_client: Any, user_id: str, tmp_path: Path
) -> None:
    async with make_client() as (client, app):
        app_: FastAPI = app
        created = await client.post(
            ADMIN,
            json={"user_id": user_id, "content": DENTIST, "type": "fact", "tags": ["health"]},
        )
        assert created.status_code == 201, created.text
        item = created.json()
        assert item["tags"] == ["health"] and item["times_retrieved"] == 0
        patched = await client.patch(
            f"{ADMIN}/{item['id']}",
            params={"user_id": user_id},
            json={"tags": ["health", "calendar"]},
        )
        assert patched.status_code == 200 and patched.json()["tags"] == ["health", "calendar"]
        # A new content supersedes: the new version keeps the tags unless given.
        edited = await client.patch(
            f"{ADMIN}/{item['id']}", params={"user_id": user_id}, json={"content": GYM}
        )
        assert edited.json()["id"] != item["id"]
        assert edited.json()["tags"] == ["health", "calendar"]

        seed = tmp_path / "seed.csv"
        seed.write_text(
            "user_id,content,type,tags\n"
            f"{user_id},{STANDUP},fact,work calendar\n"
            f"{user_id},The user prefers tea,preference,\n"
        )
        report = await _seed(app_, seed)
        assert report.added == 2, report.summary()
        jsonl = tmp_path / "seed.jsonl"
        line = {"user_id": user_id, "content": "The user likes chess", "type": "fact"}
        jsonl.write_text(json.dumps({**line, "tags": ["hobby"]}) + "\n")
        assert (await _seed(app_, jsonl)).added == 1
        # Each question has one answer in the store; the tag filter keeps the one tagged so.
        for question, tag, expected in (
            ("when is the team standup?", "work", STANDUP),
            ("which game does the user like?", "hobby", "The user likes chess"),
        ):
            ask = {"query": question, "min_score": 0.0}
            assert await _internal(client, user_id, **ask, tags=[tag]) == [expected]
        bad = tmp_path / "bad.csv"
        bad.write_text(f"user_id,content,type,tags\n{user_id},x,fact,Not-Lower\n")
        rejected = await _seed(app_, bad)
        assert rejected.added == 0 and rejected.errors, rejected.summary()
        assert "tags" in str(rejected.errors[0])
