"""One function per route: the `Call` the clients run (path, body, answer type, retry safety)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from pydantic import BaseModel

from pgrecall import types as t
from pgrecall._core import Call, as_json, drop_none, dump, items, model, nothing

Ident = uuid.UUID | str
Item = BaseModel | Mapping[str, Any]


@dataclass(frozen=True)
class TimeFilters:
    """query_memory / memory_query time window: event time in [time_from, time_to], and only
    what was known at `as_of` (all aware datetimes; None leaves the bound open)."""

    time_from: datetime | None = None
    time_to: datetime | None = None
    as_of: datetime | None = None


def _conversations(suffix: str = "") -> str:
    return f"/v1/conversations{suffix}"


def create_conversation(title: str | None) -> Call[t.Conversation]:
    return Call("POST", _conversations(), model(t.Conversation), json=drop_none({"title": title}))


def get_conversation(conversation_id: Ident) -> Call[t.Conversation]:
    return Call(
        "GET", _conversations(f"/{conversation_id}"), model(t.Conversation), idempotent=True
    )


def update_conversation(conversation_id: Ident, changes: Mapping[str, Any]) -> Call[t.Conversation]:
    # Sets values: repeating it changes nothing, so it is retried like a PUT.
    return Call(
        "PATCH",
        _conversations(f"/{conversation_id}"),
        model(t.Conversation),
        json=dump(changes),
        idempotent=True,
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


def delete_last_message(conversation_id: Ident) -> Call[t.Message | None]:
    # Not idempotent: a repeated pop removes the next message too, so it is never retried.
    return Call(
        "DELETE",
        _conversations(f"/{conversation_id}/messages/last"),
        lambda r: t.MessagePopped.model_validate(r.json()).message,
    )


def delete_messages(conversation_id: Ident) -> Call[int]:
    return Call(
        "DELETE",
        _conversations(f"/{conversation_id}/messages"),
        lambda r: int(r.json()["deleted"]),
        idempotent=True,
    )


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/health", as_json, idempotent=True)


def ready() -> Call[dict[str, Any]]:
    # A 503 here is the answer (not ready), not a failure to retry.
    return Call("GET", "/ready", as_json, expect=frozenset({200, 503}))


def tools() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/tools", as_json, idempotent=True)


def _query(query: str, times: TimeFilters | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A query's body: the text, the time window and every other field set (sequences as lists);
    a filter the service adds is passed by name, unknown to this client."""
    window = (
        {"time_from": times.time_from, "time_to": times.time_to, "as_of": times.as_of}
        if times is not None
        else {}
    )
    given = {
        k: list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v
        for k, v in {**fields, **window}.items()
    }
    return drop_none({"query": query, **given})


def query_memory(
    query: str, times: TimeFilters | None, filters: Mapping[str, Any]
) -> Call[t.QueryMemoryResult]:
    # A read: retrying it stores nothing twice.
    return Call(
        "POST",
        "/v1/tools/query_memory",
        model(t.QueryMemoryResult),
        json=_query(query, times, filters),
        idempotent=True,
    )


def memory_query(
    query: str, times: TimeFilters | None, fields: Mapping[str, Any]
) -> Call[t.MemoryQueryResponse]:
    return Call(
        "POST",
        "/v1/memory/query",
        model(t.MemoryQueryResponse),
        json=_query(query, times, fields),
        idempotent=True,
    )


def call_tool(name: str, arguments: Mapping[str, Any], idempotent: bool) -> Call[dict[str, Any]]:
    return Call(
        "POST", f"/v1/tools/{name}", as_json, json=dump(arguments), idempotent=idempotent
    )


def _memory_body(
    content: str,
    type_: str,
    importance: float | None,
    expires_at: datetime | None,
    supersedes: Ident | None,
    tags: Sequence[str] | None,
) -> dict[str, Any]:
    return drop_none(
        {
            "content": content,
            "type": type_,
            "importance": importance,
            "expires_at": expires_at,
            "supersedes": supersedes,
            "tags": list(tags) if tags is not None else None,
        }
    )


