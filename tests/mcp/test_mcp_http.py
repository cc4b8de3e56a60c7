"""MCP over streamable HTTP: the SDK's client against the real app and its real servers."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client

from tests.helpers import make_key

TOOLS = {
    "query_memory",
    "save_memory",
    "forget_memory",
    "rate_message",
    "list_memories",
    "search_conversations",
}


async def call(client: Client, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, result.content
    return dict(result.structured_content or {})


async def test_tools_save_search_forget(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app):
        token = (await make_key(app, user_id)).token
        async with mcp_client(app, token) as client:
            listed = await client.list_tools()
            assert {t.name for t in listed.tools} == TOOLS
            for tool in listed.tools:  # the user is never an argument
                properties = tool.input_schema.get("properties", {})
                assert not {"user", "user_id", "userId"} & set(properties), tool.name

            saved = await call(
                client, "save_memory", content="I keep bees on my allotment", type="fact"
            )
            assert saved["action"] == "added"
            item = saved["memory"]["id"]
            found = await call(client, "query_memory", query="what animals do I keep?")
            assert [m["id"] for m in found["memories"]] == [item]
            assert "<memories>" in found["formatted"]
            page = await call(client, "list_memories", limit=10)
            assert [m["id"] for m in page["items"]] == [item] and page["total"] == 1

            forgotten = await call(client, "forget_memory", id=item)
            assert forgotten == {"id": item, "forgotten": True}
            after = await call(client, "query_memory", query="what animals do I keep?")
            assert after["memories"] == []
            assert (await call(client, "list_memories"))["total"] == 0


async def test_legacy_handshake_clients_work_too(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app):
        token = (await make_key(app, user_id)).token
        async with mcp_client(app, token, mode="legacy") as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            saved = await call(client, "save_memory", content="I ride a tandem", type="fact")
            found = await call(client, "query_memory", query="what bicycle do I ride?")
            assert saved["memory"]["id"] in {m["id"] for m in found["memories"]}


async def test_a_key_never_reaches_another_users_data(
    make_client: Callable[..., Any],
    mcp_client: Callable[..., Any],
    user_id: str,
    other_user_id: str,
) -> None:
    async with make_client() as (http, app):
        a, b = (await make_key(app, user_id)).token, (await make_key(app, other_user_id)).token
        conversation = await http.post(
            "/v1/conversations", json={}, headers={"Authorization": f"Bearer {b}"}
        )
        cid = conversation.json()["id"]
        await http.post(
            f"/v1/conversations/{cid}/messages",
            json={"role": "user", "content": "My locker code is 4417 at the pool"},
            headers={"Authorization": f"Bearer {b}"},
        )
        async with mcp_client(app, b) as client:
            secret = await call(
                client, "save_memory", content="My bank PIN hint is the pool locker", type="note"
            )
        secret_id = secret["memory"]["id"]

        async with mcp_client(app, a) as client:
            for query in ("locker code pool", "bank PIN hint", other_user_id, secret_id):
                found = await call(client, "query_memory", query=query)
                assert found["memories"] == [], query
                turns = await call(client, "search_conversations", query=query)
                assert turns["messages"] == [], query
            assert (await call(client, "list_memories"))["total"] == 0
            # B's ids through every id-taking argument: not found, nothing changed.
            refused = await client.call_tool("forget_memory", {"id": secret_id})
            assert refused.is_error and "NotFoundError" in refused.content[0].text
            superseding = await client.call_tool(
                "save_memory", {"content": "x", "type": "note", "supersedes": secret_id}
            )
            assert superseding.is_error and "NotFoundError" in superseding.content[0].text
            # A user named in arguments is refused as an unknown argument, never obeyed.
            sneaky = await client.call_tool(
                "query_memory", {"query": "bank PIN hint", "user_id": other_user_id}
            )
            assert sneaky.is_error, sneaky.structured_content
            assert sneaky.content[0].text.startswith("ValidationError: user_id: Extra inputs")
            assert "4417" not in json.dumps(sneaky.structured_content or {})

        async with mcp_client(app, b) as client:
            still = await call(client, "query_memory", query="bank PIN hint")
            assert secret_id in {m["id"] for m in still["memories"]}


async def test_read_key_cannot_save_or_forget(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app):
        writer, reader = (
            (await make_key(app, user_id)).token,
            (await make_key(app, user_id, scope="read")).token,
        )
        async with mcp_client(app, writer) as client:
            item = await call(client, "save_memory", content="I speak Welsh", type="fact")
        async with mcp_client(app, reader) as client:
            found = await call(client, "query_memory", query="which languages do I speak?")
            assert item["memory"]["id"] in {m["id"] for m in found["memories"]}
            for name, args in (
                ("save_memory", {"content": "I speak Breton", "type": "fact"}),
                ("forget_memory", {"id": item["memory"]["id"]}),
            ):
                result = await client.call_tool(name, args)
                assert result.is_error and "read-only" in result.content[0].text
            assert (await call(client, "list_memories"))["total"] == 1


async def test_endpoint_refuses_bad_credentials(
    make_client: Callable[..., Any], user_id: str, other_user_id: str
) -> None:
    from pydantic import SecretStr

    from app.db import user_session
    from app.services.api_keys import ApiKeyService
    from tests.mcp.conftest import http_client

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    async with make_client(api_key=SecretStr("service-key-0123456789"), key_cache_ttl_s=0.0) as (
        _,
        app,
    ):
        created = await make_key(app, user_id)
        cases: list[tuple[str | None, dict[str, str], int]] = [
            (None, {}, 401),
            ("service-key-0123456789", {}, 403),  # a trusted service key names no user here
            ("pgr_unknown", {}, 403),
            (created.token, {"X-User-Id": other_user_id}, 403),
        ]
        for token, extra, status in cases:
            async with http_client(app, token, **accept, **extra) as http:
                response = await http.post("/mcp", json=body)
                assert response.status_code == status, (token, extra, response.text)
        async with http_client(app, created.token, **accept) as http:
            assert (await http.post("/mcp", json=body)).status_code == 200
        sessions = app.state.resources.sessionmaker
        async with user_session(sessions, user_id) as session, session.begin():
            await ApiKeyService(session).revoke(created.key.id)
        async with http_client(app, created.token, **accept) as http:
            revoked = await http.post("/mcp", json=body)
            assert revoked.status_code == 401
            assert revoked.headers["www-authenticate"] == "Bearer"


async def test_search_conversations_with_a_time_range(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (http, app):
        token = (await make_key(app, user_id)).token
        auth = {"Authorization": f"Bearer {token}"}
        cid = (await http.post("/v1/conversations", json={}, headers=auth)).json()["id"]
        stored = await http.post(
            f"/v1/conversations/{cid}/messages:bulk",
            json={
                "messages": [
                    {
                        "role": "user",
                        "content": "We booked the ferry to Skye for the summer trip",
                        "created_at": "2025-03-01T10:00:00Z",
                    },
                    {
                        "role": "user",
                        "content": "We booked the ferry to Mull for the autumn trip",
                        "created_at": "2026-09-01T10:00:00Z",
                    },
                ]
            },
            headers=auth,
        )
        assert stored.status_code == 201, stored.text
        skye, mull = (m["id"] for m in stored.json()["items"])
        async with mcp_client(app, token) as client:
            both = await call(client, "search_conversations", query="which ferry did we book?")
            assert {m["id"] for m in both["messages"]} == {skye, mull}
            late = await call(
                client,
                "search_conversations",
                query="which ferry did we book?",
                after="2026-01-01T00:00:00Z",
            )
            assert [m["id"] for m in late["messages"]] == [mull]
            early = await call(
                client,
                "search_conversations",
                query="which ferry did we book?",
                before="2026-01-01T00:00:00Z",
            )
            assert [m["id"] for m in early["messages"]] == [skye]
            # An inverted range matches nothing (as query_memory's time filters: JSON Schema
            # cannot state an order between two arguments, so it is not a schema error).
            inverted = await call(
                client,
                "search_conversations",
                query="which ferry did we book?",
                after="2026-01-01T00:00:00Z",
                before="2025-01-01T00:00:00Z",
            )
            assert inverted["messages"] == []


async def test_query_memory_has_time_filters_and_carries_the_correlation_id(
    make_client: Callable[..., Any],
    mcp_client: Callable[..., Any],
    user_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    correlation = str(uuid.uuid4())
    caplog.set_level(logging.INFO, logger="app.audit")
    async with make_client() as (_, app):
        token = (await make_key(app, user_id)).token
        async with mcp_client(app, token, **{"X-Correlation-ID": correlation}) as client:
            await call(client, "save_memory", content="I keep bees on my allotment", type="fact")
            found = await call(client, "query_memory", query="what animals do I keep?")
            assert len(found["memories"]) == 1
            # as_of before the memory existed: nothing was known then.
            before = await call(
                client,
                "query_memory",
                query="what animals do I keep?",
                as_of="2001-01-01T00:00:00Z",
            )
            assert before["memories"] == []
            window = await call(
                client,
                "query_memory",
                query="what animals do I keep?",
                time_from="2001-01-01T00:00:00Z",
                time_to="2001-12-31T00:00:00Z",
            )
            assert window["memories"] == []
            # the pre-catalog name still answers, as query_memory, and is not listed
            renamed = await client.call_tool("search_memory", {"query": "what animals do I keep?"})
            assert not renamed.is_error
            answer = dict(renamed.structured_content or {})
            assert [m["content"] for m in answer["memories"]] == ["I keep bees on my allotment"]
            listed = {tool.name for tool in (await client.list_tools()).tools}
            assert "search_memory" not in listed
            unknown = await client.call_tool("search_memories", {"query": "bees"})
            assert unknown.content[0].text == "NotFoundError: unknown tool: search_memories"
    logged = [
        r.fields["correlation_id"]  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "app.audit" and r.getMessage() == "memory retrieval"
    ]
    assert logged and set(logged) == {correlation}


async def test_tags_are_set_and_filtered_through_mcp(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app):
        token = (await make_key(app, user_id)).token
        async with mcp_client(app, token) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            properties = listed["query_memory"].input_schema["properties"]
            assert properties["tags_match"]["enum"] == ["any", "all"]
            assert "tags" in listed["save_memory"].input_schema["properties"]
            work = await call(
                client,
                "save_memory",
                content="The user's standup is at nine",
                type="fact",
                tags=["work", "calendar"],
            )
            assert work["memory"]["tags"] == ["work", "calendar"]
            await call(
                client, "save_memory", content="The user's yoga is at nine", type="fact",
                tags=["health", "calendar"],
            )  # fmt: skip
            ask = "what is at nine?"
            both = await call(client, "query_memory", query=ask, tags=["calendar"])
            assert len(both["memories"]) == 2
            one = await call(
                client, "query_memory", query=ask, tags=["calendar", "work"], tags_match="all"
            )
            assert [m["id"] for m in one["memories"]] == [work["memory"]["id"]]
            bad = await client.call_tool("query_memory", {"query": ask, "tags": ["Bad Tag"]})
            assert bad.is_error and "tags" in str(bad.content)
