"""Typed HTTP client for pgrecall: `Client` (sync) and `AsyncClient`, both on httpx.

    from pgrecall.client import Client
    with Client("http://127.0.0.1:8000", user_id="alice", api_key="...") as pgr:
        conv = pgr.create_conversation("setup")
        pgr.append_message(conv.id, "user", "I prefer uv over pip")
        print(pgr.query_memory("which package manager?").formatted)

Every failure raises `PgrecallError` (status, error, detail, fields: the service's error body).
Retries (bounded, Retry-After honoured): a 503 on a read (GETs, query_memory, memory_query) or
an idempotent write (session goal, admin create/update/delete/restore: the service deduplicates
memories by text), and a 503 on any other write only when its body says nothing was stored
(DatabaseUnavailableError, EmbeddingError); connection failures before the request was sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import httpx

from pgrecall import _calls as c
from pgrecall import types as t
from pgrecall._calls import Ident, Item
from pgrecall._core import Call, PgrecallError, RetryPolicy, retry_delay

__all__ = ["AsyncClient", "Client", "PgrecallError", "RetryPolicy"]

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0


class _Base:
    def __init__(
        self,
        base_url: str,
        user_id: str | None,
        api_key: str | None,
        admin_key: str | None,
        retry: RetryPolicy | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.user_id = user_id
        self.api_key = api_key
        self.admin_key = admin_key
        self.retry = retry or RetryPolicy()

    def _headers(self, call: Call[Any]) -> dict[str, str]:
        headers: dict[str, str] = {}
        key = self.admin_key if call.admin and self.admin_key else self.api_key
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if not call.admin and self.user_id is not None:
            headers["X-User-Id"] = self.user_id
        return headers

    def _request(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        return http.build_request(
            call.method,
            self.base_url + call.path,
            json=call.json,
            params=call.params,
            headers=self._headers(call),
        )

    @staticmethod
    def _result(call: Call[T], response: httpx.Response) -> T:
        if response.status_code not in call.expect:
            raise PgrecallError.from_response(response)
        return call.parse(response)

    @staticmethod
    def _transport_error(exc: httpx.TransportError) -> PgrecallError:
        error = PgrecallError(0, type(exc).__name__, str(exc) or repr(exc))
        error.__cause__ = exc
        return error


class Client(_Base):
    """Synchronous client; `as_user` gives a view for another user on the same connections."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        user_id: str | None = None,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(base_url, user_id, api_key, admin_key, retry)
        self._owns_http = http is None
        self._http = http or httpx.Client(timeout=timeout)
        self._sleep = sleep

    def as_user(self, user_id: str) -> Client:
        """The same client acting for another user (shares the connection pool)."""
        view = Client(
            self.base_url,
            user_id=user_id,
            api_key=self.api_key,
            admin_key=self.admin_key,
            retry=self.retry,
            http=self._http,
            sleep=self._sleep,
        )
        return view

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _run(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            try:
                response = self._http.send(self._request(self._http, call))
            except httpx.TransportError as exc:
                delay = retry_delay(call, attempt, self.retry, error=exc)
                if delay is None:
                    raise self._transport_error(exc) from exc
            else:
                delay = retry_delay(call, attempt, self.retry, response=response)
                if delay is None:
                    return self._result(call, response)
            self._sleep(delay)
            attempt += 1

    def create_conversation(self, title: str | None = None) -> t.Conversation:
        """Start a conversation for the client's user."""
        return self._run(c.create_conversation(title))

    def get_conversation(self, conversation_id: Ident) -> t.Conversation:
        """One of the user's conversations."""
        return self._run(c.get_conversation(conversation_id))

    def list_conversations(self, *, limit: int = 50, offset: int = 0) -> t.ConversationPage:
        """The user's conversations, most recently updated first."""
        return self._run(c.list_conversations(limit, offset))

    def append_message(
        self,
        conversation_id: Ident,
        role: str,
        content: str,
        *,
        created_at: datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> t.Message:
        """Store one message (committed before this returns)."""
        return self._run(c.append_message(conversation_id, role, content, created_at, metadata))

    def import_messages(self, conversation_id: Ident, messages: Sequence[Item]) -> t.MessageList:
        """Store up to 1000 messages in order, all or nothing."""
        return self._run(c.import_messages(conversation_id, messages))

    def list_messages(
        self, conversation_id: Ident, *, after: int | None = None, limit: int = 100
    ) -> t.MessagePage:
        """A page of the conversation's messages in order."""
        return self._run(c.list_messages(conversation_id, after, limit))

    def get_session(self, conversation_id: Ident) -> t.SessionOut:
        """Session state: the last messages and the goal."""
        return self._run(c.get_session(conversation_id))

    def set_session_goal(self, conversation_id: Ident, goal: str | None) -> t.SessionOut:
        """Set (or clear with None) the session's goal."""
        return self._run(c.set_session_goal(conversation_id, goal))

    def tools(self) -> dict[str, Any]:
        """The tool definitions and the system-prompt snippet."""
        return self._run(c.tools())

    def query_memory(
        self,
        query: str,
        *,
        types: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
    ) -> t.QueryMemoryResult:
        """The agent tool: relevant memories and past turns, with a prompt-ready block."""
        return self._run(c.query_memory(query, types, sources))

    def memory_query(
        self,
        query: str,
        *,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        min_score: float | None = None,
        token_budget: int | None = None,
    ) -> t.MemoryQueryResponse:
        """The internal retrieval contract: scores, references, timings."""
        return self._run(c.memory_query(query, limit, types, sources, min_score, token_budget))

    def create_memory(self, item: Item) -> t.Memory:
        """Admin: one curated memory (the stored one when the user already has the text)."""
        return self._run(c.create_memory(item))

    def create_memories(self, memories: Sequence[Item]) -> t.AdminBulkResult:
        """Admin: up to 1000 curated memories in one transaction."""
        return self._run(c.create_memories(memories))

    def list_memories(
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
        return self._run(
            c.list_memories(
                user_id, type, q, created_after, created_before, include_deleted, limit, offset
            )
        )

    def get_memory(self, user_id: str, memory_id: Ident) -> t.Memory:
        """Admin: one memory of the user."""
        return self._run(c.get_memory(user_id, memory_id))

    def update_memory(self, user_id: str, memory_id: Ident, **changes: Any) -> t.Memory:
        """Admin: change content, type, importance or expires_at."""
        return self._run(c.update_memory(user_id, memory_id, changes))

    def delete_memory(self, user_id: str, memory_id: Ident) -> None:
        """Admin: soft-delete a memory."""
        return self._run(c.delete_memory(user_id, memory_id))

    def restore_memory(self, user_id: str, memory_id: Ident) -> t.Memory:
        """Admin: undo a soft delete."""
        return self._run(c.restore_memory(user_id, memory_id))


class AsyncClient(_Base):
    """Asynchronous client; the same methods as `Client`, awaited."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        user_id: str | None = None,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        http: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(base_url, user_id, api_key, admin_key, retry)
        self._owns_http = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)
        self._sleep = sleep

    def as_user(self, user_id: str) -> AsyncClient:
        """The same client acting for another user (shares the connection pool)."""
        return AsyncClient(
            self.base_url,
            user_id=user_id,
            api_key=self.api_key,
            admin_key=self.admin_key,
            retry=self.retry,
            http=self._http,
            sleep=self._sleep,
        )

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

    async def tools(self) -> dict[str, Any]:
        """The tool definitions and the system-prompt snippet."""
        return await self._run(c.tools())

    async def query_memory(
        self,
        query: str,
        *,
        types: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
    ) -> t.QueryMemoryResult:
        """The agent tool: relevant memories and past turns, with a prompt-ready block."""
        return await self._run(c.query_memory(query, types, sources))

    async def memory_query(
        self,
        query: str,
        *,
        limit: int | None = None,
        types: Sequence[str] | None = None,
        sources: Sequence[str] | None = None,
        min_score: float | None = None,
        token_budget: int | None = None,
    ) -> t.MemoryQueryResponse:
        """The internal retrieval contract: scores, references, timings."""
        return await self._run(
            c.memory_query(query, limit, types, sources, min_score, token_budget)
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
