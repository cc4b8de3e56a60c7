"""Redis cache: embeddings, session state, rate limits and query results, all optional.

Redis is never required. Without a URL the cache is disabled and every method is a cheap
no-op; when Redis is down every method returns the "miss"/"allowed" default, a small circuit
breaker keeps a dead Redis from adding a timeout to each request, and one warning is logged
per interval. The only exception is `delete_user`: a purge must not report success while keys
may remain, so it raises `CacheUnavailableError`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import redis.exceptions
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

logger = logging.getLogger(__name__)

T = TypeVar("T")
Vector = npt.NDArray[np.float32]

CONNECT_TIMEOUT_S = 0.25
OP_TIMEOUT_S = 0.5
# What "Redis is down" looks like; anything else (e.g. ResponseError) is a bug and propagates.
_REDIS_DOWN: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
)
# Stored vectors are little-endian float32, whatever the host byte order.
_VECTOR_DTYPE = np.dtype("<f4")
_MESSAGE_FIELDS = ("id", "role", "content", "created_at")
# Concurrent appends to one conversation retry their WATCH/MULTI; each retry means another
# append won, so this bound is only reached under pathological contention.
_MAX_WATCH_ATTEMPTS = 100
_SCAN_BATCH = 500
# Separate fixed-window counters per user: tool queries, and agent writes (save/forget/rate).
_RATE_BUCKETS = ("rate_limit", "write_limit")
# Generations seen by get_query_result, kept for the matching set_query_result (see there).
_GENERATION_MEMO_SIZE = 4096
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")
_QUERY_KEY_TAIL = re.compile(rb"[0-9]+:[0-9a-f]{64}")

# INCR, start the window on the first hit, and repair a counter that somehow lost its TTL
# (it would otherwise block the user forever). Returns {count, pttl}.
_RATE_LIMIT_LUA = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  pttl = tonumber(ARGV[1]) * 1000
end
return {count, pttl}
"""

