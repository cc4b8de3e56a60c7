"""The agent tools over HTTP, generated from the catalog (app/tools): GET /v1/tools and
POST /v1/tools/<name> for each tool; and POST /v1/memory/query, the internal retrieval contract.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel

from app.http.deps import CallerDep, ResourcesDep, UserDep
from app.observability import correlation_id_var
from app.runtime import query_request, query_service
from app.runtime.query import memory_query_response
from app.schemas.memory import MemoryQueryRequest, MemoryQueryResponse
from app.services.api_keys import Caller
from app.tools import TOOLS, Tool, ToolCall
from app.tools.catalog import SYSTEM_PROMPT

router = APIRouter(tags=["tools"])


def tool_definitions() -> list[dict[str, Any]]:
    """Every catalog tool in OpenAI function-calling format."""
    return [tool.definition() for tool in TOOLS]


@router.get("/v1/tools")
async def list_tools(_: UserDep) -> dict[str, Any]:
    """Tool definitions (OpenAI function-calling format) and the system prompt snippet."""
    return {"tools": tool_definitions(), "system_prompt": SYSTEM_PROMPT}


def _endpoint(tool: Tool[Any, Any]) -> Callable[..., Awaitable[BaseModel]]:
    """POST /v1/tools/<name>: the body is the tool's arguments model (422 naming the field,
    unknown fields refused), the answer its result model. The caller is admitted to the tool
    once, before the body is read (a write tool refuses a read-only key, 403, as every write
    route does)."""

    async def endpoint(args: BaseModel, caller: Caller, resources: Any) -> BaseModel:
        call = ToolCall(resources, caller, correlation_id_var.get())
        return await tool.run(call, args)

    async def admitted(caller: CallerDep) -> Caller:
        tool.admit(caller)
        return caller

    caller_type: Any = Annotated[Caller, Depends(admitted)]
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("caller", inspect.Parameter.KEYWORD_ONLY, annotation=caller_type),
            inspect.Parameter(
                "args", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[tool.args, Body()]
            ),
            inspect.Parameter("resources", inspect.Parameter.KEYWORD_ONLY, annotation=ResourcesDep),
        ],
        return_annotation=tool.result,
    )
    endpoint.__name__ = tool.name
    endpoint.__doc__ = tool.description
    return endpoint


for _tool in TOOLS:
    router.add_api_route(
        f"/v1/tools/{_tool.name}",
        _endpoint(_tool),
        methods=["POST"],
        response_model=_tool.result,
        summary=_tool.name,
    )


@router.post("/v1/memory/query", response_model=MemoryQueryResponse)
async def memory_query(
    body: MemoryQueryRequest, caller: CallerDep, resources: ResourcesDep
) -> MemoryQueryResponse:
    """Internal retrieval contract with scores, timings and references."""
    request = query_request(
        resources.query_config,
        caller.memory,
        body.query,
        body,
        limit=body.limit,
        min_score=body.min_score,
        token_budget=body.token_budget,
    )
    result = await query_service(resources).query(request, correlation_id=correlation_id_var.get())
    return memory_query_response(result)
