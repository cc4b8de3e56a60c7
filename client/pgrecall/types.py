"""Response types of the client: the service's JSON answers as pydantic models.

The client declares its own models instead of importing the server's schemas (app/schemas), so
installing it pulls no server code. They mirror the server's response models field for field
(name, type, default): tests/client/test_types_match_server.py compares them with the running
service's OpenAPI document, so a field added or changed on the server fails there first.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

__all__ = [
    "AdminBulkResult",
    "AdminMemoryHistory",
    "AdminMemoryPage",
    "AgentMemory",
    "Conversation",
    "ConversationPage",
    "Duplicate",
    "ForgetMemoryResult",
    "Key",
    "KeyCreated",
    "KeyPage",
    "Memory",
    "MemoryHistory",
    "MemoryItemOut",
    "MemoryQueryResponse",
    "Message",
    "MessageList",
    "MessagePage",
    "MessagePopped",
    "QueryMemoryResult",
    "RateMessageResult",
    "SaveMemoryResult",
    "SessionOut",
    "Space",
    "SpaceList",
    "SpaceMember",
    "SpaceMemberList",
    "StoreItem",
    "StoreItemPage",
    "ToolMemory",
    "ToolMetadata",
]

SourceKind = Literal["memory", "message"]


class Conversation(BaseModel):
    id: uuid.UUID
    title: str | None
    created_at: datetime
    updated_at: datetime
    extraction: bool | None = None  # this conversation's LLM extraction setting; None: default
    extraction_active: bool = False  # whether its new user turns are queued for extraction


class ConversationPage(BaseModel):
    items: list[Conversation]
    next_offset: int | None


class Message(BaseModel):
    """A stored message."""

    id: uuid.UUID
    conversation_id: uuid.UUID
    role: str
    content: str
    correlation_id: uuid.UUID
    created_at: datetime
    seq: int
    metadata: dict[str, object]


class MessageList(BaseModel):
    items: list[Message]


class MessagePage(BaseModel):
    items: list[Message]
    next_after: int | None  # pass as `after` to read the next page


class MessagePopped(BaseModel):
    message: Message | None  # the deleted message; None when there was none


class SessionOut(BaseModel):
    conversation_id: uuid.UUID
    messages: list[dict[str, object]]
    goal: str | None
    source: Literal["cache", "database"]
    summary: str | None = None  # the rolling conversation summary (LLM extraction only)
    summary_updated_at: datetime | None = None
    # current | pending | off (not kept for this conversation) | no_llm (no extraction model)
    summary_state: Literal["current", "pending", "off", "no_llm"] = "no_llm"


class AgentMemory(BaseModel):
    """A memory as the agent tools return it."""

    id: uuid.UUID
    content: str
    type: str
    importance: float
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    source_message_id: uuid.UUID | None
    valid_from: datetime
    valid_to: datetime | None  # when it stopped being true (superseded)
    supersedes_id: uuid.UUID | None  # the earlier version it replaced
    tags: list[str] = []


class MemoryHistory(BaseModel):
    """The versions of one of the caller's memories, oldest first."""

    id: uuid.UUID
    current: uuid.UUID | None
    versions: list[AgentMemory]


class SaveMemoryResult(BaseModel):
    memory: AgentMemory
    action: Literal["added", "updated", "unchanged", "restored"]
    superseded: uuid.UUID | None = None
    # memories the user's cap soft-deleted to make room (an admin can restore them)
    evicted: list[AgentMemory] = []


class ForgetMemoryResult(BaseModel):
    id: uuid.UUID
    forgotten: bool = True


class RateMessageResult(BaseModel):
    message_id: uuid.UUID
    vote: Literal["up", "down"]
    action: Literal["added", "unchanged", "restored", "exists", "removed"]
    memory: AgentMemory | None = None
    removed: int = 0


class ToolMemory(BaseModel):
    content: str
    type: str
    relevance: float
    context: str
    source: SourceKind
    id: str
    space: str | None = None  # the shared space it lives in (null: the user's own memory)


class ToolMetadata(BaseModel):
    count: int
    truncated: bool
    token_count: int
    confidence: float = 0.0  # the best relevance of any candidate, returned or not
    supported: bool = False  # false: nothing reached the service's floor
    error: str | None = None
    degraded: str | None = None
    rate_limited: bool = False
    judge: Literal["llm", "fallback"] | None = None  # the LLM judge's part; null: off


class QueryMemoryResult(BaseModel):
    memories: list[ToolMemory]
    metadata: ToolMetadata
    formatted: str  # the memories as a delimited block for a prompt


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
    space: str | None = None  # the shared space it lives in (null: the user's own memory)


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


class Key(BaseModel):
    """A per-user API key as the admin API lists it (never its token)."""

    id: uuid.UUID
    prefix: str
    user_id: str
    scope: str
    agent_id: str | None = None  # the agent the key is bound to (null: any, or none)
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    state: Literal["active", "revoked", "expired"]  # as the service judged it when answering


class KeyCreated(BaseModel):
    key: Key
    token: str  # shown this once; the service stores only its hash


class KeyPage(BaseModel):
    items: list[Key]
    next_offset: int | None


class Memory(BaseModel):
    """A curated memory as the admin API returns it."""

    id: uuid.UUID
    user_id: str
    content: str
    type: str
    importance: float
    source: str | None
    source_message_id: uuid.UUID | None
    embedding_model: str
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    deleted_at: datetime | None
    metadata: dict[str, object]
    valid_from: datetime
    valid_to: datetime | None
    supersedes_id: uuid.UUID | None
    tags: list[str]
    last_retrieved_at: datetime | None  # when query_memory last returned it
    times_retrieved: int  # how many answers of query_memory returned it
    evicted_at: datetime | None  # when the per-user cap soft-deleted it (a restore clears it)


class Duplicate(BaseModel):
    index: int  # position of the skipped item in the request
    id: uuid.UUID  # the stored memory with the same content


class AdminBulkResult(BaseModel):
    items: list[Memory]
    duplicates: list[Duplicate]


class AdminMemoryPage(BaseModel):
    items: list[Memory]
    total: int
    next_offset: int | None


class AdminMemoryHistory(BaseModel):
    """Every version of one memory (deleted ones too), oldest first, as the admin API lists it."""

    id: uuid.UUID
    current: uuid.UUID | None
    versions: list[Memory]


class StoreItem(BaseModel):
    """An item of /v1/store: namespace, key, value (+ score from a search)."""

    id: uuid.UUID  # the memory's id (query_memory and forget_memory use it)
    namespace: list[str]
    key: str
    value: dict[str, Any]
    type: str  # the memory type the namespace maps to
    created_at: datetime
    updated_at: datetime
    score: float | None = None  # cosine similarity to the query
    expires_at: datetime | None = None  # when the TTL ends
    ttl: float | None = None  # the TTL in minutes, refreshed on reads


class StoreItemPage(BaseModel):
    items: list[StoreItem]


class Space(BaseModel):
    """A shared space (docs/agents.md): members read (and, with a write grant, save) its
    memories by naming it in the client's `spaces`."""

    id: str
    description: str
    created_at: datetime


class SpaceList(BaseModel):
    spaces: list[Space]


class SpaceMember(BaseModel):
    """A member's grant on a space: `read` or `write`."""

    space_id: str
    user_id: str
    access: str
    created_at: datetime


class SpaceMemberList(BaseModel):
    members: list[SpaceMember]