def save_memory(
    content: str,
    type_: str,
    importance: float | None,
    expires_at: datetime | None,
    supersedes: Ident | None,
    tags: Sequence[str] | None = None,
) -> Call[t.SaveMemoryResult]:
    body = _memory_body(content, type_, importance, expires_at, supersedes, tags)
    # A repeat answers "unchanged", but one with `supersedes` finds the old memory gone (404):
    # retried only when the service says nothing was stored.
    return Call("POST", "/v1/tools/save_memory", model(t.SaveMemoryResult), json=body)


def forget_memory(memory_id: Ident) -> Call[t.ForgetMemoryResult]:
    return Call(
        "POST",
        "/v1/tools/forget_memory",
        model(t.ForgetMemoryResult),
        json={"id": str(memory_id)},
        idempotent=True,
    )


def rate_message(message_id: Ident, vote: str) -> Call[t.RateMessageResult]:
    return Call(
        "POST",
        "/v1/tools/rate_message",
        model(t.RateMessageResult),
        json={"message_id": str(message_id), "vote": vote},
        idempotent=True,
    )


def _address(namespace: Sequence[str], key: str) -> dict[str, Any]:
    return {"namespace": list(namespace), "key": key}


def store_put(
    namespace: Sequence[str],
    key: str,
    value: Mapping[str, Any],
    *,
    index: bool = True,
    ttl: float | None = None,
) -> Call[t.StoreItem]:
    body = {**_address(namespace, key), "value": dict(value), "index": index, "ttl": ttl}
    return Call("PUT", "/v1/store/items", model(t.StoreItem), json=drop_none(body), idempotent=True)


def _item_or_none(response: httpx.Response) -> t.StoreItem | None:
    return None if response.status_code == 404 else t.StoreItem.model_validate(response.json())


def store_get(
    namespace: Sequence[str], key: str, *, refresh_ttl: bool = False
) -> Call[t.StoreItem | None]:
    return Call(
        "POST",
        "/v1/store/items:get",
        _item_or_none,
        json={**_address(namespace, key), "refresh_ttl": refresh_ttl},
        idempotent=True,
        expect=frozenset({200, 404}),
    )


def store_delete(namespace: Sequence[str], key: str) -> Call[bool]:
    return Call(
        "POST",
        "/v1/store/items:delete",
        lambda r: bool(r.json()["deleted"]),
        json=_address(namespace, key),
        idempotent=True,
    )


def store_search(
    namespace_prefix: Sequence[str],
    query: str | None,
    filter_: Mapping[str, Any] | None,
    limit: int,
    offset: int,
    *,
    refresh_ttl: bool = False,
) -> Call[list[t.StoreItem]]:
    body = drop_none(
        {
            "namespace_prefix": list(namespace_prefix),
            "query": query,
            "filter": dict(filter_) if filter_ is not None else None,
            "limit": limit,
            "offset": offset,
            "refresh_ttl": refresh_ttl,
        }
    )
    return Call(
        "POST",
        "/v1/store/items:search",
        lambda r: t.StoreItemPage.model_validate(r.json()).items,
        json=body,
        idempotent=True,
    )


def store_sweep() -> Call[int]:
    # Deleting what has expired twice deletes nothing more.
    return Call("POST", "/v1/store/ttl:sweep", lambda r: int(r.json()["deleted"]), idempotent=True)


def store_namespaces(
    prefix: Sequence[str],
    suffix: Sequence[str],
    max_depth: int | None,
    limit: int,
    offset: int,
) -> Call[list[tuple[str, ...]]]:
    body = drop_none(
        {
            "prefix": list(prefix),
            "suffix": list(suffix),
            "max_depth": max_depth,
            "limit": limit,
            "offset": offset,
        }
    )
    return Call(
        "POST",
        "/v1/store/namespaces",
        lambda r: [tuple(n) for n in r.json()["namespaces"]],
        json=body,
        idempotent=True,
    )


