"""Agent write tools and the MCP tools: arguments and results (shared by HTTP and MCP)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.domain import MemoryType
from app.schemas.common import (
    NON_BLANK_SCHEMA,
    Tags,
    Timestamp,
    check_non_blank,
    json_float,
    json_int,
)
from app.schemas.query import Query

# A saved memory is a short statement, not a document: 4000 characters is ~1000 tokens, the
# whole default answer budget of query_memory.
MAX_SAVE_CHARS = 4_000
MAX_PAGE = 100


SaveContent = Annotated[
    str,
    Field(min_length=1, max_length=MAX_SAVE_CHARS, json_schema_extra=NON_BLANK_SCHEMA),
    AfterValidator(check_non_blank),
]
Importance = json_float(ge=0.0, le=1.0)
PageLimit = json_int(ge=1, le=MAX_PAGE)
PageOffset = json_int(ge=0, le=1_000_000)
HitLimit = json_int(ge=1, le=50)


class SaveMemoryArgs(BaseModel):
    """save_memory: store a fact, preference, decision or note about the user."""

    model_config = ConfigDict(extra="forbid")
    content: SaveContent = Field(description="The memory, as one self-contained statement.")
    type: MemoryType = Field(description="fact, preference, decision or note")
    importance: Importance | None = Field(default=None, description="0..1 (default 0.5)")
    expires_at: Timestamp | None = Field(
        default=None,
        description="ISO 8601 time with offset after which it no longer holds (a past time "
        "stores it as already expired)",
    )
    supersedes: uuid.UUID | None = Field(
        default=None,
        description="id of one of the user's memories this one replaces: it stops being "
        "returned and stays in the new memory's history",
    )
    tags: Tags | None = Field(
        default=None,
        description='short labels to filter by later (query_memory\'s tags), e.g. ["work"]; '
        "a replacement keeps the old memory's tags unless given",
    )


class ForgetMemoryArgs(BaseModel):
    """forget_memory: soft-delete one of the user's memories."""

    model_config = ConfigDict(extra="forbid")
    id: uuid.UUID = Field(description="the memory's id, as query_memory returned it")


class RateMessageArgs(BaseModel):
    """rate_message: an upvote keeps a message as a note; a downvote removes that note."""

    model_config = ConfigDict(extra="forbid")
    message_id: uuid.UUID = Field(description="the id of one of the user's stored messages")
    vote: Literal["up", "down"] = Field(
        description="up keeps the message as a note; down removes the note an upvote kept"
    )


class ListMemoriesArgs(BaseModel):
    """list_memories: the user's live memories, newest first."""

    model_config = ConfigDict(extra="forbid")
    limit: PageLimit = Field(default=20, description=f"memories per page, 1-{MAX_PAGE}")
    offset: PageOffset = Field(default=0, description="how many to skip (next_offset pages on)")
    type: MemoryType | None = Field(default=None, description="only memories of this type")


class SearchConversationsArgs(BaseModel):
    """search_conversations: past conversation turns only, optionally in [after, before)."""

    model_config = ConfigDict(extra="forbid")
    query: Query = Field(description="what to look for in past conversation turns")
    after: Timestamp | None = Field(
        default=None, description="only messages from then on (ISO 8601 with a time zone)"
    )
    before: Timestamp | None = Field(
        default=None, description="only messages before then (ISO 8601 with a time zone)"
    )
    limit: HitLimit = Field(default=10, description="at most this many messages, 1-50")
    # `before` at or before `after` matches nothing (an empty answer, not an error), as the
    # query's time filters: JSON Schema cannot state an order between two fields, and the HTTP
    # tool must accept what its published schema allows.


class MemoryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    content: str
    type: str
    importance: float
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    source_message_id: uuid.UUID | None
    valid_from: datetime
    valid_to: datetime | None = Field(description="when it stopped being true (superseded)")
    supersedes_id: uuid.UUID | None = Field(description="the earlier version it replaced")
    tags: list[str] = []


class MemoryHistory(BaseModel):
    """The versions of one memory, oldest first: each supersedes the one before it."""

    id: uuid.UUID = Field(description="the memory asked about")
    current: uuid.UUID | None = Field(description="the version valid now, if any")
    versions: list[MemoryOut]


SaveAction = Literal["added", "updated", "unchanged", "restored"]


class SaveMemoryResult(BaseModel):
    memory: MemoryOut
    action: SaveAction = Field(
        description="added; updated (the new memory supersedes `superseded`: the one named, or "
        "a near-duplicate at cosine >= 0.90); unchanged (the user already had this text); "
        "restored (a forgotten identical memory)"
    )
    superseded: uuid.UUID | None = Field(
        default=None, description="the memory the new one replaced (now in its history)"
    )
    evicted: list[MemoryOut] = Field(
        default=[],
        description="memories the user's cap (PGRECALL_MAX_ENTRIES_PER_USER) soft-deleted to "
        "make room: the least valuable (lowest importance, least recently retrieved, oldest); "
        "an admin can restore them",
    )


class ForgetMemoryResult(BaseModel):
    id: uuid.UUID
    forgotten: bool = True


class RateMessageResult(BaseModel):
    message_id: uuid.UUID
    vote: Literal["up", "down"]
    action: Literal["added", "unchanged", "restored", "exists", "removed"]
    memory: MemoryOut | None = None
    removed: int = 0


class MemoryPage(BaseModel):
    items: list[MemoryOut]
    total: int
    next_offset: int | None


class MessageHit(BaseModel):
    id: str
    conversation_id: str | None
    role: str | None
    content: str
    created_at: datetime
    relevance: float


class MessageHits(BaseModel):
    messages: list[MessageHit]
    truncated: bool
    token_count: int
    error: str | None = None
    degraded: str | None = None
    rate_limited: bool = False
