"""`pgrecall mcp --key` as an MCP client starts it: a subprocess, the SDK's stdio client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.services.api_keys import ApiKeyService
from tests.helpers import shared_space
from tests.redis_server import RedisServer
from tests.servers import service_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def sessions(pg: EmbeddedPostgres) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(pg.url, pool_size=2)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def new_key(
    sessions: async_sessionmaker[AsyncSession], user: str, scope: str, agent: str | None = None
) -> Any:
    async with sessions() as session, session.begin():
        return await ApiKeyService(session).create(user, scope, agent_id=agent)


def server_env(pg: EmbeddedPostgres, redis: RedisServer, **extra: str) -> dict[str, str]:
    """As an operator with separate roles runs it: requests as the service role, migrations as
    the owner (the agent's scope is row-level security's, which a superuser would bypass)."""
    return {
        **os.environ,
        "PGRECALL_DATABASE_URL": service_url(pg),
        "PGRECALL_MIGRATION_DATABASE_URL": pg.url,
        "PGRECALL_REDIS_URL": redis.url,
        "PGRECALL_DATA_DIR": tempfile.gettempdir(),
        "PGRECALL_LOG_LEVEL": "WARNING",
        **extra,
    }


async def test_stdio_server_serves_the_keys_user_only(
    pg: EmbeddedPostgres,
    redis_srv: RedisServer,
    sessions: async_sessionmaker[AsyncSession],
    user_id: str,
    other_user_id: str,
) -> None:
    mine = await new_key(sessions, user_id, "write")
    theirs = await new_key(sessions, other_user_id, "write")

    def params(token: str) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "app.cli", "mcp"],
            env=server_env(pg, redis_srv, PGRECALL_MCP_KEY=token),
            cwd=ROOT,
        )

    async with Client(params(theirs.token)) as client:
        result = await client.call_tool(
            "save_memory", {"content": "My safe combination is 31-7-12", "type": "note"}
        )
        assert not result.is_error, result.content
        foreign_id = result.structured_content["memory"]["id"]

    async with Client(params(mine.token)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert "save_memory" in names and "search_conversations" in names
        saved = await client.call_tool(
            "save_memory", {"content": "I play the cello in a quartet", "type": "fact"}
        )
        assert not saved.is_error, saved.content
        item = saved.structured_content["memory"]["id"]
        found = await client.call_tool("query_memory", {"query": "which instrument do I play?"})
        assert item in {m["id"] for m in found.structured_content["memories"]}
        nothing = await client.call_tool("query_memory", {"query": "safe combination"})
        assert nothing.structured_content["memories"] == []
        refused = await client.call_tool("forget_memory", {"id": foreign_id})
        assert refused.is_error and "NotFoundError" in refused.content[0].text
        forgot = await client.call_tool("forget_memory", {"id": item})
        assert not forgot.is_error
        gone = await client.call_tool("query_memory", {"query": "which instrument do I play?"})
        assert item not in {m["id"] for m in gone.structured_content["memories"]}


async def test_stdio_refuses_a_bad_key_before_serving(
    pg: EmbeddedPostgres, redis_srv: RedisServer, sessions: async_sessionmaker[AsyncSession]
) -> None:
    revoked = await new_key(sessions, "stdio-revoked", "write")
    async with sessions() as session, session.begin():
        await ApiKeyService(session).revoke(revoked.key.id)
    for token, message in (
        (revoked.token, "API key revoked; not serving"),
        ("pgr_nope", "invalid API key; not serving"),
        ("not-a-key", "--key must be a per-user API key"),
    ):
        await assert_refused(pg, redis_srv, ["--key", token], message)


async def test_a_refused_key_is_the_clients_answer_not_a_closed_connection(
    pg: EmbeddedPostgres, redis_srv: RedisServer
) -> None:
    """The client's `initialize` gets a JSON-RPC error that says why (issue 41: it saw only
    "Connection closed")."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"},
        },
    }
    for token, reason in (
        ("pgr_nope", "PermissionDeniedError: invalid API key; not serving"),
        ("not-a-key", "--key must be a per-user API key"),
    ):
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "app.cli", "mcp", "--key", token],
            cwd=ROOT,
            env=server_env(pg, redis_srv),
            input=json.dumps(initialize) + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        (line,) = done.stdout.splitlines()
        answer = json.loads(line)
        assert answer["id"] == 1 and reason in answer["error"]["message"], answer


# -- scopes (issue 43, docs/agents.md): the options every tool call runs in ----------------------


