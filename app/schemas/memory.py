"""query_memory contracts: the agent tool and the internal MemoryQuery API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.models.base import MemoryType
from app.schemas.common import (
    NON_BLANK_SCHEMA,
    Tags,
    Timestamp,
    check_non_blank,
    json_float,
    json_int,
)

SourceKind = Literal["memory", "message"]
# Longer queries are accepted and cut to 8192 characters with a warning (the spec); beyond
# this hard limit the request is rejected instead of read into memory.
MAX_QUERY_INPUT = 65_536


def _unique(values: list[str] | None) -> list[str] | None:
    if values is not None and len(set(values)) != len(values):
        raise ValueError("must not repeat values")
    return values


TIME_FIELDS = {
    "time_from": "Only items whose event time (message or memory created_at) is at or after "
    "this (ISO 8601 with a time zone)",
    "time_to": "Only items whose event time is at or before this (ISO 8601 with a time zone)",
    "as_of": "What was known then: items created after this time are left out",
}


class TimeFilters(BaseModel):
    """Hard time filters shared by both query contracts (times normalised to UTC).

    A window whose end is before its start matches nothing (an empty answer, not an error:
    JSON Schema cannot state an order between two fields).
    """

    time_from: Timestamp | None = Field(default=None, description=TIME_FIELDS["time_from"])
    time_to: Timestamp | None = Field(default=None, description=TIME_FIELDS["time_to"])
    as_of: Timestamp | None = Field(default=None, description=TIME_FIELDS["as_of"])


Query = Annotated[
    str,
    Field(min_length=1, max_length=MAX_QUERY_INPUT, json_schema_extra=NON_BLANK_SCHEMA),
    AfterValidator(check_non_blank),
]
Types = Annotated[
    list[MemoryType] | None,
    Field(min_length=1, max_length=4, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_unique),
]
Sources = Annotated[
    list[SourceKind] | None,
    Field(min_length=1, max_length=2, json_schema_extra={"uniqueItems": True}),
    AfterValidator(_unique),
]


RECENCY_DESCRIPTION = (
    "How much newer items are preferred, 0 to 1: score = (1 - recency) x relevance + recency x "
    "exp(-age_days / 30) (default: the service's)"
)
Recency = json_float(ge=0.0, le=1.0) | None


TagsMatch = Literal["any", "all"]
TAG_FIELDS = {
    "tags": "Only memories carrying these tags (past messages have none, so a tag filter "
    "returns memory items only)",
    "tags_match": "any (default): at least one of the tags; all: every one of them",
}
FilterTags = Annotated[Tags | None, Field(min_length=1)]


class TagFilter(BaseModel):
    """The tag filter shared by both query contracts (scoped by user like everything else)."""

    tags: FilterTags = Field(default=None, description=TAG_FIELDS["tags"])
    tags_match: TagsMatch = Field(default="any", description=TAG_FIELDS["tags_match"])


class QueryMemoryArgs(TagFilter, TimeFilters):
    """The agent tool's arguments (Memory v1 tool contract)."""

    model_config = ConfigDict(extra="forbid")
    query: Query = Field(
        description="Search query capturing the semantic intent of the context needed."
    )
    types: Types = Field(default=None, description="Filter to specific memory types")
    sources: Sources = Field(default=None, description="Restrict to memory items or past messages")
    recency: Recency = Field(default=None, description=RECENCY_DESCRIPTION)


class ToolMemory(BaseModel):
    content: str
    type: str
    relevance: float
    context: str
    source: SourceKind
    id: str


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


class MemoryQueryRequest(TagFilter, TimeFilters):
    """The internal retrieval contract (Memory v1 MemoryQueryRequest)."""

    model_config = ConfigDict(extra="forbid")
    query: Query
    limit: json_int(ge=1, le=100) = 10
    types: Types = None
    sources: Sources = None
    min_score: json_float(ge=0.0, le=1.0) = 0.3
    token_budget: json_int(ge=1, le=100_000) | None = None
    recency: Recency = Field(default=None, description=RECENCY_DESCRIPTION)


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
