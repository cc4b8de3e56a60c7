"""The user directory: ids matched literally (LIKE wildcards are text), counts per user."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from app.db import admin_sessions
from app.repositories.users import like_pattern
from app.services.users import UserDirectoryService


def test_like_pattern_escapes_wildcards() -> None:
    assert like_pattern("a_b%c\\d") == "%a\\_b\\%c\\\\d%"


async def test_users_are_found_by_a_literal_part_of_their_id(
    make_client: Callable[..., Any],
) -> None:
    tag = uuid.uuid4().hex[:10]
    literal, lookalike = f"dir_{tag}-a", f"dirx{tag}-b"
    async with make_client() as (client, app):
        for user, n in ((literal, 2), (lookalike, 1)):
            for i in range(n):
                r = await client.post(
                    "/v1/admin/memories",
                    json={"user_id": user, "content": f"note {i} of {user}", "type": "note"},
                )
                assert r.status_code == 201
        r = await client.post("/v1/conversations", json={}, headers={"X-User-Id": literal})
        assert r.status_code == 201
        deleted = (
            await client.get("/v1/admin/memories", params={"user_id": literal, "limit": 1})
        ).json()["items"][0]["id"]
        r = await client.delete(f"/v1/admin/memories/{deleted}", params={"user_id": literal})
        assert r.status_code == 204
        sessions = admin_sessions(app.state.resources.sessionmaker, "test")
        async with sessions() as session:
            service = UserDirectoryService(session)
            rows, total = await service.page(f"dir_{tag}", limit=50, offset=0)
            assert total == 1
            assert [
                (r.user_id, r.conversations, r.messages, r.memories, r.deleted_memories)
                for r in rows
            ] == [(literal, 1, 0, 1, 1)]
            rows, total = await service.page(tag, limit=1, offset=1)
            assert total == 2 and [r.user_id for r in rows] == [lookalike]
            nobody = await service.counts(f"nobody-{tag}")
            assert (nobody.conversations, nobody.memories) == (0, 0)
