"""What the proxy reads from a chat completions request; everything else passes through."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from app.schemas.common import json_float, json_int
from app.schemas.query import QueryFilters

MAX_CHAT_MESSAGES = 10_000
DEFAULT_RECALL_ROUNDS = 3
MAX_RECALL_ROUNDS = 5


class MemoryOptions(QueryFilters):
    """Per-request memory settings: the `memory` object of the body (`extra_body` in openai);
    the query's filters are those of every door (QueryFilters)."""

    model_config = ConfigDict(extra="forbid")
    top_k: json_int(ge=1, le=100) | None = Field(
        default=None, description="at most this many memories (default PGRECALL_MAX_RESULTS)"
    )
    min_relevance: json_float(ge=0.0, le=1.0) | None = Field(
        default=None, description="relevance floor (default PGRECALL_MIN_RELEVANCE)"
    )
    token_budget: json_int(ge=1, le=100_000) | None = Field(
        default=None, description="tokens of memories at most (default PGRECALL_TOKEN_BUDGET)"
    )
    off: StrictBool = Field(default=False, description="no lookup, no injection (turns stored)")
    conversation_id: uuid.UUID | None = Field(
        default=None, description="store the turns here; unset = a new conversation"
    )
    summary: StrictBool = Field(
        default=False,
        description="inject the conversation's rolling summary (LLM extraction only)",
    )
    recall_tags: StrictBool = Field(
        default=False,
        description="the model may write <recall>query</recall>; the proxy answers with "
        "<memo>...</memo> and the model continues (app/proxy/recall_tags.py)",
    )
    recall_rounds: json_int(ge=1, le=MAX_RECALL_ROUNDS) = Field(
        default=DEFAULT_RECALL_ROUNDS, description="lookups per request at most (recall_tags)"
    )
    show_tags: StrictBool = Field(
        default=False, description="recall_tags: the answer keeps the tags and memos"
    )


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    """The fields the proxy needs; the body is forwarded as sent, minus `memory`."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1, max_length=256)
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_CHAT_MESSAGES)
    stream: StrictBool = False
    memory: MemoryOptions | None = None


def message_text(message: ChatMessage) -> str:
    """The text of a message: its string content, or its text parts joined."""
    if isinstance(message.content, str):
        return message.content
    parts = message.content or []
    return "\n".join(
        str(p.get("text", "")) for p in parts if p.get("type") == "text" and p.get("text")
    )


def answer_text(message: Any) -> str | None:
    """A completion message's text: its `content`, "" for tool calls only, the refusal for a
    refusal; None when it says nothing (`content` null and no tool call: no answer, which a
    200 must not pass off as one) or is not a message."""
    if not isinstance(message, dict):
        return None
    text = message.get("content")
    if isinstance(text, str):
        return text
    if message.get("tool_calls") or message.get("function_call"):
        return ""
    refusal = message.get("refusal")
    return refusal if isinstance(refusal, str) and refusal else None


def with_system_message(body: dict[str, Any], content: str) -> dict[str, Any]:
    """The body with `content` as its own system message after the caller's leading system
    (and developer) messages, never merged into a user's text."""
    messages = list(body["messages"])
    at = 0
    while at < len(messages) and messages[at].get("role") in {"system", "developer"}:
        at += 1
    messages.insert(at, {"role": "system", "content": content})
    return {**body, "messages": messages}
