"""query_memory contracts: the agent tool and the internal MemoryQuery API, each the query
contract (app/schemas/query.py) with its own fields, and their answers."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import json_float, json_int
from app.schemas.query import Query, QueryFilters, SourceKind


class QueryMemoryArgs(QueryFilters):
    """The agent tool's arguments (Memory v1 tool contract)."""

    model_config = ConfigDict(extra="forbid")
    query: Query = Field(
        description="Search query capturing the semantic intent of the context needed."
    )


class ToolMemory(BaseModel):
    content: str
    type: str
    relevance: float
    context: str
    source: SourceKind
    id: str
    # The shared space the memory lives in (null: the user's own memory; docs/agents.md).
    space: str | None = None


class ToolMetadata(BaseModel):
    count: int
    truncated: bool
    token_count: int
    # How sure the service is that the store answers the question: the best relevance of any
    # candidate (returned or not); `supported` is false when none reached the service's floor.
    confidence: float = 0.0
    supported: bool = False
    error: str | None = None
    degraded: str | None = None
    rate_limited: bool = False
    # The LLM judge (PGRECALL_JUDGE=llm): "llm" it re-scored the first memories, "fallback" it
    # failed and the local ranking stands; null: off or nothing to judge.
    judge: Literal["llm", "fallback"] | None = None


class QueryMemoryResult(BaseModel):
    memories: list[ToolMemory]
    metadata: ToolMetadata
    formatted: str = Field(description="the memories as a delimited block for a prompt")


class MemoryQueryRequest(QueryFilters):
    """The internal retrieval contract (Memory v1 MemoryQueryRequest)."""

    model_config = ConfigDict(extra="forbid")
    query: Query
    limit: json_int(ge=1, le=100) = 10
    min_score: json_float(ge=0.0, le=1.0) = 0.3
    token_budget: json_int(ge=1, le=100_000) | None = None


class MemoryItemOut(BaseModel):
    id: str
    content: str
    type: str
    source_kind: SourceKind
    relevance_score: float
    source: str | None
    created_at: datetime
    importance: float | None
    role: str | None = None
    conversation_id: str | None = None
    truncated: bool = False
    space: str | None = None  # the shared space it lives in (null: the user's own)


class MemoryQueryResponse(BaseModel):
    items: list[MemoryItemOut]
    total_count: int
    query_embedding_ms: int
    retrieval_ms: int
    token_count: int
    truncated: bool
    error: str | None = None
    degraded: str | None = None
    rate_limited: bool = False