# Change the goal only of an existing session; ARGV: has_goal ('1'/'0'), goal, updated_at, ttl.
_SET_GOAL_LUA = """
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


class CacheUnavailableError(Exception):
    """Redis could not be reached for an operation that must not silently do nothing."""


@dataclass(frozen=True)
class RateDecision:
    """Outcome of one rate-limited request."""

    allowed: bool
    count: int  # hits in the current window including this one (0 when Redis is not used)
    limit: int
    reset_s: int  # seconds until the window ends (0 when unknown)


@dataclass(frozen=True)
class SessionState:
    """Cached short-term state of one conversation."""

    messages: list[dict[str, Any]]
    goal: str | None
    updated_at: str | None


@dataclass
class CacheStats:
    """Counters of an enabled cache; a lookup skipped because Redis is down counts as a miss."""

    embedding_hits: int = 0
    embedding_misses: int = 0
    query_hits: int = 0
    query_misses: int = 0
    errors: int = 0

    def embedding_hit_ratio(self) -> float:
        """Share of embedding lookups served from Redis; 0.0 when there were none."""
        total = self.embedding_hits + self.embedding_misses
        return self.embedding_hits / total if total else 0.0


def _sha256_hex(value: str) -> str:
    # surrogatepass: text decoded from JSON may hold lone surrogates; hashing must not fail.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


def _glob_escape(value: str) -> str:
    """Escape Redis MATCH special characters so a user id matches only itself."""
    return _GLOB_SPECIAL.sub(r"\\\1", value)


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


def _decode_vector(raw: bytes | None) -> Vector | None:
    if raw is None or len(raw) % _VECTOR_DTYPE.itemsize:
        return None  # a truncated value is a miss, not a wrong vector
    # astype copies: callers get a writable native array, not a view of the reply bytes.
    return np.frombuffer(raw, dtype=_VECTOR_DTYPE).astype(np.float32)


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def _session_key(user_id: str, conversation_id: str) -> str:
    conversation = str(conversation_id)
    # User ids may contain ':'; a ':'-free conversation id keeps the key unambiguous, which
    # lets delete_user tell "alice" + conv from "alice:x" + conv.
    if ":" in conversation:
        raise ValueError("conversation_id must not contain ':'")
    return f"session:{user_id}:{conversation}"


class Cache:
    """Async Redis cache; every method degrades to a default when Redis is off or down."""

    def __init__(
        self,
        client: Redis | None,
        *,
        warn_interval_s: float = 30.0,
        retry_after_s: float = 1.0,
        embedding_ttl_s: int = 7 * 86400,
        session_ttl_s: int = 86400,
        query_ttl_s: int = 60,
    ) -> None:
        self._redis = client
        self.enabled = client is not None
        self.available = False  # nothing has succeeded yet
        self.stats = CacheStats()
        self.warn_interval_s = warn_interval_s
        self.retry_after_s = retry_after_s
        self.embedding_ttl_s = embedding_ttl_s
        self.session_ttl_s = session_ttl_s
        self.query_ttl_s = query_ttl_s
        self._open_until = 0.0  # monotonic time before which Redis is skipped
        self._last_warning_at: float | None = None
        self._suppressed_failures = 0
        self._warned_since_recovery = False
        self._generation_memo: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._pending_invalidations: set[str] = set()
        self._rate_limit_script = client.register_script(_RATE_LIMIT_LUA) if client else None
        self._set_goal_script = client.register_script(_SET_GOAL_LUA) if client else None

    @classmethod
    def from_url(
        cls,
        url: str | None,
        *,
        warn_interval_s: float = 30.0,
        retry_after_s: float = 1.0,
        embedding_ttl_s: int = 7 * 86400,
        session_ttl_s: int = 86400,
        query_ttl_s: int = 60,
    ) -> Cache:
        """Build a cache for a redis://, rediss:// or unix:// URL; None or "" disables it."""
        client = None
        if url:
            # No client-side retries: the circuit breaker decides when to try again, and a
            # retry would double the time a dead Redis costs a request.
            client = Redis.from_url(
                url,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=OP_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0),
            )
        return cls(
            client,
            warn_interval_s=warn_interval_s,
            retry_after_s=retry_after_s,
            embedding_ttl_s=embedding_ttl_s,
            session_ttl_s=session_ttl_s,
            query_ttl_s=query_ttl_s,
        )

    # -- availability ------------------------------------------------------------------------

    async def ping(self) -> bool:
        """Probe Redis now, ignoring the circuit breaker; True when it answered."""
        return await self._guarded("ping", lambda r: r.ping(), False, probe=True)

    async def aclose(self) -> None:
        """Close the connection pool; the cache behaves as disabled afterwards."""
        client, self._redis = self._redis, None
        self._rate_limit_script = self._set_goal_script = None
        self.available = False
        if client is not None:
            await client.aclose()

    def _circuit_open(self) -> bool:
        return time.monotonic() < self._open_until

    async def _guarded(
        self,
        op: str,
        call: Callable[[Redis], Awaitable[T]],
        default: T,
        *,
        probe: bool = False,
    ) -> T:
        """Run one Redis operation; on a connection failure record it and return `default`."""
        client = self._redis
        if client is None or (not probe and self._circuit_open()):
            return default
        try:
            result = await call(client)
        except _REDIS_DOWN as exc:
            self._record_failure(op, exc)
            return default
        self._record_success()
        return result

    def _record_failure(self, op: str, exc: BaseException) -> None:
        now = time.monotonic()
        self.stats.errors += 1
        self.available = False
        self._open_until = now + self.retry_after_s
        if self._last_warning_at is not None and now - self._last_warning_at < self.warn_interval_s:
            self._suppressed_failures += 1
            logger.debug("Redis still unavailable during %s: %r", op, exc)
            return
        logger.warning(
            "Redis unavailable during %s (%s: %s); serving without cache, retrying after %.1fs"
            " (%d failures since the previous warning were not logged)",
            op,
            type(exc).__name__,
            exc,
            self.retry_after_s,
            self._suppressed_failures,
        )
        self._last_warning_at = now
        self._suppressed_failures = 0
        self._warned_since_recovery = True

    def _record_success(self) -> None:
        if not self.available and self._warned_since_recovery:
            # At most one recovery line per warning, so a flapping Redis cannot flood the log.
            logger.info("Redis available again")
            self._warned_since_recovery = False
        self.available = True

    # -- embeddings --------------------------------------------------------------------------

    @staticmethod
    def embedding_key(model: str, text: str) -> str:
        """Key of the cached vector of `text` embedded by `model`."""
        return f"embedding_cache:{_sha256_hex(model + ':' + text)}"

    async def get_embeddings(self, model: str, texts: Sequence[str]) -> list[Vector | None]:
        """Cached vectors for `texts` (None per miss) with one MGET."""
        misses: list[Vector | None] = [None] * len(texts)
        if self._redis is None or not texts:
            return misses
        keys = [self.embedding_key(model, text) for text in texts]
        raw = await self._guarded("get_embeddings", lambda r: r.mget(keys), None)
        vectors = misses if raw is None else [_decode_vector(value) for value in raw]
        hits = sum(vector is not None for vector in vectors)
        self.stats.embedding_hits += hits
        self.stats.embedding_misses += len(texts) - hits
        return vectors

    async def set_embeddings(self, model: str, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Store one vector per text (rows of `vectors`) with the embedding TTL."""
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"expected {len(texts)} vector rows, got shape {vectors.shape}")
        if self._redis is None or not texts:
            return
        rows = np.ascontiguousarray(vectors, dtype=_VECTOR_DTYPE)

        async def store(r: Redis) -> None:
            async with r.pipeline(transaction=False) as pipe:
                for text, row in zip(texts, rows, strict=True):
                    pipe.set(
                        self.embedding_key(model, text), row.tobytes(), ex=self.embedding_ttl_s
                    )
                await pipe.execute()

        await self._guarded("set_embeddings", store, None)

    async def delete_embeddings(self, model: str, texts: Sequence[str]) -> int:
        """Drop cached vectors; returns how many existed (0 when Redis is not used)."""
        if self._redis is None or not texts:
            return 0
        keys = [self.embedding_key(model, text) for text in texts]
        return await self._guarded("delete_embeddings", lambda r: r.delete(*keys), 0)

    # -- session state -----------------------------------------------------------------------

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
        key = _session_key(user_id, conversation_id)
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
        key = _session_key(user_id, conversation_id)
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
        key = _session_key(user_id, conversation_id)
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
        key = _session_key(user_id, conversation_id)
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
        key = _session_key(user_id, conversation_id)
        script = self._set_goal_script
        if script is None:
            return False
        args = ["1" if goal is not None else "0", goal or "", _now_iso(), self.session_ttl_s]
        result = await self._guarded(
            "set_goal", lambda r: script(keys=[key], args=args, client=r), 0
        )
        return result == 1

    # -- rate limiting -----------------------------------------------------------------------

    async def hit_rate_limit(
        self, user_id: str, limit: int, window_s: int = 60, *, bucket: str = "rate_limit"
    ) -> RateDecision:
        """Count one request in the user's fixed window; fails open when Redis is not used.

        `bucket` names the counter: "rate_limit" (queries) or "write_limit" (agent writes).
        """
        if window_s < 1:
            raise ValueError("window_s must be at least 1")
        allowed = RateDecision(allowed=True, count=0, limit=limit, reset_s=0)
        script = self._rate_limit_script
        if limit <= 0 or script is None:
            return allowed
        if bucket not in _RATE_BUCKETS:
            raise ValueError(f"unknown rate-limit bucket {bucket!r}")
        key = f"{bucket}:{user_id}"
        reply = await self._guarded(
            "hit_rate_limit", lambda r: script(keys=[key], args=[window_s], client=r), None
        )
        if reply is None:
            return allowed
        count, pttl = int(reply[0]), int(reply[1])
        return RateDecision(
            allowed=count <= limit,
            count=count,
            limit=limit,
            reset_s=max(0, math.ceil(pttl / 1000)),
        )

    # -- query result cache ------------------------------------------------------------------

    @staticmethod
    async def _generation(r: Redis, user_id: str) -> int:
        raw = await r.get(f"query_gen:{user_id}")
        return int(raw) if raw is not None else 0

    @staticmethod
    def _query_key(user_id: str, generation: int, digest: str) -> str:
        return f"query_cache:{user_id}:{generation}:{digest}"

    def _remember_generation(self, user_id: str, digest: str, generation: int) -> None:
        memo = self._generation_memo
        memo[(user_id, digest)] = generation
        memo.move_to_end((user_id, digest))
        while len(memo) > _GENERATION_MEMO_SIZE:
            memo.popitem(last=False)

    async def _flush_pending_invalidation(self, user_id: str) -> bool:
        """Retry an invalidation that failed while Redis was down; True when none is pending."""
        if user_id not in self._pending_invalidations:
            return True
        if not await self._incr_generation(user_id):
            return False
        self._pending_invalidations.discard(user_id)
        return True

    async def get_query_result(self, user_id: str, key: str) -> bytes | None:
        """The cached payload for `key` in the user's current generation, or None."""
        if self._redis is None:
            return None
        digest = _sha256_hex(key)

        async def lookup(r: Redis) -> bytes | None:
            generation = await self._generation(r, user_id)
            self._remember_generation(user_id, digest, generation)
            return await r.get(self._query_key(user_id, generation, digest))

        payload = None
        if await self._flush_pending_invalidation(user_id):
            payload = await self._guarded("get_query_result", lookup, None)
        if payload is None:
            self.stats.query_misses += 1
        else:
            self.stats.query_hits += 1
        return payload

    async def set_query_result(self, user_id: str, key: str, payload: bytes) -> None:
        """Cache a payload with the query TTL.

        It is stored under the generation the preceding get_query_result of this key saw, so an
        answer computed before an invalidate_user never becomes visible after it.
        """
        if self._redis is None or user_id in self._pending_invalidations:
            return
        digest = _sha256_hex(key)
        seen = self._generation_memo.get((user_id, digest))

        async def store(r: Redis) -> None:
            generation = seen if seen is not None else await self._generation(r, user_id)
            await r.set(self._query_key(user_id, generation, digest), payload, ex=self.query_ttl_s)

        await self._guarded("set_query_result", store, None)

    async def _incr_generation(self, user_id: str) -> bool:
        async def incr(r: Redis) -> bool:
            await r.incr(f"query_gen:{user_id}")
            return True

        return await self._guarded("invalidate_user", incr, False)

    async def invalidate_user(self, user_id: str) -> None:
        """Make every cached query result of the user unreachable (they expire by TTL)."""
        if self._redis is None:
            return
        if not await self._incr_generation(user_id):
            # Remember it: until the INCR lands, this process neither reads nor writes the
            # user's query cache, so entries surviving a short outage are never served stale.
            self._pending_invalidations.add(user_id)

    # -- GDPR purge --------------------------------------------------------------------------

    async def delete_user(self, user_id: str) -> int:
        """Delete every cache key of the user (SCAN, never KEYS); returns how many.

        Raises CacheUnavailableError when Redis cannot be reached, even with the circuit
        breaker open: a purge must not claim success while keys may remain.
        """
        if self._redis is None:
            return 0
        try:
            deleted = await self._purge(self._redis, user_id)
        except _REDIS_DOWN as exc:
            self._record_failure("delete_user", exc)
            raise CacheUnavailableError(
                "Redis unavailable: cache keys of the user may remain"
            ) from exc
        self._record_success()
        self._pending_invalidations.discard(user_id)  # its generation key is gone anyway
        return deleted

    async def _purge(self, r: Redis, user_id: str) -> int:
        escaped = _glob_escape(user_id)
        session_prefix = f"session:{user_id}:".encode()
        query_prefix = f"query_cache:{user_id}:".encode()

        def own_session(key: bytes) -> bool:
            # Skip "session:alice:x:<conv>" (user "alice:x") when purging "alice".
            return b":" not in key[len(session_prefix) :]

        def own_query(key: bytes) -> bool:
            return _QUERY_KEY_TAIL.fullmatch(key[len(query_prefix) :]) is not None

        deleted = await self._delete_matching(r, f"session:{escaped}:*", own_session)
        deleted += await self._delete_matching(r, f"query_cache:{escaped}:*", own_query)
        deleted += await r.delete(
            *(f"{bucket}:{user_id}" for bucket in _RATE_BUCKETS), f"query_gen:{user_id}"
        )
        return deleted

    @staticmethod
    async def _delete_matching(r: Redis, pattern: str, belongs: Callable[[bytes], bool]) -> int:
        deleted = 0
        batch: list[bytes] = []
        async for key in r.scan_iter(match=pattern, count=_SCAN_BATCH):
            if belongs(key):
                batch.append(key)
            if len(batch) >= _SCAN_BATCH:
                deleted += await r.delete(*batch)
                batch = []
        if batch:
            deleted += await r.delete(*batch)
        return deleted
