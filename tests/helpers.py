"""Small request helpers shared by the API tests."""

from __future__ import annotations

from typing import Any

import httpx


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
