"""Console sessions and CSRF tokens (pure), and the sign-in rules of the served console."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import SecretStr

from app.console.auth import SESSION_TTL_S, ConsoleAuth
from app.errors import EmbeddingError


def test_a_session_cookie_round_trips_and_carries_its_csrf_token() -> None:
    auth = ConsoleAuth("k" * 20, open_mode=False)
    cookie, session = auth.issue(now=1000)
    again = auth.verify(cookie, now=1001)
    assert again == session
    assert auth.csrf_ok(session, session.csrf)
    assert not auth.csrf_ok(session, None)
    assert not auth.csrf_ok(session, "")
    _, other = auth.issue(now=1000)
    assert not auth.csrf_ok(session, other.csrf)  # per session


def test_forged_expired_revoked_and_foreign_cookies_are_no_session() -> None:
    auth = ConsoleAuth("k" * 20, open_mode=False)
    cookie, session = auth.issue(now=1000)
    sid, expires, signature = cookie.split(".")
    assert auth.verify(f"{sid}.{int(expires) + 3600}.{signature}", now=1001) is None
    assert auth.verify(f"{sid}x.{expires}.{signature}", now=1001) is None
    assert auth.verify("garbage", now=1001) is None
    assert auth.verify(None) is None
    assert auth.verify(cookie, now=1000 + SESSION_TTL_S) is None  # expired
    assert ConsoleAuth("another admin key", open_mode=False).verify(cookie, now=1001) is None
    auth.revoke(session, now=1001)
    assert auth.verify(cookie, now=1002) is None


def test_the_admin_key_is_checked_and_a_console_without_one_is_off() -> None:
    auth = ConsoleAuth("right-key", open_mode=False)
    assert auth.check_key("right-key") and not auth.check_key("wrong-key")
    assert not auth.check_key("")
    off = ConsoleAuth(None, open_mode=False)
    assert not off.enabled and not off.check_key("anything")
    cookie, _ = off.issue()
    assert off.verify(cookie) is None
    dev = ConsoleAuth(None, open_mode=True)
    assert dev.enabled and dev.check_key("")


def _nonce(html: str) -> str:
    found = re.search(r'name="nonce" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


async def _sign_in(client: httpx.AsyncClient, **fields: str) -> httpx.Response:
    page = await client.get("/console/login")
    return await client.post("/console/login", data={"nonce": _nonce(page.text), **fields})


async def test_open_mode_console_needs_no_key_but_still_a_session(
    make_client: Callable[..., Any],
) -> None:
    """No keys configured (loopback-only default): one click signs in; pages still need it."""
    async with make_client() as (client, _):
        assert (await client.get("/console/users")).status_code == 303
        page = await client.get("/console/login")
        assert "Enter the console" in page.text and 'name="admin_key"' not in page.text
        r = await _sign_in(client)
        assert r.status_code == 303 and r.headers["location"] == "/console/users"
        assert (await client.get("/console/users")).status_code == 200


async def test_console_is_off_with_a_service_key_but_no_admin_key(
    make_client: Callable[..., Any],
) -> None:
    async with make_client(api_key=SecretStr("service-key-1234567890")) as (client, _):
        page = await client.get("/console/login")
        assert "PGRECALL_ADMIN_API_KEY" in page.text and 'name="admin_key"' not in page.text
        nonce = client.cookies["pgrecall_console_login"]
        r = await client.post(
            "/console/login", data={"nonce": nonce, "admin_key": "service-key-1234567890"}
        )
        assert r.status_code == 403
        assert "pgrecall_console=" not in r.headers.get("set-cookie", "")


async def test_sign_in_needs_the_login_nonce_and_never_redirects_off_site(
    make_client: Callable[..., Any],
) -> None:
    key = "admin-key-1234567890"
    async with make_client(admin_api_key=SecretStr(key)) as (client, _):
        # Without the nonce cookie's twin in the form (a cross-site login attempt): refused.
        await client.get("/console/login")
        r = await client.post("/console/login", data={"nonce": "guess", "admin_key": key})
        assert r.status_code == 403
        r = await _sign_in(client, admin_key=key, next="//evil.example/console/")
        assert r.status_code == 303 and r.headers["location"] == "/console/users"
        client.cookies.clear()
        r = await _sign_in(client, admin_key=key, next="/console/health")
        assert r.headers["location"] == "/console/health"
        set_cookie = r.headers["set-cookie"]
        assert "HttpOnly" in set_cookie and "SameSite=strict" in set_cookie
        page = await client.get("/console/health")
        assert page.headers["content-security-policy"].startswith("default-src 'none'")
        assert page.headers["cache-control"] == "no-store"


async def test_bad_input_is_a_page_naming_the_field(make_client: Callable[..., Any]) -> None:
    async with make_client() as (client, _):
        await _sign_in(client)
        r = await client.get("/console/user", params={"user": "has space"})
        assert r.status_code == 422 and "query.user" in r.text
        r = await client.get("/console/memory", params={"user": "u1", "id": "not-a-uuid"})
        assert r.status_code == 422 and "query.id" in r.text
        r = await client.post(
            "/v1/admin/memories",
            json={"user_id": f"owner-{uuid.uuid4()}", "content": "mine", "type": "fact"},
        )
        owned = r.json()["id"]
        r = await client.get("/console/memory", params={"user": "u-other", "id": owned})
        assert r.status_code == 404 and "memory not found" in r.text  # no existence leak
        assert r.headers["content-type"].startswith("text/html")
        page = await client.get("/console/user", params={"user": "u1"})
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token is not None
        r = await client.post(
            "/console/memory/create?user=u1",
            data={"csrf_token": token.group(1), "content": "x", "type": "fact", "importance": "9"},
        )
        assert r.status_code == 422 and "form.importance" in r.text
        r = await client.post(
            "/console/memory/create?user=u1",
            content=b'{"csrf_token": "x"}',
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 422 and "body" in r.text


async def test_ask_as_this_user_honours_type_and_source(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, _):
        for content, kind in (
            ("Dana owns a sailing boat", "fact"),
            ("Dana likes boat trips", "note"),
        ):
            r = await client.post(
                "/v1/admin/memories", json={"user_id": user_id, "content": content, "type": kind}
            )
            assert r.status_code == 201
        await _sign_in(client)
        page = await client.get("/console/ask", params={"user": user_id})
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token is not None
        ask = {"csrf_token": token.group(1), "query": "Dana boat"}

        async def returned(**extra: str) -> list[str]:
            r = await client.post(f"/console/ask?user={user_id}", data={**ask, **extra})
            assert r.status_code == 200, r.text
            return re.findall(
                r'<tr class="returned" data-id="[^"]+">.*?<a [^>]*>([^<]+)</a>', r.text, re.S
            )

        assert sorted(await returned()) == ["Dana likes boat trips", "Dana owns a sailing boat"]
        assert await returned(type="note") == ["Dana likes boat trips"]
        assert await returned(source="message") == []
        r = await client.post(f"/console/ask?user={user_id}", data={**ask, "type": "secret"})
        assert r.status_code == 422 and "form.type" in r.text


async def test_health_reports_a_failing_redis_and_embedder_as_failing(
    make_client: Callable[..., Any], tmp_path: Any
) -> None:
    """A dead Redis and a broken embedder are rows of the page, never a server error."""

    class BrokenEmbedder:
        model = "broken-model"
        dimension = 384

        async def embed(self, texts: Any) -> Any:
            raise EmbeddingError("the model is gone")

    missing = f"unix://{tmp_path / 'no-redis.sock'}"
    async with make_client(redis_url=missing, embedder=BrokenEmbedder()) as (client, _):
        await _sign_in(client)
        page = await client.get("/console/health")
        assert page.status_code == 200
        rows = dict(re.findall(r"<tr class=\"(?:ok|bad)\"><td>(\w+)</td><td>(\w+)</td>", page.text))
        assert rows == {
            "database": "ok",
            "migrations": "ok",
            "redis": "FAILING",
            "embedder": "FAILING",
        }


async def test_export_downloads_the_users_data_as_json_lines(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, _):
        r = await client.post(
            "/v1/admin/memories",
            json={"user_id": user_id, "content": "Eve collects stamps", "type": "fact"},
        )
        assert r.status_code == 201
        assert (await client.get("/console/export", params={"user": user_id})).status_code == 303
        await _sign_in(client)
        r = await client.get("/console/export", params={"user": user_id})
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert "attachment" in r.headers["content-disposition"]
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert lines[0]["user_id"] == user_id
        assert lines[-1]["counts"] == {"conversations": 0, "messages": 0, "memories": 1}
        assert any(line.get("content") == "Eve collects stamps" for line in lines)
