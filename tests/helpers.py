"""Small helpers shared by the tests: requests, and vectors as the store gives them back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI

from app.db import user_session
from app.services.api_keys import ApiKeyService, CreatedKey


def as_stored(vector: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A float32 vector as a halfvec column gives it back (app/vectors.py): every value
    rounded to half precision, as Postgres rounds it on the way in."""
    return np.asarray(vector, dtype=np.float32).astype(np.float16).astype(np.float32)


def headers(user: str, **extra: str) -> dict[str, str]:
    return {"X-User-Id": user, **extra}


async def new_conversation(client: httpx.AsyncClient, user: str, title: str | None = None) -> str:
    response = await client.post("/v1/conversations", json={"title": title}, headers=headers(user))
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def add_messages(
    client: httpx.AsyncClient, user: str, contents: list[str], conversation: str | None = None
) -> list[dict[str, Any]]:
    cid = conversation or await new_conversation(client, user)
    response = await client.post(
        f"/v1/conversations/{cid}/messages:bulk",
        json={"messages": [{"role": "user", "content": c} for c in contents]},
        headers=headers(user),
    )
    assert response.status_code == 201, response.text
    return list(response.json()["items"])


async def ask_after_one_turn(client: httpx.AsyncClient, user: str) -> dict[str, Any]:
    """Store one turn for `user`, then ask memory about it: the query path end to end."""
    await add_messages(client, user, ["My greyhound Pixel loves the beach"])
    response = await client.post(
        "/v1/memory/query",
        json={"query": "greyhound beach", "min_score": 0.0},
        headers=headers(user),
    )
    assert response.status_code == 200 and response.json()["items"], response.text
    return dict(response.json())


async def make_key(app: FastAPI, user: str, scope: str = "write", **kw: Any) -> CreatedKey:
    """A per-user API key stored as the service stores it (as that user, under RLS)."""
    sessions = app.state.resources.sessionmaker
    async with user_session(sessions, user) as session, session.begin():
        return await ApiKeyService(session).create(user, scope, **kw)


async def ranked_contents(client: httpx.AsyncClient, user: str, question: str) -> list[str]:
    """The plain ranking's contents for a question (min_score 0: no floor, no relative cut)."""
    response = await client.post(
        "/v1/memory/query", json={"query": question, "min_score": 0.0}, headers=headers(user)
    )
    assert response.status_code == 200, response.text
    return [i["content"] for i in response.json()["items"]]


async def shared_space(
    client: httpx.AsyncClient,
    space: str,
    grants: dict[str, str],
    *,
    writer: str | None = None,
    content: str | Sequence[str] | None = None,
    admin: Mapping[str, str] | None = None,
    member: Mapping[str, str] | None = None,
) -> list[str]:
    """A shared space with these grants (user -> read | write), made through the admin routes
    (with `admin`'s headers, e.g. the admin key); with `content` (one text or several),
    `writer` saves it into the space as a member does (with `member`'s headers besides its
    X-User-Id). The saved memories' ids."""
    made = await client.post("/v1/admin/spaces", json={"id": space}, headers=admin)
    assert made.status_code == 201, made.text
    for user, access in grants.items():
        grant = await client.put(
            f"/v1/admin/spaces/{space}/members/{user}", json={"access": access}, headers=admin
        )
        assert grant.status_code == 200, grant.text
    texts = [content] if isinstance(content, str) else list(content or ())
    ids = []
    for text in texts:
        assert writer is not None
        saved = await client.post(
            f"/v1/spaces/{space}/memories",
            json={"content": text, "type": "fact"},
            headers={**(member or {}), "X-User-Id": writer},
        )
        assert saved.status_code == 201, saved.text
        ids.append(str(saved.json()["memory"]["id"]))
    return ids
