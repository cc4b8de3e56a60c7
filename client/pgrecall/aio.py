"""The asynchronous client: `AsyncClient`, the same methods as `pgrecall.client.Client`, awaited.

Import it from `pgrecall.client`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import Any, TypeVar

import httpx

from pgrecall import _calls as c
from pgrecall import types as t
from pgrecall._base import Base
from pgrecall._calls import Ident, Item, TimeFilters
from pgrecall._core import Call, RetryPolicy, retry_delay
from pgrecall._transport import StreamTransport
from pgrecall.console import AsyncConsole

T = TypeVar("T")


def transport(base_url: str, sizing: dict[str, Any]) -> dict[str, Any]:
    """httpx.AsyncClient's arguments for the connection pool: StreamTransport for a plain
    `http://` service (a millisecond less of the client's CPU per request than httpx's own;
    pgrecall/_transport.py), sized by `sizing`'s limits; httpx's own transport for `https://`."""
    if not base_url.lower().startswith("http://"):
        return sizing
    return {"transport": StreamTransport(sizing.get("limits"))}


class AsyncClient(Base):
    """Asynchronous client; the same methods as `Client`, awaited. This class is where a route
    is written: pgrecall.client derives Client from it."""

    _default_sleep = staticmethod(asyncio.sleep)

    def _open(self, timeout: float, sizing: dict[str, Any]) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout, **transport(self.base_url, sizing))

    @classmethod
    def for_app(
        cls,
        app: Any,
        *,
        user_id: str | None = None,
        api_key: str | None = None,
        admin_key: str | None = None,
        retry: RetryPolicy | None = None,
        **scope: Any,
    ) -> AsyncClient:
        """A client on an ASGI app in this process (no socket, same request path): the eval
        harness drives the service this way. `scope`: agent_id, run_id, scope_mode, spaces."""
        base_url = "http://pgrecall"
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=base_url)
        client = cls(
            base_url,
            user_id=user_id,
            api_key=api_key,
            admin_key=admin_key,
            retry=retry,
            http=http,
            **scope,
        )
        client._owns_http = True
        return client

    @cached_property
    def console(self) -> AsyncConsole:
        """The admin console (sign in with the admin key, fetch pages, post forms)."""
        return AsyncConsole(self)

    def _sibling(self) -> AsyncClient:
        """A client with this one's settings and a connection pool of its own.

        Connections belong to the event loop that opened them; a sibling is what another loop
        (another thread, a later `asyncio.run`) uses. An in-process app (`for_app`) has no
        connections, so its siblings share its transport.
        """
        transport = getattr(self._http, "_transport", None)
        http: httpx.AsyncClient | None = None
        if isinstance(transport, httpx.ASGITransport):
            http = httpx.AsyncClient(transport=transport, base_url=self.base_url)
        client = AsyncClient(
            self.base_url,
            user_id=self.user_id,
            api_key=self.api_key,
            admin_key=self.admin_key,
            timeout=self._timeout,
            retry=self.retry,
            http=http,
            max_connections=self._max_connections if http is None else None,
            sleep=self._sleep,
            **self._scope(),
        )
        client._owns_http = True
        return client

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = await self._http.send(self._request(self._http, call))
            except httpx.TransportError as exc:
                delay = retry_delay(call, attempt, self.retry, error=exc)
                if delay is None:
                    raise self._transport_error(exc) from exc
            else:
                delay = retry_delay(call, attempt, self.retry, response=response)
                if delay is None:
                    return self._result(call, response)
            await self._sleep(delay)
            attempt += 1

    async def create_conversation(self, title: str | None = None) -> t.Conversation:
        """Start a conversation for the client's user."""
        return await self._run(c.create_conversation(title))

    async def get_conversation(self, conversation_id: Ident) -> t.Conversation:
        """One of the user's conversations."""
        return await self._run(c.get_conversation(conversation_id))

    async def update_conversation(self, conversation_id: Ident, **changes: Any) -> t.Conversation:
        """Change `title` and/or `extraction` (True/False override the service's LLM
        extraction default for this conversation, None follows it)."""
        return await self._run(c.update_conversation(conversation_id, changes))

    async def list_conversations(self, *, limit: int = 50, offset: int = 0) -> t.ConversationPage:
        """The user's conversations, most recently updated first."""
        return await self._run(c.list_conversations(limit, offset))

    async def append_message(
        self,
        conversation_id: Ident,
        role: str,
        content: str,
        *,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> t.Message:
        """Store one message (committed before this returns)."""
        return await self._run(
            c.append_message(conversation_id, role, content, created_at, metadata)
        )

    async def import_messages(
        self, conversation_id: Ident, messages: Sequence[Item]
    ) -> t.MessageList:
        """Store up to 1000 messages in order, all or nothing."""
        return await self._run(c.import_messages(conversation_id, messages))

    async def list_messages(
        self, conversation_id: Ident, *, after: int | None = None, limit: int = 100
    ) -> t.MessagePage:
        """A page of the conversation's messages in order."""
        return await self._run(c.list_messages(conversation_id, after, limit))

    async def get_session(self, conversation_id: Ident) -> t.SessionOut:
        """Session state: the last messages and the goal."""
        return await self._run(c.get_session(conversation_id))

    async def set_session_goal(self, conversation_id: Ident, goal: str | None) -> t.SessionOut:
        """Set (or clear with None) the session's goal."""
        return await self._run(c.set_session_goal(conversation_id, goal))

    async def delete_last_message(self, conversation_id: Ident) -> t.Message | None:
        """Delete the conversation's newest message and return it (None when it had none)."""
        return await self._run(c.delete_last_message(conversation_id))

    async def delete_messages(self, conversation_id: Ident) -> int:
        """Delete every message of the conversation (it stays); how many there were."""
        return await self._run(c.delete_messages(conversation_id))

    async def save_memory(
        self,
        content: str,
        type: str,
        *,
        importance: float | None = None,
        expires_at: datetime | None = None,
        supersedes: Ident | None = None,
        tags: Sequence[str] | None = None,
    ) -> t.SaveMemoryResult:
        """The agent write tool: store a memory (a near-duplicate updates the stored one);
        `evicted` names what the user's cap soft-deleted to make room."""
        return await self._run(
            c.save_memory(content, type, importance, expires_at, supersedes, tags)
        )

    async def forget_memory(self, memory_id: Ident) -> t.ForgetMemoryResult:
        """The agent tool: soft-delete one of the user's memories."""
        return await self._run(c.forget_memory(memory_id))

    async def rate_message(self, message_id: Ident, vote: str) -> t.RateMessageResult:
        """The agent tool: `up` keeps a message as a note, `down` removes that note."""
        return await self._run(c.rate_message(message_id, vote))

    async def store_put(
        self, namespace: Sequence[str], key: str, value: Mapping[str, Any]
    ) -> t.StoreItem:
        """Store a JSON value at (namespace, key), replacing what is there."""
        return await self._run(c.store_put(namespace, key, value))

    async def store_get(self, namespace: Sequence[str], key: str) -> t.StoreItem | None:
        """The item at (namespace, key), None when there is none."""
        return await self._run(c.store_get(namespace, key))

    async def store_delete(self, namespace: Sequence[str], key: str) -> bool:
        """Delete the item at (namespace, key); False when there was none."""
        return await self._run(c.store_delete(namespace, key))

    async def store_search(
        self,
        namespace_prefix: Sequence[str] = (),
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[t.StoreItem]:
        """Items under a namespace prefix, by meaning when `query` is given, else newest first."""
        return await self._run(c.store_search(namespace_prefix, query, filter, limit, offset))

    async def store_namespaces(
        self,
        *,
        prefix: Sequence[str] = (),
        suffix: Sequence[str] = (),
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The user's store namespaces ('*' in prefix or suffix matches any label)."""
        return await self._run(c.store_namespaces(prefix, suffix, max_depth, limit, offset))

    async def health(self) -> dict[str, Any]:
        """GET /health: the process is up (no database work)."""
        return await self._run(c.health())

    async def ready(self) -> dict[str, Any]:
        """GET /ready: database reachable and migrated, Redis state (200 or 503 body)."""
        return await self._run(c.ready())

    async def tools(self) -> dict[str, Any]:
        """The tool definitions and the system-prompt snippet."""
        return await self._run(c.tools())

    async def query_memory(
        self,
        query: str,
        *,
        types: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        times: TimeFilters | None = None,
        tags: Sequence[str] | None = None,
        tags_match: str | None = None,
        **filters: Any,
    ) -> t.QueryMemoryResult:
        """The agent tool: relevant memories and past turns, with a prompt-ready block
        (`tags`: only memories with any of them, or all with tags_match="all"; `filters`: any
        other filter of the service's query contract, by its name, e.g. recency=0.5)."""
        chosen = {"types": types, "sources": sources, "tags": tags, "tags_match": tags_match}
        return await self._run(c.query_memory(query, times, chosen | filters))

    async def memory_query(
        self,
        query: str,
        *,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        min_score: float | None = None,
        token_budget: int | None = None,
        times: TimeFilters | None = None,
        tags: Sequence[str] | None = None,
        tags_match: str | None = None,
        **filters: Any,
    ) -> t.MemoryQueryResponse:
        """The internal retrieval contract: scores, references, timings (`filters` as in
        query_memory)."""
        chosen = {
            "limit": limit,
            "types": types,
            "sources": sources,
            "min_score": min_score,
            "token_budget": token_budget,
            "tags": tags,
            "tags_match": tags_match,
        }
        return await self._run(c.memory_query(query, times, chosen | filters))

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, idempotent: bool = False
    ) -> dict[str, Any]:
        """Any catalog tool by name (GET /v1/tools lists them), its answer as JSON: a tool the
        service adds is callable before this client has a method for it. `idempotent` allows
        retrying it after a 503 (a read, or a write that repeats to the same state)."""
        return await self._run(c.call_tool(name, arguments or {}, idempotent))

    async def create_key(
        self,
        user_id: str,
        *,
        scope: str = "write",
        expires_in: str | None = None,
        agent_id: str | None = None,
    ) -> t.KeyCreated:
        """Admin: a per-user key (`expires_in` like 30d; `agent_id` binds it to one agent, whose
        memory alone its holder reads and writes); the token is in this answer only."""
        return await self._run(c.create_key(user_id, scope, expires_in, agent_id))

    async def list_keys(
        self, user_id: str | None = None, *, limit: int = 100, offset: int = 0
    ) -> t.KeyPage:
        """Admin: keys (never tokens), newest first."""
        return await self._run(c.list_keys(user_id, limit, offset))

    async def revoke_key(self, key_id: Ident) -> t.Key:
        """Admin: revoke a key for good (idempotent)."""
        return await self._run(c.revoke_key(key_id))

    async def create_space(self, space_id: str, *, description: str = "") -> t.Space:
        """Admin: a shared space (lowercase letters, digits, _ . -); 409 when it exists."""
        return await self._run(c.create_space(space_id, description))

    async def list_spaces(self) -> list[t.Space]:
        """Admin: every shared space."""
        return await self._run(c.list_spaces())

    async def delete_space(self, space_id: str) -> None:
        """Admin: the space, its grants and its memories (no member's own memory)."""
        return await self._run(c.delete_space(space_id))

    async def space_members(self, space_id: str) -> list[t.SpaceMember]:
        """Admin: the space's members and their grants."""
        return await self._run(c.space_members(space_id))

    async def grant_space(self, space_id: str, user_id: str, access: str) -> t.SpaceMember:
        """Admin: give the user `read` or `write` access to the space (or change it)."""
        return await self._run(c.grant_space(space_id, user_id, access))

    async def revoke_space(self, space_id: str, user_id: str) -> None:
        """Admin: revoke the user's grant; its next request reads nothing of the space."""
        return await self._run(c.revoke_space(space_id, user_id))

    async def my_spaces(self) -> list[t.SpaceMember]:
        """The client's user's grants: the spaces its `spaces` may name."""
        return await self._run(c.my_spaces())

    async def save_to_space(
        self,
        space_id: str,
        content: str,
        type: str,
        *,
        importance: float | None = None,
        expires_at: datetime | None = None,
        supersedes: Ident | None = None,
        tags: Sequence[str] | None = None,
    ) -> t.SaveMemoryResult:
        """Save a memory into a shared space (a write grant needed): the space's, no agent's,
        so every member reads it."""
        return await self._run(
            c.save_to_space(space_id, content, type, importance, expires_at, supersedes, tags)
        )

    async def create_memory(self, item: Item) -> t.Memory:
        """Admin: one curated memory (the stored one when the user already has the text)."""
        return await self._run(c.create_memory(item))

    async def create_memories(self, memories: Sequence[Item]) -> t.AdminBulkResult:
        """Admin: up to 1000 curated memories in one transaction."""
        return await self._run(c.create_memories(memories))

    async def list_memories(
        self,
        user_id: str,
        *,
        type: str | None = None,
        q: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        include_deleted: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> t.AdminMemoryPage:
        """Admin: one user's memories, newest first."""
        return await self._run(
            c.list_memories(
                user_id, type, q, created_after, created_before, include_deleted, limit, offset
            )
        )

    async def get_memory(self, user_id: str, memory_id: Ident) -> t.Memory:
        """Admin: one memory of the user."""
        return await self._run(c.get_memory(user_id, memory_id))

    async def update_memory(self, user_id: str, memory_id: Ident, **changes: Any) -> t.Memory:
        """Admin: change content, type, importance or expires_at."""
        return await self._run(c.update_memory(user_id, memory_id, changes))

    async def delete_memory(self, user_id: str, memory_id: Ident) -> None:
        """Admin: soft-delete a memory."""
        return await self._run(c.delete_memory(user_id, memory_id))

    async def restore_memory(self, user_id: str, memory_id: Ident) -> t.Memory:
        """Admin: undo a soft delete."""
        return await self._run(c.restore_memory(user_id, memory_id))

    async def admin_memory_history(self, user_id: str, memory_id: Ident) -> t.AdminMemoryHistory:
        """Admin: every version of the user's memory (deleted ones too), oldest first."""
        return await self._run(c.admin_memory_history(user_id, memory_id))

    async def memory_history(self, memory_id: Ident) -> t.MemoryHistory:
        """The caller's own memory's versions, oldest first (each supersedes the one before)."""
        return await self._run(c.memory_history(memory_id))

    async def export(self, *, embeddings: bool = False) -> list[dict[str, Any]]:
        """Everything the service holds about the caller, as the JSON Lines records of
        GET /v1/export (header, conversations, messages, memories, end line with counts)."""
        return await self._run(c.export(embeddings))
