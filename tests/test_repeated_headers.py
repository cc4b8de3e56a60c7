"""A repeated identity or credential header is refused (400) on every door before the door reads
it (app/middleware.py): the HTTP API, MCP, the chat proxy and the console.

Each request below is one a door accepts with every header once (the control); the same request
with one of the headers sent twice, the second naming someone else, is a 400 and does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pydantic import SecretStr

from app.middleware import IDENTITY_HEADERS, repeated_identity_header
from tests.helpers import make_key
from tests.proxy.upstream_server import Upstream

SERVICE_KEY = "service-key-0123456789"
ADMIN_KEY = "admin-key-9876543210"
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

# The header, as a client spells it, and the second value a gateway (or the client) adds.
REPEATED = {
    "X-User-Id": "someone-else",
    "Authorization": f"Bearer {ADMIN_KEY}",
    "X-Pgrecall-Key": ADMIN_KEY,
    "Cookie": "pgrecall_console=forged",
    "X-Agent-Id": "another-agent",
    "X-Run-Id": "another-run",
    "X-Scope-Mode": "inherit",
    "X-Spaces": "another-space",
    "OpenAI-Organization": "org-other",
    "OpenAI-Project": "proj-other",
}
DOORS = ("api", "mcp", "proxy", "console")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with Upstream() as server:
        yield server


def test_every_header_a_door_reads_for_identity_is_listed() -> None:
    assert {name.lower().encode(): name for name in REPEATED} == IDENTITY_HEADERS


def test_names_are_matched_in_any_case_and_other_headers_may_repeat() -> None:
    assert repeated_identity_header([(b"x-user-id", b"a"), (b"X-User-ID", b"b")]) == "X-User-Id"
    assert repeated_identity_header([(b"accept", b"a"), (b"accept", b"b")]) is None
    assert repeated_identity_header([(b"authorization", b"a"), (b"x-user-id", b"b")]) is None


def with_repeated(headers: dict[str, str], name: str) -> list[tuple[str, str]]:
    """The door's headers with `name` twice: its own value (or a plausible one) first."""
    listed = list(headers.items())
    own = headers.get(name, REPEATED[name].replace("other", "own").replace("else", "me"))
    if name not in headers:
        listed.append((name, own))
    listed.append((name, REPEATED[name]))
    return listed


@pytest.mark.parametrize("name", list(REPEATED))
@pytest.mark.parametrize("door", DOORS)
async def test_a_repeated_identity_header_is_400_on_every_door(
    make_client: Callable[..., Any], upstream: Upstream, user_id: str, door: str, name: str
) -> None:
    async with make_client(
        api_key=SecretStr(SERVICE_KEY),
        admin_api_key=SecretStr(ADMIN_KEY),
        chat_upstream_url=upstream.base,
    ) as (client, app):
        user_key = (await make_key(app, user_id)).token
        requests: dict[str, tuple[str, str, Any, dict[str, str], int]] = {
            "api": (
                "POST",
                "/v1/conversations",
                {"title": "t"},
                {"Authorization": f"Bearer {SERVICE_KEY}", "X-User-Id": user_id},
                201,
            ),
            "mcp": (
                "POST",
                "/mcp",
                TOOLS_LIST,
                {**MCP_HEADERS, "Authorization": f"Bearer {user_key}", "X-User-Id": user_id},
                200,
            ),
            "proxy": (
                "POST",
                "/v1/chat/completions",
                CHAT,
                {
                    "X-Pgrecall-Key": SERVICE_KEY,
                    "X-User-Id": user_id,
                    "Authorization": "Bearer sk-upstream-own",
                },
                200,
            ),
            # No session: the console sends the browser to its login page.
            "console": ("GET", "/console/users", None, {}, 303),
        }
        method, path, body, headers, accepted = requests[door]

        refused = await client.request(
            method, path, json=body, headers=with_repeated(headers, name)
        )
        assert refused.status_code == 400, refused.text
        assert refused.json() == {
            "error": "RepeatedHeaderError",
            "detail": f"header {name} is sent more than once: send it once",
        }
        assert "x-correlation-id" in refused.headers
        assert upstream.seen == []  # the proxy did not get as far as the upstream

        control = await client.request(method, path, json=body, headers=headers)
        assert control.status_code == accepted, control.text
        if door == "api":  # only the control's conversation exists: the refused one did nothing
            listed = await client.get("/v1/conversations", headers=headers)
            assert len(listed.json()["items"]) == 1, listed.text
