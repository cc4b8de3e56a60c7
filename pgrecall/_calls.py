"""One function per route: the `Call` the clients run (path, body, answer type, retry safety)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from pgrecall import types as t
from pgrecall._core import Call, as_json, drop_none, dump, items, model, nothing

Ident = uuid.UUID | str
Item = BaseModel | Mapping[str, Any]


def _conversations(suffix: str = "") -> str:
    return f"/v1/conversations{suffix}"


def create_conversation(title: str | None) -> Call[t.Conversation]:
    return Call("POST", _conversations(), model(t.Conversation), json=drop_none({"title": title}))


def get_conversation(conversation_id: Ident) -> Call[t.Conversation]:
    return Call(
        "GET", _conversations(f"/{conversation_id}"), model(t.Conversation), idempotent=True
    )


def list_conversations(limit: int, offset: int) -> Call[t.ConversationPage]:
    return Call(
        "GET",
        _conversations(),
        model(t.ConversationPage),
        params={"limit": limit, "offset": offset},
        idempotent=True,
    )


def append_message(
    conversation_id: Ident,
    role: str,
    content: str,
    created_at: datetime | None,
    metadata: Mapping[str, Any] | None,
) -> Call[t.Message]:
    body = drop_none(
        {"role": role, "content": content, "created_at": created_at, "metadata": metadata}
    )
    return Call("POST", _conversations(f"/{conversation_id}/messages"), model(t.Message), json=body)


def import_messages(conversation_id: Ident, messages: Sequence[Item]) -> Call[t.MessageList]:
    return Call(
        "POST",
        _conversations(f"/{conversation_id}/messages:bulk"),
        model(t.MessageList),
        json={"messages": items(messages)},
    )


def list_messages(conversation_id: Ident, after: int | None, limit: int) -> Call[t.MessagePage]:
    return Call(
        "GET",
        _conversations(f"/{conversation_id}/messages"),
        model(t.MessagePage),
        params=drop_none({"after": after, "limit": limit}),
        idempotent=True,
    )


def get_session(conversation_id: Ident) -> Call[t.SessionOut]:
    return Call(
        "GET", _conversations(f"/{conversation_id}/session"), model(t.SessionOut), idempotent=True
    )


def set_session_goal(conversation_id: Ident, goal: str | None) -> Call[t.SessionOut]:
    return Call(
        "PUT",
        _conversations(f"/{conversation_id}/session"),
        model(t.SessionOut),
        json={"goal": goal},
        idempotent=True,
    )


def tools() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/tools", as_json, idempotent=True)


def query_memory(
    query: str, types: Sequence[str] | None, sources: Sequence[str] | None
) -> Call[t.QueryMemoryResult]:
    body = drop_none(
        {
            "query": query,
            "types": list(types) if types is not None else None,
            "sources": list(sources) if sources is not None else None,
        }
    )
    # A read: retrying it stores nothing twice.
    return Call(
        "POST", "/v1/tools/query_memory", model(t.QueryMemoryResult), json=body, idempotent=True
    )


def memory_query(
    query: str,
    limit: int | None,
    types: Sequence[str] | None,
    sources: Sequence[str] | None,
    min_score: float | None,
    token_budget: int | None,
) -> Call[t.MemoryQueryResponse]:
    body = drop_none(
        {
            "query": query,
            "limit": limit,
            "types": list(types) if types is not None else None,
            "sources": list(sources) if sources is not None else None,
            "min_score": min_score,
            "token_budget": token_budget,
        }
    )
    return Call(
        "POST", "/v1/memory/query", model(t.MemoryQueryResponse), json=body, idempotent=True
    )


def _admin(suffix: str = "") -> str:
    return f"/v1/admin/memories{suffix}"


def create_memory(item: Item) -> Call[t.Memory]:
    # The service answers 200 with the stored item when the user already has this text, so a
    # repeated create stores nothing twice.
    return Call("POST", _admin(), model(t.Memory), json=dump(item), admin=True, idempotent=True)


def create_memories(memories: Sequence[Item]) -> Call[t.AdminBulkResult]:
    return Call(
        "POST",
        _admin(":bulk"),
        model(t.AdminBulkResult),
        json={"items": items(memories)},
        admin=True,
        idempotent=True,
    )


def list_memories(
    user_id: str,
    type_: str | None,
    q: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
    include_deleted: bool,
    limit: int,
    offset: int,
) -> Call[t.AdminMemoryPage]:
    params = drop_none(
        {
            "user_id": user_id,
            "type": type_,
            "q": q,
            "created_after": created_after,
            "created_before": created_before,
            "include_deleted": "true" if include_deleted else None,
            "limit": limit,
            "offset": offset,
        }
    )
    return Call(
        "GET", _admin(), model(t.AdminMemoryPage), params=params, admin=True, idempotent=True
    )


def get_memory(user_id: str, memory_id: Ident) -> Call[t.Memory]:
    return Call(
        "GET",
        _admin(f"/{memory_id}"),
        model(t.Memory),
        params={"user_id": user_id},
        admin=True,
        idempotent=True,
    )


def update_memory(user_id: str, memory_id: Ident, changes: Mapping[str, Any]) -> Call[t.Memory]:
    return Call(
        "PATCH",
        _admin(f"/{memory_id}"),
        model(t.Memory),
        json=dump(changes),
        params={"user_id": user_id},
        admin=True,
        idempotent=True,
    )


def delete_memory(user_id: str, memory_id: Ident) -> Call[None]:
    return Call(
        "DELETE",
        _admin(f"/{memory_id}"),
        nothing,
        params={"user_id": user_id},
        admin=True,
        idempotent=True,
    )


def restore_memory(user_id: str, memory_id: Ident) -> Call[t.Memory]:
    return Call(
        "POST",
        _admin(f"/{memory_id}/restore"),
        model(t.Memory),
        params={"user_id": user_id},
        admin=True,
        idempotent=True,
    )
