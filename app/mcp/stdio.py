"""MCP over stdin/stdout for one user: `pgrecall mcp --key TOKEN` (or PGRECALL_MCP_KEY), in
the memory scope its options name (--agent-id, --run-id, --scope-mode, --spaces: the headers of
the HTTP doors, docs/agents.md); every tool call runs in it.

The key is checked before serving and again on every tool call (through the key cache), so a
revoked or expired key stops working within PGRECALL_KEY_CACHE_TTL_S seconds. A key refused
before serving is also the answer to the client's first request (`refuse_over_stdio`), so an
MCP client shows why instead of "Connection closed".
"""

from __future__ import annotations

import json
import select
import sys
from typing import TextIO

from mcp.server.stdio import stdio_server
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache
from app.config import Settings
from app.mcp.server import Context, build_server
from app.runtime import Resources
from app.runtime.identity import NO_CLAIM, ScopeClaim, resolve_caller
from app.runtime.resources import resources_from
from app.services.api_keys import Caller
from app.services.embedding import EmbeddingService


def stdio_resources(
    settings: Settings,
    sessionmaker: async_sessionmaker[AsyncSession],
    embeddings: EmbeddingService,
    cache: Cache,
) -> Resources:
    """The runtime's resources over the CLI's engine: one query at a time (one client)."""
    return resources_from(settings, sessionmaker, embeddings, cache, query_slots=1)


# Over stdio the key is the only credential: the service key never names a user here.
_PER_USER_ONLY = "pgrecall mcp takes a per-user API key (pgrecall keys create --user ...)"


async def serve_stdio(resources: Resources, token: str, claim: ScopeClaim = NO_CLAIM) -> Caller:
    """Authenticate the key in the claimed scope (raises ServiceError when it is not valid, or
    names another agent than the key is bound to), then serve until EOF."""

    async def caller_of(_: Context | None = None) -> Caller:
        return await resolve_caller(
            resources, token, None, per_user_only=_PER_USER_ONLY, claim=claim
        )

    caller = await caller_of()
    server = build_server(lambda: resources, caller_of)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        if resources.usage is not None:
            await resources.usage.drain()  # before the CLI disposes of the engine
        if resources.judge is not None:
            await resources.judge.aclose()
    return caller


# JSON-RPC's range for errors a server defines itself.
REFUSED = -32000


def refuse_over_stdio(
    reason: str, stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout, wait_s: float = 10.0
) -> None:
    """Answer the client's first request (its `initialize`) with `reason` as a JSON-RPC error.
    Nothing is written when no request comes: stdin at its end or a terminal (a person reads
    stderr), or no line within `wait_s` seconds."""
    if stdin.isatty() or not select.select([stdin], [], [], wait_s)[0]:
        return
    try:
        request = json.loads(stdin.readline())
    except ValueError:
        return
    if not isinstance(request, dict) or request.get("id") is None:
        return
    error = {"code": REFUSED, "message": f"pgrecall mcp: {reason}"}
    stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": error}) + "\n")
    stdout.flush()
