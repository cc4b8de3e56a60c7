"""Memory scopes over MCP on HTTP (issue 43, docs/agents.md): per-user keys bound to agents, and
X-Agent-Id, X-Run-Id, X-Scope-Mode and X-Spaces on /mcp. The tools' schemas are those of an
unscoped session: the scope travels in the headers only."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import FastAPI
from mcp import Client

from tests.helpers import make_key, shared_space


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    return dict(result.structured_content or {})


async def contents(client: Client, query: str) -> dict[str, dict[str, Any]]:
    found = await call(client, "query_memory", query=query)
    return {m["content"]: m for m in found["memories"]}


async def tool_schemas(client: Client) -> dict[str, Any]:
    return {t.name: (t.input_schema, t.output_schema) for t in (await client.list_tools()).tools}


async def test_agents_never_see_each_others_memory(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app):
        token = (await make_key(app, user_id)).token
        mail_key = (await make_key(app, user_id, agent_id="mail")).token
        async with mcp_client(app, token) as plain:
            unscoped_schemas = await tool_schemas(plain)
            await call(plain, "save_memory", content="The user lives in Porto", type="fact")
        async with mcp_client(app, mail_key) as mail:
            assert await tool_schemas(mail) == unscoped_schemas
            await call(
                mail, "save_memory", content="The mail signature is Kind regards", type="fact"
            )
        async with mcp_client(app, token, **{"X-Agent-Id": "calendar"}) as calendar:
            assert await tool_schemas(calendar) == unscoped_schemas
            await call(
                calendar, "save_memory", content="The default meeting slot is 30 min", type="fact"
            )
            seen = await contents(calendar, "mail signature meeting slot Porto")
            assert "The default meeting slot is 30 min" in seen
            assert not [c for c in seen if "signature" in c]
            assert "The user lives in Porto" in await contents(calendar, "where does the user live")
            listed = await call(calendar, "list_memories", limit=50)
            assert not [m for m in listed["items"] if "signature" in m["content"]]
        async with mcp_client(app, mail_key) as mail:
            seen = await contents(mail, "mail signature meeting slot")
            assert "The mail signature is Kind regards" in seen
            assert not [c for c in seen if "30 min" in c]
        own = {"X-Agent-Id": "calendar", "X-Scope-Mode": "own"}
        async with mcp_client(app, token, **own) as calendar_only:
            assert not await contents(calendar_only, "where does the user live in Porto")
        # a key bound to the mail agent cannot act as the calendar agent
        refused = await _initialize(app, mail_key, {"X-Agent-Id": "calendar"})
        assert refused.status_code == 403, refused.text
        bad = await _initialize(app, token, {"X-Scope-Mode": "mine"})
        assert bad.status_code == 422 and "X-Scope-Mode" in bad.text


async def _initialize(app: FastAPI, token: str, headers: dict[str, str]) -> httpx.Response:
    """The first request of an MCP session, as raw HTTP (to read a refusal's status)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return await http.post(
            "/mcp",
            json=body,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
        )


async def test_spaces_over_mcp(
    make_client: Callable[..., Any],
    mcp_client: Callable[..., Any],
    user_id: str,
    other_user_id: str,
) -> None:
    space = f"team-{uuid.uuid4().hex[:8]}"
    writer = f"writer-{uuid.uuid4()}"
    async with make_client() as (http, app):
        await shared_space(
            http,
            space,
            {writer: "write", user_id: "read"},
            writer=writer,
            content="The team's on-call rotation starts on Mondays",
        )
        reader_key = (await make_key(app, user_id)).token
        outsider_key = (await make_key(app, other_user_id)).token
        question = "when does the on-call rotation start"
        headers = {"X-Agent-Id": "helper", "X-Spaces": space}
        async with mcp_client(app, reader_key, **headers) as reader:
            seen = await contents(reader, question)
            assert seen["The team's on-call rotation starts on Mondays"]["space"] == space
            found = await call(reader, "query_memory", query=question)
            assert f'space="{space}"' in found["formatted"]
            # a read grant cannot write into the space: a save is the reader's agent's own
            await call(reader, "save_memory", content="The on-call pager is pager-5", type="fact")
            as_writer = await http.post(
                "/v1/memory/query",
                json={"query": "on-call pager", "min_score": 0.0},
                headers={"X-User-Id": writer, "X-Spaces": space},
            )
            assert not [i for i in as_writer.json()["items"] if "pager-5" in i["content"]]
            # revoked while the session is open: the next call reads nothing of the space
            gone = await http.delete(f"/v1/admin/spaces/{space}/members/{user_id}")
            assert gone.status_code == 204
            assert not [c for c in await contents(reader, question) if "rotation" in c]
        # a non-member naming the space reads nothing of it
        async with mcp_client(app, outsider_key, **{"X-Spaces": space}) as outsider:
            assert not [c for c in await contents(outsider, question) if "rotation" in c]
        # own mode reads no space
        own = {"X-Agent-Id": "helper", "X-Scope-Mode": "own", "X-Spaces": space}
        async with mcp_client(app, (await make_key(app, writer)).token, **own) as writer_own:
            assert not [c for c in await contents(writer_own, question) if "rotation" in c]
