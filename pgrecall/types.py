"""Response types of the client: the service's own schemas (app/schemas), read from JSON.

Most are the service's models as they are. Messages and admin memories carry `metadata`, which
the service fills from the ORM attribute `metadata_`; the client reads the JSON key `metadata`,
so those (and the pages that hold them) are re-declared to accept it.
"""

from __future__ import annotations

import uuid

from pydantic import BaseModel, ConfigDict

from app.schemas.admin import AdminMemoryOut, DuplicateOut
from app.schemas.agent import (
    ForgetMemoryResult,
    MemoryHistory,
    MemoryOut,
    RateMessageResult,
    SaveMemoryResult,
)
from app.schemas.conversation import ConversationOut, ConversationPage, MessageOut, SessionOut
from app.schemas.keys import KeyCreated, KeyOut, KeyPage
from app.schemas.memory import (
    MemoryItemOut,
    MemoryQueryResponse,
    QueryMemoryResult,
    ToolMemory,
    ToolMetadata,
)
from app.schemas.store import StoreItemOut, StoreItemPage

__all__ = [
    "AdminBulkResult",
    "AdminMemoryHistory",
    "AdminMemoryPage",
    "AgentMemory",
    "Conversation",
    "ConversationPage",
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
    "StoreItem",
    "StoreItemPage",
    "ToolMemory",
    "ToolMetadata",
]

Conversation = ConversationOut
AgentMemory = MemoryOut  # a memory as the agent tools return it
Key = KeyOut  # a per-user API key as the admin API lists it (never its token)
StoreItem = StoreItemOut  # an item of /v1/store: namespace, key, value (+ score from a search)


class Message(MessageOut):
    """A stored message."""

    model_config = ConfigDict(from_attributes=True, validate_by_name=True)


class MessageList(BaseModel):
    items: list[Message]


class MessagePage(BaseModel):
    items: list[Message]
    next_after: int | None


class MessagePopped(BaseModel):
    message: Message | None


class Memory(AdminMemoryOut):
    """A curated memory as the admin API returns it."""

    model_config = ConfigDict(from_attributes=True, validate_by_name=True)


class AdminBulkResult(BaseModel):
    items: list[Memory]
    duplicates: list[DuplicateOut]


class AdminMemoryPage(BaseModel):
    items: list[Memory]
    total: int
    next_offset: int | None


class AdminMemoryHistory(BaseModel):
    """Every version of one memory (deleted ones too), oldest first, as the admin API lists it."""

    id: uuid.UUID
    current: uuid.UUID | None
    versions: list[Memory]
