"""query_memory's recency option through MCP (the catalog generates its schema)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.api.test_recency import QUESTION, store_old_and_new
from tests.helpers import make_key


async def test_recency_through_mcp(
    make_client: Callable[..., Any], mcp_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client(min_relevance=0.0) as (client, app):
        old, new = await store_old_and_new(client, user_id)
        token = (await make_key(app, user_id)).token
        async with mcp_client(app, token) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert "recency" in tools["query_memory"].input_schema["properties"]
            for recency, order in ((None, [old, new]), (0.9, [new, old])):
                args: dict[str, Any] = {"query": QUESTION, "sources": ["memory"]}
                if recency is not None:
                    args["recency"] = recency
                result = await mcp.call_tool("query_memory", args)
                assert not result.is_error, result.content
                memories = (result.structured_content or {})["memories"]
                assert [m["id"] for m in memories] == order
