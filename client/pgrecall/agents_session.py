"""OpenAI Agents SDK `Session` backed by a pgrecall conversation (`pip install pgrecall[agents]`).

    from agents import Agent, Runner
    from pgrecall.agents_session import PgrecallSession
    session = await PgrecallSession.start("http://127.0.0.1:8000", api_key="pgr_...")
    await Runner.run(agent, "Hi", session=session)      # session.session_id: the conversation

The session is one conversation of the credential's user; its items are the conversation's
messages, so query_memory recalls what was said. A chat message (`role` user, assistant, system
or developer with text content) is stored as that text; the item's other fields ride along in
the message's metadata (`agents`), so get_items gives back what add_items was given. Other
items (tool calls, tool outputs, reasoning) are stored as their JSON, as assistant messages.
pop_item and clear_session delete messages (`DELETE .../messages/last`, `.../messages`).

Scopes (docs/agents.md, "Scopes and shared spaces"): with `agent_id` (or `run_id`) the
conversation and its messages are that agent's (run's): another agent of the same user cannot
read or change them, and what the agent recalls through query_memory leaves other agents' turns
out. A `client` passed in keeps its own scope (`AsyncClient(..., agent_id="support")`); the
arguments are for the client the session makes itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from pgrecall import types as t
from pgrecall.client import AsyncClient

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["PgrecallSession", "decode", "encode"]

KEY = "agents"
AS_JSON = "json"
PAGE = 500
BULK = 1000
# The service's limit on a message's metadata (app/schemas/common.py MAX_METADATA_BYTES).
MAX_METADATA_BYTES = 8192
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _fits(metadata: Mapping[str, Any]) -> bool:
    return len(json.dumps(metadata, ensure_ascii=False).encode()) <= MAX_METADATA_BYTES


def encode(item: Mapping[str, Any]) -> dict[str, Any]:
    """A session item as a message to store: {role, content, metadata}."""
    role = item.get("role")
    content = item.get("content")
    rest = {k: v for k, v in item.items() if k != "content"}
    if role in ROLES and isinstance(content, str) and content.strip():
        metadata: dict[str, Any] = {KEY: rest}
        if _fits(metadata):
            return {"role": ROLES[role], "content": content, "metadata": metadata}
    if role in ROLES and isinstance(content, list) and len(content) == 1:
        # One output part (an assistant answer): its text is the message, the part's other
        # fields ride along.
        (part,) = content
        text = part.get("text") if isinstance(part, Mapping) else None
        if isinstance(text, str) and text.strip():
            shell = {k: v for k, v in part.items() if k != "text"}
            metadata = {KEY: rest, "part": shell}
            if _fits(metadata):
                return {"role": ROLES[role], "content": text, "metadata": metadata}
    raw = json.dumps(dict(item), ensure_ascii=False, separators=(",", ":"))
    return {"role": ROLES.get(str(role), "assistant"), "content": raw, "metadata": {KEY: AS_JSON}}


def decode(message: t.Message) -> dict[str, Any]:
    """The session item a stored message stands for (any message: written here or not)."""
    meta = message.metadata.get(KEY)
    if meta == AS_JSON:
        return dict(json.loads(message.content))
    if isinstance(meta, dict):
        part = message.metadata.get("part")
        if isinstance(part, dict):
            return {**meta, "content": [{**part, "text": message.content}]}
        return {**meta, "content": message.content}
    return {"role": message.role, "content": message.content}


class _CallClient:
    """`async with`: the client, closed on the way out."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def __aenter__(self) -> AsyncClient:
        return self.client

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.client.aclose()


class PgrecallSession:
    """The Agents SDK Session protocol over one pgrecall conversation.

    Usable from any event loop and thread (`Runner.run`, `Runner.run_sync`, a session made
    under one `asyncio.run` and used under the next): an HTTP connection belongs to the event
    loop that opened it, so each session call uses a client of its own (with the settings of
    the client it was given), closed before the call returns.
    """

    def __init__(
        self,
        session_id: str,
        client: AsyncClient | None = None,
        *,
        base_url: str = "http://127.0.0.1:8000",
        user_id: str | None = None,
        api_key: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> None:
        self.session_id = session_id
        self.client = client or AsyncClient(
            base_url, user_id=user_id, api_key=api_key, agent_id=agent_id, run_id=run_id
        )
        # As the SDK's own sessions: no limit unless one is set.
        self.session_settings: SessionSettings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )

    def _pgr(self) -> _CallClient:
        """A client for this call, closed in the loop that opened it.

        Connections belong to the event loop that opened them, and the SDK runs a session
        under many loops (`run_sync`, threads, one `asyncio.run` after another) without saying
        when a loop ends: a pool kept per loop outlives its loop and leaks its sockets. A
        session call makes a few requests, so each call has its own pool. (A class, not an
        async generator: `run_sync` keeps running its loop after finalising its generators.)
        """
        return _CallClient(self.client._sibling())

    @classmethod
    async def start(
        cls,
        base_url: str = "http://127.0.0.1:8000",
        *,
        user_id: str | None = None,
        api_key: str | None = None,
        title: str | None = None,
        client: AsyncClient | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
    ) -> PgrecallSession:
        """A new conversation of the user (of its agent and run, when given), as a session."""
        session = cls(
            "",
            client,
            base_url=base_url,
            user_id=user_id,
            api_key=api_key,
            session_settings=session_settings,
            agent_id=agent_id,
            run_id=run_id,
        )
        async with session._pgr() as pgr:
            conversation = await pgr.create_conversation(title)
        session.session_id = str(conversation.id)
        return session

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in order; with a limit, the latest `limit` of them."""
        wanted = resolve_session_limit(limit, self.session_settings)
        messages: list[t.Message] = []
        after: int | None = None
        async with self._pgr() as pgr:
            while True:
                page = await pgr.list_messages(self.session_id, after=after, limit=PAGE)
                messages.extend(page.items)
                if page.next_after is None:
                    break
                after = page.next_after
        if wanted is not None:
            messages = messages[-wanted:] if wanted > 0 else []
        return [decode(m) for m in messages]  # type: ignore[misc]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items in order (committed before this returns)."""
        encoded = [encode(item) for item in items]  # type: ignore[arg-type]
        async with self._pgr() as pgr:
            for start in range(0, len(encoded), BULK):
                await pgr.import_messages(self.session_id, encoded[start : start + BULK])

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; None when the session is empty."""
        async with self._pgr() as pgr:
            message = await pgr.delete_last_message(self.session_id)
        return decode(message) if message is not None else None  # type: ignore[return-value]

    async def clear_session(self) -> None:
        """Remove every item (the conversation itself stays)."""
        async with self._pgr() as pgr:
            await pgr.delete_messages(self.session_id)
