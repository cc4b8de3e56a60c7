"""The query contract every door shares: the query text and QueryFilters.

QueryFilters is its own module so that a filter is one field here (and its use in the
service): the agent tool's arguments, POST /v1/memory/query (app/schemas/memory.py), the chat
proxy's `memory` object (app/proxy/schemas.py) and the console's "Ask as this user" all extend
or build it, and app.runtime.query_request hands each field to the service by name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from app.domain import MemoryType
from app.schemas.common import NON_BLANK_SCHEMA, Tags, Timestamp, check_non_blank, json_float

SourceKind = Literal["memory", "message"]
# Longer queries are accepted and cut to 8192 characters with a warning (the spec); beyond
# this hard limit the request is rejected instead of read into memory.
MAX_QUERY_INPUT = 65_536


def _unique(values: list[str] | None) -> list[str] | None:
    if values is not None and len(set(values)) != len(values):
        raise ValueError("must not repeat values")
    return values


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
Recency = json_float(ge=0.0, le=1.0) | None
TagsMatch = Literal["any", "all"]
FilterTags = Annotated[Tags | None, Field(min_length=1)]

RECENCY_DESCRIPTION = (
    "How much newer items are preferred, 0 to 1: score = (1 - recency) x relevance + recency x "
    "exp(-age_days / 30) (default: the service's)"
)


class QueryFilters(BaseModel):
    """What narrows a query, the one contract of every door that queries: the agent tool's
    arguments, POST /v1/memory/query, the chat proxy's `memory` object and the console's "Ask
    as this user". A filter added here reaches all of them (and the clients, which pass filters
    by name); app.runtime.query_request hands each field to the service's QueryRequest field of
    the same name.

    Times are normalised to UTC. A window whose end is before its start matches nothing (an
    empty answer, not an error: JSON Schema cannot state an order between two fields).
    """

    types: Types = Field(default=None, description="Filter to specific memory types")
    sources: Sources = Field(default=None, description="Restrict to memory items or past messages")
    time_from: Timestamp | None = Field(
        default=None,
        description="Only items whose event time (message or memory created_at) is at or after "
        "this (ISO 8601 with a time zone)",
    )
    time_to: Timestamp | None = Field(
        default=None,
        description="Only items whose event time is at or before this (ISO 8601 with a time zone)",
    )
    as_of: Timestamp | None = Field(
        default=None, description="What was known then: items created after this time are left out"
    )
    tags: FilterTags = Field(
        default=None,
        description="Only memories carrying these tags (past messages have none, so a tag filter "
        "returns memory items only)",
    )
    tags_match: TagsMatch = Field(
        default="any", description="any (default): at least one of the tags; all: every one of them"
    )
    recency: Recency = Field(default=None, description=RECENCY_DESCRIPTION)
