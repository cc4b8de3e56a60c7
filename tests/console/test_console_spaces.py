"""The console's spaces pages (list, create, members, grant, revoke, delete: CSRF-checked forms,
422 pages naming the field) and "Ask as this user" in an agent's scope and with spaces named in
its query parameters (issue 43, docs/agents.md)."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.console.test_console_caller import _csrf, _sign_in
from tests.helpers import shared_space


async def _token(client: httpx.AsyncClient) -> str:
    return _csrf((await client.get("/console/spaces")).text)


async def test_spaces_pages_create_grant_revoke_delete(make_client: Callable[..., Any]) -> None:
    space = f"team-{uuid.uuid4().hex[:8]}"
    user = f"mia-{uuid.uuid4()}"
    async with make_client() as (client, _):
        await _sign_in(client)
        token = await _token(client)
        made = await client.post(
            "/console/spaces", data={"csrf_token": token, "id": space, "description": "on-call"}
        )
        assert made.status_code == 303
        assert made.headers["location"] == f"/console/space?id={space}&notice=space+created"
        listed = await client.get("/console/spaces")
        assert f"<code>{space}</code>" in listed.text and "on-call" in listed.text
        again = await client.post("/console/spaces", data={"csrf_token": token, "id": space})
        assert again.status_code == 409 and "exists" in again.text

        grant = f"/console/space/grant?id={space}"
        r = await client.post(grant, data={"csrf_token": token, "user": user, "access": "read"})
        assert r.status_code == 303
        r = await client.post(grant, data={"csrf_token": token, "user": user, "access": "write"})
        assert r.status_code == 303
        page = await client.get("/console/space", params={"id": space})
        assert page.status_code == 200
        (row,) = re.findall(r"<tr>\s*<td><a [^>]*>([^<]+)</a></td>\s*<td>(\w+)</td>", page.text)
        assert row == (user, "write")
        api = await client.get(f"/v1/admin/spaces/{space}/members")
        assert [(m["user_id"], m["access"]) for m in api.json()["members"]] == [(user, "write")]

        revoke = f"/console/space/revoke?id={space}"
        assert (
            await client.post(revoke, data={"csrf_token": token, "user": user})
        ).status_code == 303
        assert (await client.get(f"/v1/admin/spaces/{space}/members")).json()["members"] == []
        missing = await client.post(revoke, data={"csrf_token": token, "user": user})
        assert missing.status_code == 404 and "no such member" in missing.text

        delete = f"/console/space/delete?id={space}"
        wrong = await client.post(delete, data={"csrf_token": token, "confirm": "nope"})
        assert wrong.status_code == 422 and "form.confirm" in wrong.text
        gone = await client.post(delete, data={"csrf_token": token, "confirm": space})
        assert gone.status_code == 303
        assert (await client.get("/console/space", params={"id": space})).status_code == 404
        assert space not in (await client.get("/console/spaces")).text


@pytest.mark.parametrize(
    ("path", "fields", "named"),
    [
        ("/console/spaces", {"id": "Team"}, "form.id"),
        ("/console/spaces", {"id": "t", "description": "x" * 1001}, "form.description"),
        ("/console/space/grant?id=t", {"user": "has space", "access": "read"}, "form.user"),
        ("/console/space/grant?id=t", {"user": "u", "access": "admin"}, "form.access"),
        ("/console/space/revoke?id=t", {"user": ""}, "form.user"),
        ("/console/space/revoke?id=T", {"user": "u"}, "query.id"),
    ],
)
async def test_bad_input_is_a_422_page_naming_the_field(
    make_client: Callable[..., Any], path: str, fields: dict[str, str], named: str
) -> None:
    async with make_client() as (client, _):
        await _sign_in(client)
        r = await client.post(path, data={"csrf_token": await _token(client), **fields})
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("text/html") and named in r.text


async def test_forms_without_the_csrf_token_are_refused(make_client: Callable[..., Any]) -> None:
    async with make_client() as (client, _):
        await _sign_in(client)
        r = await client.post("/console/spaces", data={"id": "sneaky"})
        assert r.status_code == 403
        assert "sneaky" not in (await client.get("/console/spaces")).text


async def _ask(client: httpx.AsyncClient, question: str, **params: str) -> httpx.Response:
    page = await client.get("/console/ask", params=params)
    assert page.status_code == 200, page.text
    return await client.post(
        "/console/ask", params=params, data={"csrf_token": _csrf(page.text), "query": question}
    )


def _formatted(page: httpx.Response) -> str:
    assert page.status_code == 200, page.text
    block = re.search(r'<pre class="text block" id="formatted">(.*?)</pre>', page.text, re.S)
    assert block is not None
    return html.unescape(block.group(1))


async def test_ask_as_an_agent_and_with_spaces(
    make_client: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    space = f"team-{uuid.uuid4().hex[:8]}"
    writer = f"writer-{uuid.uuid4()}"
    async with make_client() as (client, _):

        async def save(headers: dict[str, str], content: str) -> None:
            r = await client.post(
                "/v1/tools/save_memory", json={"content": content, "type": "fact"}, headers=headers
            )
            assert r.status_code == 200, r.text

        await save(
            {"X-User-Id": user_id, "X-Agent-Id": "support"}, "The support ticket is walrus-71"
        )
        await save({"X-User-Id": user_id, "X-Agent-Id": "coder"}, "The coder's ticket is osprey-22")
        await shared_space(
            client,
            space,
            {writer: "write", user_id: "read"},
            writer=writer,
            content="The team's on-call rotation starts on Mondays",
        )

        await _sign_in(client)
        whole = _formatted(await _ask(client, "which ticket", user=user_id))
        assert "walrus-71" in whole and "osprey-22" in whole
        coder = _formatted(await _ask(client, "which ticket", user=user_id, agent_id="coder"))
        assert "osprey-22" in coder and "walrus-71" not in coder
        # an empty field of the scope form is no scope
        blank = await _ask(client, "which ticket", user=user_id, agent_id="", spaces="")
        assert "walrus-71" in _formatted(blank)

        question = "when does the on-call rotation start"
        assert "rotation" not in _formatted(await _ask(client, question, user=user_id))
        page = await _ask(client, question, user=user_id, agent_id="coder", spaces=space)
        assert "rotation starts on Mondays" in _formatted(page)
        assert f'space="{space}"' in _formatted(page)
        assert f"space {space}" in page.text  # the candidate's row says where it lives
        # the scope rides on the ask form's action, so the next question keeps it
        assert f"agent_id=coder&amp;spaces={space}" in page.text
        outsider = await _ask(client, question, user=other_user_id, spaces=space)
        assert "rotation" not in _formatted(outsider)
        own = await _ask(
            client, question, user=user_id, agent_id="coder", scope_mode="own", spaces=space
        )
        assert "rotation" not in _formatted(own)
        revoked = await client.delete(f"/v1/admin/spaces/{space}/members/{user_id}")
        assert revoked.status_code == 204
        after = await _ask(client, question, user=user_id, spaces=space)
        assert "rotation" not in _formatted(after)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"agent_id": "has space"}, "query.agent_id"),
        ({"run_id": "x" * 256}, "query.run_id"),
        ({"scope_mode": "mine"}, "query.scope_mode"),
        ({"agent_id": "a", "scope_mode": "mine"}, "query.scope_mode"),
        ({"spaces": "Team"}, "query.spaces"),
    ],
)
async def test_a_bad_scope_is_a_422_page_naming_the_parameter(
    make_client: Callable[..., Any], user_id: str, params: dict[str, str], named: str
) -> None:
    async with make_client() as (client, _):
        await _sign_in(client)
        r = await client.get("/console/ask", params={"user": user_id, **params})
    assert r.status_code == 422 and named in r.text


async def test_a_space_is_not_a_user_in_the_directory(make_client: Callable[..., Any]) -> None:
    """A space's memories are rows of the owner `space:<id>`: the user directory leaves them
    out (a link to such a "user" could only be refused)."""
    space = f"dir-{uuid.uuid4().hex[:8]}"
    member = f"dir-member-{uuid.uuid4().hex[:8]}"
    async with make_client() as (client, _):
        await shared_space(
            client, space, {member: "write"}, writer=member, content="The directory test's note"
        )
        await _sign_in(client)
        page = await client.get("/console/users", params={"q": space})
        assert page.status_code == 200
        assert f"space:{space}" not in page.text and "0 users" in page.text