def create_key(
    user_id: str, scope: str, expires_in: str | None, agent_id: str | None = None
) -> Call[t.KeyCreated]:
    body = drop_none(
        {"user_id": user_id, "scope": scope, "expires_in": expires_in, "agent_id": agent_id}
    )
    # Not idempotent: a repeat would mint a second key.
    return Call("POST", "/v1/admin/keys", model(t.KeyCreated), json=body, admin=True)


def list_keys(user_id: str | None, limit: int, offset: int) -> Call[t.KeyPage]:
    params = drop_none({"user_id": user_id, "limit": limit, "offset": offset})
    return Call(
        "GET", "/v1/admin/keys", model(t.KeyPage), params=params, admin=True, idempotent=True
    )


def revoke_key(key_id: Ident) -> Call[t.Key]:
    return Call(
        "POST", f"/v1/admin/keys/{key_id}/revoke", model(t.Key), admin=True, idempotent=True
    )


def _spaces(suffix: str = "") -> str:
    return f"/v1/admin/spaces{suffix}"


def create_space(space_id: str, description: str) -> Call[t.Space]:
    body = {"id": space_id, "description": description}
    # Not idempotent: a repeat after a lost answer is a 409.
    return Call("POST", _spaces(), model(t.Space), json=body, admin=True)


def list_spaces() -> Call[list[t.Space]]:
    return Call(
        "GET",
        _spaces(),
        lambda r: t.SpaceList.model_validate(r.json()).spaces,
        admin=True,
        idempotent=True,
    )


def delete_space(space_id: str) -> Call[None]:
    return Call("DELETE", _spaces(f"/{space_id}"), nothing, admin=True)


def _members(response: Any) -> list[t.SpaceMember]:
    return t.SpaceMemberList.model_validate(response.json()).members


def space_members(space_id: str) -> Call[list[t.SpaceMember]]:
    return Call(
        "GET",
        _spaces(f"/{space_id}/members"),
        _members,
        admin=True,
        idempotent=True,
    )


def grant_space(space_id: str, user_id: str, access: str) -> Call[t.SpaceMember]:
    return Call(
        "PUT",
        _spaces(f"/{space_id}/members/{user_id}"),
        model(t.SpaceMember),
        json={"access": access},
        admin=True,
        idempotent=True,
    )


def revoke_space(space_id: str, user_id: str) -> Call[None]:
    return Call("DELETE", _spaces(f"/{space_id}/members/{user_id}"), nothing, admin=True)


def my_spaces() -> Call[list[t.SpaceMember]]:
    return Call(
        "GET",
        "/v1/spaces",
        _members,
        idempotent=True,
    )


def save_to_space(
    space_id: str,
    content: str,
    type_: str,
    importance: float | None,
    expires_at: datetime | None,
    supersedes: Ident | None,
    tags: Sequence[str] | None,
) -> Call[t.SaveMemoryResult]:
    body = _memory_body(content, type_, importance, expires_at, supersedes, tags)
    return Call("POST", f"/v1/spaces/{space_id}/memories", model(t.SaveMemoryResult), json=body)


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


def memory_history(memory_id: Ident) -> Call[t.MemoryHistory]:
    return Call("GET", f"/v1/memories/{memory_id}/history", model(t.MemoryHistory), idempotent=True)


def admin_memory_history(user_id: str, memory_id: Ident) -> Call[t.AdminMemoryHistory]:
    return Call(
        "GET",
        _admin(f"/{memory_id}/history"),
        model(t.AdminMemoryHistory),
        params={"user_id": user_id},
        admin=True,
        idempotent=True,
    )


def _json_lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def export(embeddings: bool) -> Call[list[dict[str, Any]]]:
    return Call(
        "GET",
        "/v1/export",
        _json_lines,
        params={"embeddings": str(embeddings).lower()},
        idempotent=True,
    )
