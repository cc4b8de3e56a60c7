"""Session state: the last N messages and the goal of a conversation, cached in Redis.

Postgres is the truth (the messages, and the goal in conversations.goal); Redis holds a copy
that makes reads faster and must never miss a message. Without Redis (the embedded defaults)
every read comes from Postgres. Every write extends
the copy only if it ends where Postgres did before the write, and every read serves the copy
only if it ends with the conversation's last stored message; otherwise the copy is rebuilt from
Postgres. A cache write that failed (Redis paused, down, or a lost race) therefore costs one
rebuild, never a gap. Message writes (append, delete) go through this service, which registers
the refresh of the copy to run after the commit, so no door can forget it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Unpack

from app.adapters.cache import Cache
from app.db import after_commit
from app.models import Message
from app.schemas.conversation import MessageCreate
from app.services.conversation import AppendOptions, ConversationService, StoredMessages


def session_entry(message: Message) -> dict[str, Any]:
    """How one message is kept in the session state."""
    return {
        "id": str(message.id),
        "role": message.role,
        "content": message.content,
        "created_at": message.created_at.isoformat(),
    }


@dataclass(frozen=True)
class SessionView:
    messages: list[dict[str, Any]]
    goal: str | None
    source: Literal["cache", "database"]


class SessionStateService:
    def __init__(self, conversations: ConversationService, cache: Cache, keep: int) -> None:
        self.conversations = conversations
        self.cache = cache
        self.keep = keep

    async def append(
        self,
        user_id: str,
        conversation_id: uuid.UUID,
        messages: Sequence[MessageCreate],
        correlation_id: uuid.UUID,
        **options: Unpack[AppendOptions],
    ) -> StoredMessages:
        """Store the messages (ConversationService.append, with its options); once committed,
        the cached copy is extended and the user's cached query results are dropped."""
        stored = await self.conversations.append(
            user_id, conversation_id, messages, correlation_id, **options
        )
        after_commit(self.conversations.session, self.after_append(user_id, stored))
        return stored

    async def delete_last(self, user_id: str, conversation_id: uuid.UUID) -> Message | None:
        """Delete the newest message; once committed, the cached copy takes the new tail."""
        deleted = await self.conversations.delete_last(user_id, conversation_id)
        if deleted is not None:
            refresh = await self.after_delete(user_id, conversation_id)
            after_commit(self.conversations.session, refresh)
        return deleted

    async def delete_all(self, user_id: str, conversation_id: uuid.UUID) -> int:
        """Delete every message; once committed, the cached copy is emptied (goal kept)."""
        deleted = await self.conversations.delete_all(user_id, conversation_id)
        refresh = await self.after_delete(user_id, conversation_id)
        after_commit(self.conversations.session, refresh)
        return deleted

    def after_append(self, user_id: str, stored: StoredMessages) -> Callable[[], Awaitable[None]]:
        """The work to do once an append has committed: extend the copy, drop cached answers."""
        conversation_id = str(stored.conversation.id)
        entries = [session_entry(m) for m in stored.messages]
        previous = str(stored.previous_id) if stored.previous_id else None

        async def refresh() -> None:
            await self.cache.extend_session(
                user_id, conversation_id, entries, keep=self.keep, after_id=previous
            )
            await self.cache.invalidate_user(user_id)

        return refresh

    async def after_delete(
        self, user_id: str, conversation_id: uuid.UUID
    ) -> Callable[[], Awaitable[None]]:
        """The work to do once a delete has committed: the cached copy takes Postgres's new
        tail (keeping the goal), and cached answers that could quote the deleted turns go."""
        recent = await self.conversations.recent(user_id, conversation_id, self.keep)
        entries = [session_entry(m) for m in recent]
        key = str(conversation_id)

        async def refresh() -> None:
            cached = await self.cache.get_session(user_id, key)
            if cached is not None:
                await self.cache.set_session(
                    user_id, key, entries, goal=cached.goal, keep=self.keep
                )
            await self.cache.invalidate_user(user_id)

        return refresh

    async def read(self, user_id: str, conversation_id: uuid.UUID) -> SessionView:
        """The session state, from the cache when it is complete and has Postgres's goal,
        else rebuilt from Postgres."""
        conversation = await self.conversations.get(user_id, conversation_id)
        goal = conversation.goal
        cached = await self.cache.get_session(user_id, str(conversation_id))
        last = await self.conversations.last_message_id(user_id, conversation_id)
        if cached is not None and cached.goal == goal:
            cached_last = cached.messages[-1].get("id") if cached.messages else None
            if cached_last == (str(last) if last else None):
                return SessionView(cached.messages, cached.goal, "cache")
        recent = await self.conversations.recent(user_id, conversation_id, self.keep)
        entries = [session_entry(m) for m in recent]
        await self.cache.set_session(
            user_id, str(conversation_id), entries, goal=goal, keep=self.keep
        )
        return SessionView(entries, goal, "database")

    async def set_goal(
        self, user_id: str, conversation_id: uuid.UUID, goal: str | None
    ) -> SessionView:
        """Set or clear the session's goal in Postgres; once committed, the cached copy takes
        it (a copy that missed it is rebuilt at the next read: its goal differs)."""
        await self.conversations.set_goal(user_id, conversation_id, goal)
        recent = await self.conversations.recent(user_id, conversation_id, self.keep)
        entries = [session_entry(m) for m in recent]
        key = str(conversation_id)

        async def refresh() -> None:
            await self.cache.set_session(user_id, key, entries, goal=goal, keep=self.keep)

        after_commit(self.conversations.session, refresh)
        return SessionView(entries, goal, "database")
