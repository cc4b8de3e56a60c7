"""Conversations and messages over HTTP."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from app.schemas.common import Content, Metadata, Timestamp, storable_text

Role = Literal["user", "assistant", "system"]
MAX_BULK_MESSAGES = 1000
Title = storable_text(500)
Goal = storable_text(2000)
SummaryState = Literal["current", "pending", "off", "no_llm"]


class ConversationCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: Title | None = None


class ConversationUpdate(BaseModel):
    """PATCH /v1/conversations/{id}: the fields given change, the others stay (at least one)."""

    # minProperties: the schema says what the route enforces (an empty body is a 422).
    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})
    title: Title | None = None
    extraction: StrictBool | None = Field(
        default=None,
        description="LLM extraction of this conversation's user turns: true/false override "
        "the service default (PGRECALL_EXTRACTION_DEFAULT), null follows it again",
    )


class ConversationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    title: str | None
    created_at: datetime
    updated_at: datetime
    extraction: bool | None = Field(
        default=None, description="this conversation's extraction setting; null = the default"
    )
    extraction_active: bool = Field(
        default=False,
        description="whether new user turns are queued for LLM extraction (false without a "
        "configured extraction model, whatever the setting)",
    )


class ConversationPage(BaseModel):
    items: list[ConversationOut]
    next_offset: int | None


class MessageCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    content: Content
    created_at: Timestamp | None = Field(
        default=None, description="original time of the turn, for imported histories"
    )
    metadata: Metadata = Field(default_factory=dict)


class MessageBulkCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    messages: list[MessageCreate] = Field(min_length=1, max_length=MAX_BULK_MESSAGES)


class MessageOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)
    id: uuid.UUID
    conversation_id: uuid.UUID
    role: str
    content: str
    correlation_id: uuid.UUID
    created_at: datetime
    seq: int
    metadata: dict[str, object] = Field(validation_alias="metadata_")


class MessageList(BaseModel):
    items: list[MessageOut]


class MessagePage(BaseModel):
    items: list[MessageOut]
    next_after: int | None = Field(description="pass as `after` to read the next page")


class MessagePopped(BaseModel):
    message: MessageOut | None = Field(description="the deleted message; null when there was none")


class MessagesCleared(BaseModel):
    deleted: int = Field(description="how many messages were deleted")


class SessionOut(BaseModel):
    conversation_id: uuid.UUID
    messages: list[dict[str, object]]
    goal: str | None
    source: Literal["cache", "database"]
    summary: str | None = Field(
        default=None, description="the rolling conversation summary (LLM extraction only)"
    )
    summary_updated_at: datetime | None = None
    summary_state: SummaryState = Field(
        default="no_llm",
        description="current: covers the last message; pending: the worker has turns to add; "
        "off: no summary is kept for this conversation (its extraction is off, or "
        "PGRECALL_EXTRACTION_SUMMARY_TOKENS=0); no_llm: no extraction model is configured",
    )


class SessionGoal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    goal: Goal | None = Field(description="the session's current goal; null clears it")
