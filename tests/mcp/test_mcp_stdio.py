"""`pgrecall mcp --key` as an MCP client starts it: a subprocess, the SDK's stdio client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.services.api_keys import ApiKeyService
from tests.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def sessions(pg: EmbeddedPostgres) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(pg.url, pool_size=2)
    try:
        yield create_sessionmaker(engine)
    finally:
        await engine.dispose()


async def new_key(sessions: async_sessionmaker[AsyncSession], user: str, scope: str) -> Any:
    async with sessions() as session, session.begin():
        return await ApiKeyService(session).create(user, scope)


def server_env(pg: EmbeddedPostgres, redis: RedisServer, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PGRECALL_DATABASE_URL": pg.url,
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
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "app.cli", "mcp", "--key", token],
            cwd=ROOT,
            env=server_env(pg, redis_srv),
            input="",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert message in done.stderr
        assert done.stdout == ""


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
