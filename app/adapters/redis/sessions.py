"""Cached short-term state of a conversation: its last messages and goal, in one hash per
(user, conversation)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import redis.exceptions
from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from app.adapters.redis.breaker import GuardedRedis, logger

_MESSAGE_FIELDS = ("id", "role", "content", "created_at")
# Concurrent appends to one conversation retry their WATCH/MULTI; each retry means another
# append won, so this bound is only reached under pathological contention.
_MAX_WATCH_ATTEMPTS = 100

# Change the goal only of an existing session; ARGV: has_goal ('1'/'0'), goal, updated_at, ttl.
SET_GOAL_LUA = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[1], 'goal', ARGV[2])
else
  redis.call('HDEL', KEYS[1], 'goal')
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


@dataclass(frozen=True)
class SessionState:
    """Cached short-term state of one conversation."""

    messages: list[dict[str, Any]]
    goal: str | None
    updated_at: str | None


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _json_default(value: object) -> str:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} in the session cache")


def _dump_messages(messages: Sequence[Mapping[str, Any]]) -> bytes:
    records = [{name: message.get(name) for name in _MESSAGE_FIELDS} for message in messages]
    text = json.dumps(records, ensure_ascii=False, separators=(",", ":"), default=_json_default)
    return text.encode("utf-8")


def _load_messages(raw: bytes | None) -> list[dict[str, Any]] | None:
    """Decode the `messages` field; None when it is missing or not a JSON list."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, list) else None


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def session_key(user_id: str, conversation_id: str) -> str:
    conversation = str(conversation_id)
    # User ids may contain ':'; a ':'-free conversation id keeps the key unambiguous, which
    # lets delete_user tell "alice" + conv from "alice:x" + conv.
    if ":" in conversation:
        raise ValueError("conversation_id must not contain ':'")
    return f"session:{user_id}:{conversation}"


class SessionCache(GuardedRedis):
    """extend/drop/get/set_session and set_goal of `Cache`."""

    session_ttl_s: int
    _set_goal_script: AsyncScript | None

    async def extend_session(
        self,
        user_id: str,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        keep: int,
        *,
        after_id: str | None,
    ) -> None:
        """Append messages that follow message `after_id` (None: the conversation's first ones).

        The cached list is extended only when its last message is `after_id`; otherwise it
        misses a message (an earlier write that failed or raced) and is dropped, so the next
        read rebuilds it from Postgres. With no cached session, only a conversation's first
        messages start one.
        """
        if keep < 1:
            raise ValueError("keep must be at least 1")
        key = session_key(user_id, conversation_id)
        if self._redis is None or not messages:
            return
        added = json.loads(_dump_messages(messages))
        done = await self._guarded(
            "extend_session",
            lambda r: self._extend(r, key, added, keep, after_id),
            True,
        )
        if not done:
            await self.drop_session(user_id, conversation_id)

    async def drop_session(self, user_id: str, conversation_id: str) -> None:
        """Forget the cached session (readers rebuild it from Postgres)."""
        key = session_key(user_id, conversation_id)
        await self._guarded("drop_session", lambda r: r.delete(key), 0)

    async def _extend(
        self, r: Redis, key: str, added: list[dict[str, Any]], keep: int, after_id: str | None
    ) -> bool:
        """Optimistic read-modify-write; False when the cached list does not end with
        `after_id`, or when every attempt lost to a concurrent write."""
        async with r.pipeline(transaction=True) as pipe:
            for _ in range(_MAX_WATCH_ATTEMPTS):
                try:
                    await pipe.watch(key)
                    stored = _load_messages(await pipe.hget(key, "messages"))
                    if stored is None and after_id is not None:
                        await pipe.unwatch()
                        return True  # only a conversation's first messages start a session
                    last_id = stored[-1].get("id") if stored else None
                    if stored is not None and last_id != after_id:
                        await pipe.unwatch()
                        return False
                    current = stored or []
                    pipe.multi()
                    pipe.hset(
                        key,
                        mapping={
                            "messages": _dump_messages((current + added)[-keep:]),
                            "updated_at": _now_iso(),
                        },
                    )
                    pipe.expire(key, self.session_ttl_s)
                    await pipe.execute()
                    return True
                except redis.exceptions.WatchError:
                    continue  # another append won; re-read and try again
        return False

    async def get_session(self, user_id: str, conversation_id: str) -> SessionState | None:
        """The cached session, or None on a miss or when Redis is not used."""
        key = session_key(user_id, conversation_id)
        if self._redis is None:
            return None
        fields: dict[bytes, bytes] = await self._guarded(
            "get_session", lambda r: r.hgetall(key), {}
        )
        if not fields:
            return None
        messages = _load_messages(fields.get(b"messages"))
        if messages is None:
            logger.warning("ignoring a cached session with an unreadable message list")
            return None
        return SessionState(
            messages=messages,
            goal=_text(fields.get(b"goal")),
            updated_at=_text(fields.get(b"updated_at")),
        )

    async def set_session(
        self,
        user_id: str,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        goal: str | None,
        keep: int,
    ) -> None:
        """Replace the whole session (e.g. rebuilt from Postgres), keeping the last `keep`."""
        if keep < 1:
            raise ValueError("keep must be at least 1")
        key = session_key(user_id, conversation_id)
        if self._redis is None:
            return
        mapping: dict[str, bytes | str] = {
            "messages": _dump_messages(list(messages)[-keep:]),
            "updated_at": _now_iso(),
        }
        if goal is not None:
            mapping["goal"] = goal

        async def replace(r: Redis) -> None:
            async with r.pipeline(transaction=True) as pipe:
                pipe.delete(key)  # drops a stale goal field too
                pipe.hset(key, mapping=mapping)
                pipe.expire(key, self.session_ttl_s)
                await pipe.execute()

        await self._guarded("set_session", replace, None)

    async def set_goal(self, user_id: str, conversation_id: str, goal: str | None) -> bool:
        """Set (or with None clear) the goal of a cached session; False if there is none."""
        key = session_key(user_id, conversation_id)
        script = self._set_goal_script
        if script is None:
            return False
        args = ["1" if goal is not None else "0", goal or "", _now_iso(), self.session_ttl_s]
        result = await self._guarded(
            "set_goal", lambda r: script(keys=[key], args=args, client=r), 0
        )
        return result == 1
