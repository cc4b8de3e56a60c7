"""The agent tools over HTTP, generated from the catalog (app/tools): GET /v1/tools and
POST /v1/tools/<name> for each tool; and POST /v1/memory/query, the internal retrieval contract.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends
from pydantic import BaseModel

from app.api.deps import CallerDep, ResourcesDep, UserDep, writing_user
from app.observability import correlation_id_var
from app.runtime import query_request, query_service
from app.schemas.memory import MemoryItemOut, MemoryQueryRequest, MemoryQueryResponse
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
    unknown fields refused), the answer its result model. A write tool refuses a read-only key
    (403) before the body is read, as every write route does."""

    async def endpoint(args: BaseModel, caller: Caller, resources: Any) -> BaseModel:
        call = ToolCall(resources, caller, correlation_id_var.get())
        return await tool.run(call, args)

    caller_type: Any = CallerDep
    if tool.writes:
        caller_type = Annotated[Caller, Depends(_writing_caller)]
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


async def _writing_caller(caller: CallerDep) -> Caller:
    await writing_user(caller)
    return caller


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
    body: MemoryQueryRequest, user_id: UserDep, resources: ResourcesDep
) -> MemoryQueryResponse:
    """Internal retrieval contract with scores, timings and references."""
    result = await query_service(resources).query(
        query_request(
            resources.query_config,
            user_id,
            body.query,
            limit=body.limit,
            min_score=body.min_score,
            types=body.types,
            sources=body.sources,
            token_budget=body.token_budget,
            time_from=body.time_from,
            time_to=body.time_to,
            as_of=body.as_of,
            tags=body.tags,
            tags_match=body.tags_match,
            recency=body.recency,
        ),
        correlation_id=correlation_id_var.get(),
    )
    return MemoryQueryResponse(
        items=[
            MemoryItemOut(
                id=i.id,
                content=i.content,
                type=i.type,
                source_kind=i.source_kind,
                relevance_score=i.relevance_score,
                source=i.source,
                created_at=i.created_at,
                importance=i.importance,
                role=i.role,
                conversation_id=i.conversation_id,
                truncated=i.cut,
            )
            for i in result.items
        ],
        total_count=result.total_count,
        query_embedding_ms=result.query_embedding_ms,
        retrieval_ms=result.retrieval_ms,
        token_count=result.token_count,
        truncated=result.truncated,
        error=result.error,
        degraded=result.degraded,
        rate_limited=result.rate_limited,
    )
