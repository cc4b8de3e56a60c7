"""The export file: JSON Lines, one object per line, told apart by `kind`.

    {"kind": "header", "format": "pgrecall-export", "version": 1, "user_id": ..., ...}
    {"kind": "conversation", ...}   every conversation
    {"kind": "message", ...}        every message, in each conversation's order
    {"kind": "memory", ...}         every version of every memory (deleted ones too), with
                                    valid_from / valid_to / supersedes_id: the history chains
    {"kind": "end", "counts": {...}}  last line; a file without it is truncated

`embedding` is present on messages and memories only in an export made with embeddings.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.domain import MemoryType
from app.schemas.common import Tags

FORMAT = "pgrecall-export"
VERSION = 1


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HeaderLine(_Line):
    kind: Literal["header"] = "header"
    format: Literal["pgrecall-export"] = FORMAT
    version: Literal[1] = VERSION
    user_id: str
    exported_at: datetime
    embeddings: bool = Field(description="vectors included (each line names its model)")


class ConversationLine(_Line):
    kind: Literal["conversation"] = "conversation"
    id: uuid.UUID
    title: str | None
    created_at: datetime
    updated_at: datetime
    # The agent and run within the user's memory (migration 0019; absent: unscoped).
    agent_id: str | None = None
    run_id: str | None = None


class MessageLine(_Line):
    kind: Literal["message"] = "message"
    id: uuid.UUID
    conversation_id: uuid.UUID
    role: Literal["user", "assistant", "system"]
    content: str
    created_at: datetime
    correlation_id: uuid.UUID
    metadata: dict[str, Any]
    embedding_model: str | None
    embedding: list[float] | None = None
    # The agent and run within the user's memory (migration 0019; absent: unscoped).
    agent_id: str | None = None
    run_id: str | None = None


class MemoryLine(_Line):
    kind: Literal["memory"] = "memory"
    id: uuid.UUID
    content: str = Field(min_length=1)
    type: MemoryType
    importance: float = Field(ge=0.0, le=1.0)
    source: str | None
    source_message_id: uuid.UUID | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    deleted_at: datetime | None
    valid_from: datetime
    valid_to: datetime | None
    supersedes_id: uuid.UUID | None
    metadata: dict[str, Any]
    embedding_model: str
    embedding: list[float] | None = None
    # Since migration 0014_tags_usage; files written before it have none (defaults).
    tags: Tags = Field(default_factory=list)
    last_retrieved_at: datetime | None = None
    times_retrieved: int = Field(default=0, ge=0)
    # The agent and run within the user's memory (migration 0019; absent: unscoped).
    agent_id: str | None = None
    run_id: str | None = None


class EndLine(_Line):
    kind: Literal["end"] = "end"
    counts: dict[str, int]
