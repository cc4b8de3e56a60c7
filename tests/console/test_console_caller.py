"""The console's pages of one user get their user from app.runtime.identity.resolve_caller, the
rules every door applies: the signed-in admin is trusted and names the user in `?user=`; an id
resolve_caller refuses is refused by the console as by the HTTP API."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.console import user_data, user_routes, web
from app.errors import ValidationFailedError
from app.runtime import identity

REASON = "must be 1-255 printable ASCII characters, no spaces"
# Refused by resolve_caller: empty, a space, one character too many, a control character,
# beyond ASCII.
BAD_IDS = ["", "has space", "x" * 256, "tab\there", "caf\u00e9"]


async def _sign_in(client: httpx.AsyncClient) -> None:
    page = await client.get("/console/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
    assert nonce is not None
    r = await client.post("/console/login", data={"nonce": nonce.group(1)})
    assert r.status_code == 303


def _csrf(html: str) -> str:
    token = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert token is not None
    return token.group(1)


def _dependants(dependant: Dependant) -> Iterator[Dependant]:
    yield dependant
    for sub in dependant.dependencies:
        yield from _dependants(sub)


def test_every_page_of_one_user_reads_its_user_through_console_caller() -> None:
    routes = [
        r for r in (*user_routes.router.routes, *user_data.router.routes) if isinstance(r, APIRoute)
    ]
    assert len(routes) >= 13
    for route in routes:
        readers = [
            d.call
            for d in _dependants(route.dependant)
            for p in d.query_params
            if p.alias == "user"
        ]
        assert readers and set(readers) == {web.console_caller}, route.path


async def test_console_pages_ask_resolve_caller_as_a_trusted_operator(
    make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str | None, str | None, dict[str, Any]]] = []
    real = identity.resolve_caller

    async def spy(resources: Any, token: str | None, claimed: str | None, **kw: Any) -> Any:
        calls.append((token, claimed, kw))
        return await real(resources, token, claimed, **kw)

    monkeypatch.setattr(web, "resolve_caller", spy)
    user = f"caller-{uuid.uuid4().hex[:8]}"
    async with make_client() as (client, _):
        await _sign_in(client)
        assert calls == []  # pages that span users name nobody
        assert (await client.get("/console/users")).status_code == 200
        assert calls == []
        page = await client.get("/console/ask", params={"user": user})
        assert page.status_code == 200
        r = await client.post(
            f"/console/ask?user={user}", data={"csrf_token": _csrf(page.text), "query": "tea?"}
        )
        assert r.status_code == 200
        assert (await client.get("/console/export", params={"user": user})).status_code == 200
    kw = {"trusted": True, "user_field": "query.user", "claim": identity.NO_CLAIM}
    expected = (None, user, kw)
    assert calls == [expected] * 3


@pytest.mark.parametrize("bad", BAD_IDS, ids=["empty", "space", "256", "control", "non-ascii"])
async def test_an_id_resolve_caller_refuses_is_refused_by_the_console_as_by_http(
    make_client: Callable[..., Any], bad: str
) -> None:
    async with make_client() as (client, app):
        resources = app.state.resources
        with pytest.raises(ValidationFailedError) as refused:
            await identity.resolve_caller(resources, None, bad, trusted=True)
        assert refused.value.message == f"header.X-User-Id: {REASON}"

        r = await client.get("/v1/conversations", headers={"X-User-Id": bad.encode()})
        assert r.status_code == 422
        assert r.json()["fields"] == [
            {"field": "header.X-User-Id", "reason": f"header.X-User-Id: {REASON}"}
        ]

        # Signed out: the sign-in comes first, whatever the user id.
        r = await client.get("/console/user", params={"user": bad})
        assert r.status_code == 303 and r.headers["location"].startswith("/console/login")

        await _sign_in(client)
        token = _csrf((await client.get("/console/users")).text)
        pages = ["/user", "/conversations", "/ask", "/export", "/purge"]
        for path in pages:
            r = await client.get(f"/console{path}", params={"user": bad})
            assert r.status_code == 422, path
            assert r.headers["content-type"].startswith("text/html"), path
            assert f"query.user: {REASON}" in r.text, path
        forms = {"/ask": {"query": "tea?"}, "/purge": {"confirm": bad}, "/memory/create": {}}
        for path, fields in forms.items():
            r = await client.post(
                f"/console{path}", params={"user": bad}, data={"csrf_token": token, **fields}
            )
            assert r.status_code == 422 and f"query.user: {REASON}" in r.text, path


async def test_a_page_of_one_user_without_a_user_is_refused(
    make_client: Callable[..., Any],
) -> None:
    async with make_client() as (client, _):
        await _sign_in(client)
        r = await client.get("/console/user")
        assert r.status_code == 422 and "query.user: Field required" in r.text
