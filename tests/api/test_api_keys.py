"""Per-user API keys: the key fixes the user, scope limits writes, revoked/expired keys fail."""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import user_session
from app.services.api_keys import ApiKeyService, parse_duration
from tests.helpers import headers, make_key

SERVICE_KEY = "service-key-0123456789"
ADMIN_KEY = "admin-key-9876543210"


async def owner(engine: AsyncEngine, conversation_id: str) -> str:
    async with engine.connect() as conn:
        sql = text("SELECT user_id FROM conversations WHERE id = CAST(:id AS uuid)")
        return str(await conn.scalar(sql, {"id": conversation_id}))


def bearer(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


@pytest.fixture(params=["secured", "open"])
async def env(
    request: pytest.FixtureRequest, make_client: Callable[..., Any]
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    """The same rules with service keys configured and with auth off (loopback default)."""
    keys: dict[str, Any] = {"key_cache_ttl_s": 0.0}
    if request.param == "secured":
        keys |= {"api_key": SecretStr(SERVICE_KEY), "admin_api_key": SecretStr(ADMIN_KEY)}
    async with make_client(**keys) as pair:
        yield pair


async def test_only_the_hash_is_stored(
    env: tuple[httpx.AsyncClient, FastAPI], db_engine: AsyncEngine, user_id: str
) -> None:
    _, app = env
    created = await make_key(app, user_id)
    assert created.token.startswith("pgr_") and len(created.token) > 40
    async with db_engine.connect() as conn:
        row = (
            (
                await conn.execute(
                    text("SELECT * FROM api_keys WHERE id = :id"), {"id": created.key.id}
                )
            )
            .mappings()
            .one()
        )
    assert row["key_hash"] == hashlib.sha256(created.token.encode()).hexdigest()
    assert all(created.token not in str(value) for value in row.values())
    assert row["prefix"] == created.token[:12]


async def test_the_key_fixes_the_user(
    env: tuple[httpx.AsyncClient, FastAPI],
    db_engine: AsyncEngine,
    user_id: str,
    other_user_id: str,
) -> None:
    client, app = env
    token = (await make_key(app, user_id)).token
    made = await client.post("/v1/conversations", json={"title": "mine"}, headers=bearer(token))
    assert made.status_code == 201, made.text
    assert await owner(db_engine, made.json()["id"]) == user_id

    same = await client.get("/v1/conversations", headers=bearer(token, **headers(user_id)))
    assert same.status_code == 200
    assert [c["id"] for c in same.json()["items"]] == [made.json()["id"]]

    # Naming another user next to the key is refused, on reads and writes alike.
    for method, path in (("GET", "/v1/conversations"), ("POST", "/v1/conversations")):
        spoofed = await client.request(
            method, path, json={}, headers=bearer(token, **headers(other_user_id))
        )
        assert spoofed.status_code == 403, spoofed.text
        assert spoofed.json()["error"] == "PermissionDeniedError"
    theirs = await client.get(
        f"/v1/conversations/{made.json()['id']}",
        headers=bearer((await make_key(app, other_user_id)).token),
    )
    assert theirs.status_code == 404


async def test_read_scope_cannot_write(
    env: tuple[httpx.AsyncClient, FastAPI], user_id: str
) -> None:
    client, app = env
    token = (await make_key(app, user_id, scope="read")).token
    assert (await client.get("/v1/conversations", headers=bearer(token))).status_code == 200
    assert (await client.get("/v1/tools", headers=bearer(token))).status_code == 200
    query = await client.post(
        "/v1/tools/query_memory", json={"query": "anything"}, headers=bearer(token)
    )
    assert query.status_code == 200
    refused = await client.post("/v1/conversations", json={}, headers=bearer(token))
    assert refused.status_code == 403
    assert refused.json()["detail"] == "this API key is read-only"


async def test_revoked_and_expired_keys_are_401(
    env: tuple[httpx.AsyncClient, FastAPI], user_id: str
) -> None:
    client, app = env
    created = await make_key(app, user_id)
    assert (await client.get("/v1/conversations", headers=bearer(created.token))).status_code == 200
    async with user_session(app.state.resources.sessionmaker, user_id) as session, session.begin():
        await ApiKeyService(session).revoke(created.key.id)
    revoked = await client.get("/v1/conversations", headers=bearer(created.token))
    assert revoked.status_code == 401
    assert revoked.json()["detail"] == "API key revoked"

    expired = await make_key(app, user_id, expires_in=timedelta(seconds=-1))
    response = await client.get("/v1/conversations", headers=bearer(expired.token))
    assert response.status_code == 401
    assert response.json()["detail"] == "API key expired"


async def test_unknown_key_is_403(env: tuple[httpx.AsyncClient, FastAPI], user_id: str) -> None:
    client, _ = env
    fake = "pgr_" + uuid.uuid4().hex
    response = await client.get("/v1/conversations", headers=bearer(fake, **headers(user_id)))
    assert response.status_code == 403


async def test_user_keys_never_open_admin_routes(
    env: tuple[httpx.AsyncClient, FastAPI], user_id: str
) -> None:
    client, app = env
    token = (await make_key(app, user_id)).token
    response = await client.get(
        "/v1/admin/memories", params={"user_id": user_id}, headers=bearer(token)
    )
    # With no service or admin key configured (loopback only) the admin API is open to anyone
    # on the machine, key or not (documented local default); otherwise a user key never opens it.
    open_admin = app.state.resources.admin_api_key is None and app.state.resources.api_key is None
    assert response.status_code == (200 if open_admin else 403)


async def test_service_key_still_names_the_user(
    make_client: Callable[..., Any], db_engine: AsyncEngine
) -> None:
    async with make_client(api_key=SecretStr(SERVICE_KEY)) as (client, _):
        user = f"svc-{uuid.uuid4()}"
        made = await client.post(
            "/v1/conversations", json={}, headers=bearer(SERVICE_KEY, **headers(user))
        )
        assert made.status_code == 201
        assert await owner(db_engine, made.json()["id"]) == user
        missing = await client.get("/v1/conversations", headers=bearer(SERVICE_KEY))
        assert missing.status_code == 422


async def test_revocation_is_seen_within_the_cache_period(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(key_cache_ttl_s=3600.0) as (client, app):
        created = await make_key(app, user_id)
        assert (
            await client.get("/v1/conversations", headers=bearer(created.token))
        ).status_code == 200
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            await ApiKeyService(session).revoke(created.key.id)
        # Within the period the cached row still answers: that is the documented bound.
        cached = await client.get("/v1/conversations", headers=bearer(created.token))
        assert cached.status_code == 200
        app.state.resources.keys.forget()  # the period elapses
        after = await client.get("/v1/conversations", headers=bearer(created.token))
        assert after.status_code == 401


async def test_a_burst_with_one_uncached_key_reads_its_row_once(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """50 requests at once with a key not cached yet share one lookup (a burst of MCP streams
    otherwise took a connection each and emptied the pool: 503s)."""
    async with make_client(key_cache_ttl_s=60.0) as (client, app):
        created = await make_key(app, user_id)
        lookups: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if "FROM api_keys" in statement and "key_hash" in statement:
                lookups.append(statement)

        engine = app.state.resources.engine.sync_engine
        event.listen(engine, "before_cursor_execute", seen)
        try:
            answers = await asyncio.gather(
                *(client.get("/v1/conversations", headers=bearer(created.token)) for _ in range(50))
            )
        finally:
            event.remove(engine, "before_cursor_execute", seen)
        assert [a.status_code for a in answers] == [200] * 50
        assert len(lookups) == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_parse_duration(value: str, expected: timedelta) -> None:
    assert parse_duration(value) == expected


@pytest.mark.parametrize("value", ["", "0d", "30", "d", "-1d", "1y", "1.5d", "1000000d"])
def test_parse_duration_rejects(value: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(value)