def stdio(
    pg: EmbeddedPostgres, redis: RedisServer, token: str, *options: str, **env: str
) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "app.cli", "mcp", *options],
        env=server_env(pg, redis, PGRECALL_MCP_KEY=token, **env),
        cwd=ROOT,
    )


def contents(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return {m["content"]: m for m in result.structured_content["memories"]}


async def test_stdio_scopes_agents_and_spaces(
    pg: EmbeddedPostgres,
    redis_srv: RedisServer,
    sessions: async_sessionmaker[AsyncSession],
    make_client: Callable[..., Any],
    user_id: str,
    other_user_id: str,
) -> None:
    """Agent B never sees agent A's memory; a member reads a space it names, a non-member
    nothing, a save with --spaces stays the user's (the tools never write into a space), and a
    grant revoked while the server runs reads nothing on the next call."""
    key = await new_key(sessions, user_id, "write")
    outsider = await new_key(sessions, other_user_id, "write")
    space = f"team-{uuid.uuid4().hex[:8]}"
    writer = f"writer-{uuid.uuid4()}"
    async with make_client() as (http, _):
        await shared_space(
            http,
            space,
            {writer: "write", user_id: "read"},
            writer=writer,
            content="The team's on-call rotation starts on Mondays",
        )

        support = stdio(pg, redis_srv, key.token, "--agent-id", "support")
        async with Client(support) as client:
            saved = await client.call_tool(
                "save_memory", {"content": "The support ticket code is walrus-71", "type": "fact"}
            )
            assert not saved.is_error, saved.content
            assert "The support ticket code is walrus-71" in contents(
                await client.call_tool("query_memory", {"query": "support ticket code"})
            )

        coder = stdio(pg, redis_srv, key.token, "--agent-id", "coder", "--spaces", space)
        async with Client(coder) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert "query_memory" in tools
            seen = contents(await client.call_tool("query_memory", {"query": "ticket code"}))
            assert not [c for c in seen if "walrus" in c]
            question = {"query": "when does the on-call rotation start"}
            seen = contents(await client.call_tool("query_memory", question))
            item = seen["The team's on-call rotation starts on Mondays"]
            assert item["space"] == space
            # a save naming spaces is the agent's own, never the space's
            mine = await client.call_tool(
                "save_memory", {"content": "The coder's on-call pager is pager-5", "type": "fact"}
            )
            assert not mine.is_error, mine.content
            as_writer = await http.post(
                "/v1/memory/query",
                json={"query": "on-call pager", "min_score": 0.0},
                headers={"X-User-Id": writer, "X-Spaces": space},
            )
            assert not [i for i in as_writer.json()["items"] if "pager-5" in i["content"]]
            # revoked while the server runs: the next call reads nothing of the space
            gone = await http.delete(f"/v1/admin/spaces/{space}/members/{user_id}")
            assert gone.status_code == 204
            seen = contents(await client.call_tool("query_memory", question))
            assert not [c for c in seen if "rotation" in c]

    # a non-member naming the space (the options' environment twins) reads nothing of it
    env = {"PGRECALL_MCP_AGENT_ID": "coder", "PGRECALL_MCP_SPACES": space}
    async with Client(stdio(pg, redis_srv, outsider.token, **env)) as client:
        seen = contents(await client.call_tool("query_memory", question))
        assert not [c for c in seen if "rotation" in c]


async def test_stdio_refuses_a_bad_scope_and_another_agent_than_the_keys(
    pg: EmbeddedPostgres, redis_srv: RedisServer, sessions: async_sessionmaker[AsyncSession]
) -> None:
    bound = await new_key(sessions, f"stdio-bound-{uuid.uuid4()}", "write", agent="mail")
    for options, message in (
        (["--scope-mode", "mine"], "--scope-mode: must be one of"),
        (["--agent-id", "a", "--scope-mode", "mine"], "--scope-mode: must be one of"),
        (["--spaces", "Team"], "--spaces: comma-separated space ids"),
        (["--agent-id", "has space"], "--agent-id:"),
        (["--agent-id", "calendar"], "names another agent than the API key's; not serving"),
    ):
        await assert_refused(pg, redis_srv, ["--key", bound.token, *options], message)


async def assert_refused(
    pg: EmbeddedPostgres, redis_srv: RedisServer, options: list[str], message: str
) -> None:
    """`pgrecall mcp` with these options exits 2 before serving, saying `message`."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app.cli", "mcp", *options],
        cwd=ROOT,
        env=server_env(pg, redis_srv),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr
    assert done.stdout == ""
