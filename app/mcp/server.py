"""The MCP server, generated from the tool catalog (app/tools) on the SDK's low-level `Server`:
`tools/list` publishes each catalog tool's name, description and argument schema, and
`tools/call` validates the arguments with the tool's own model (unknown ones refused) and runs
its handler. The same catalog generates the HTTP tools, so the two doors cannot drift apart.

A failed call is a tool error (`isError`) whose text is `<ErrorClass>: <detail>`, the class and
detail the HTTP door puts in its JSON body (`ValidationError: importnce: Extra inputs are not
permitted`, `NotFoundError: memory not found`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

from app import __version__
from app.errors import AuthenticationError
from app.runtime import Resources
from app.services.api_keys import Caller
from app.tools import TOOLS, ToolCall, get_tool, tool_failure
from app.tools.catalog import INSTRUCTIONS

log = logging.getLogger(__name__)

# Where the HTTP door leaves the authenticated caller and the request's correlation id in the
# ASGI scope (app/mcp/http.py); the SDK runs tool calls in its own task, outside the request's
# context variables.
CALLER_SCOPE_KEY = "pgrecall.caller"
CORRELATION_SCOPE_KEY = "pgrecall.correlation_id"

Context = ServerRequestContext[Any, Any]
CallerSource = Callable[[Context], Awaitable[Caller]]


def _scope(ctx: Context) -> dict[str, Any]:
    scope = getattr(ctx.request, "scope", None)
    return scope if isinstance(scope, dict) else {}


def caller_from_scope(ctx: Context) -> Caller:
    """The caller the HTTP door authenticated for this request."""
    caller = _scope(ctx).get(CALLER_SCOPE_KEY)
    if not isinstance(caller, Caller):
        raise AuthenticationError("not authenticated")
    return caller


def _correlation_id(ctx: Context) -> str:
    """The HTTP request's correlation id; a fresh one per call over stdio."""
    value = _scope(ctx).get(CORRELATION_SCOPE_KEY)
    return value if isinstance(value, str) else str(uuid.uuid4())


# Names MCP clients configured before the catalog still call: accepted, not listed. The search
# tool was MCP's `search_memory` until the catalog gave both doors one name.
RENAMED = {"search_memory": "query_memory"}


def _listed() -> list[types.Tool]:
    return [
        types.Tool(
            name=tool.name,
            description=tool.description,
            input_schema=tool.parameters,
            output_schema=tool.output_schema,
        )
        for tool in TOOLS
    ]


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def build_server(resources: Callable[[], Resources], caller: CallerSource) -> Server[Any]:
    """The MCP server with every catalog tool; `caller` says who each call acts for."""
    listed = _listed()

    async def list_tools(
        _ctx: Context, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def call_tool(ctx: Context, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            tool = get_tool(RENAMED.get(params.name, params.name))
            who = await caller(ctx)
            tool.admit(who)  # a read-only key is refused before its arguments are read (403)
            args = tool.parse(dict(params.arguments or {}))
            call = ToolCall(resources(), who, _correlation_id(ctx))
            answer = await tool.run(call, args)
        except Exception as exc:
            failure = tool_failure(exc)
            if failure is None:
                log.exception("MCP tool %r failed", params.name)
                return _error("ServiceError: internal error")
            if failure.status_code == 503:
                log.warning("MCP tool %r: %s", params.name, failure.text())
            return _error(failure.text())
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.model_dump_json())],
            structured_content=answer.model_dump(mode="json"),
        )

    return Server(
        "pgrecall",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
