"""Redis cache: embeddings, session state, rate limits, query results and the LLM judge's
verdicts, all optional.

Redis is never required. Without a URL the cache is disabled and every method is a cheap
no-op; when Redis is down every method returns the "miss"/"allowed" default, a small circuit
breaker keeps a dead Redis from adding a timeout to each request, and one warning is logged
per interval. The only exception is `delete_user`: a purge must not report success while keys
may remain, so it raises `CacheUnavailableError`.

Each concern is a module of app/adapters/redis/ (breaker, embeddings, sessions, rate_limit,
query_results, verdicts, and admission: a query's first round trip over three of them); `Cache`
composes them into the one object the services hold, and owns what spans them: construction,
closing and the GDPR purge of every key of a user.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable
from typing import TypedDict, Unpack

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app.adapters.redis.admission import ADMIT_QUERY_LUA, Admission, QueryAdmission
from app.adapters.redis.breaker import (
    CONNECT_TIMEOUT_S,
    MAX_CONNECTIONS,
    OP_TIMEOUT_S,
    REDIS_DOWN,
    CacheStats,
    CacheUnavailableError,
)
from app.adapters.redis.query_results import QUERY_KEY_TAIL
from app.adapters.redis.rate_limit import RATE_BUCKETS, RATE_LIMIT_LUA, RateDecision
from app.adapters.redis.sessions import SET_GOAL_LUA, SessionCache, SessionState
from app.adapters.redis.verdicts import VERDICT_KEY_TAIL, VerdictCache

# The types callers name with the cache (the services import them from here).
__all__ = [
    "Admission",
    "Cache",
    "CacheStats",
    "CacheUnavailableError",
    "RateDecision",
    "SessionState",
]

_SCAN_BATCH = 500
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def _glob_escape(value: str) -> str:
    """Escape Redis MATCH special characters so a user id matches only itself."""
    return _GLOB_SPECIAL.sub(r"\\\1", value)


class CacheOptions(TypedDict, total=False):
    """Cache's keyword settings (its constructor has their defaults)."""

    warn_interval_s: float
    retry_after_s: float
    embedding_ttl_s: int
    session_ttl_s: int
    query_ttl_s: int


class Cache(SessionCache, QueryAdmission, VerdictCache):
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
        super().__init__(client, warn_interval_s=warn_interval_s, retry_after_s=retry_after_s)
        self.embedding_ttl_s = embedding_ttl_s
        self.session_ttl_s = session_ttl_s
        self.query_ttl_s = query_ttl_s
        self._generation_memo = OrderedDict()
        self._pending_invalidations = set()
        self._rate_limit_script = client.register_script(RATE_LIMIT_LUA) if client else None
        self._admit_script = client.register_script(ADMIT_QUERY_LUA) if client else None
        self._set_goal_script = client.register_script(SET_GOAL_LUA) if client else None

    @classmethod
    def from_url(cls, url: str | None, **options: Unpack[CacheOptions]) -> Cache:
        """Build a cache for a redis://, rediss:// or unix:// URL; None or "" disables it.
        `options` are the constructor's keyword settings."""
        client = None
        if url:
            # No client-side retries: the circuit breaker decides when to try again, and a
            # retry would double the time a dead Redis costs a request. A bounded pool: a burst
            # of requests shares a few warm connections instead of opening one each (the
            # calls wait for one of MAX_CONNECTIONS slots, breaker.GuardedRedis).
            client = Redis.from_url(
                url,
                max_connections=MAX_CONNECTIONS,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=OP_TIMEOUT_S,
                retry=Retry(NoBackoff(), 0),
            )
        return cls(client, **options)

    async def aclose(self) -> None:
        """Close the connection pool; the cache behaves as disabled afterwards."""
        client, self._redis = self._redis, None
        self._rate_limit_script = self._set_goal_script = None
        self.available = False
        if client is not None:
            await client.aclose()

    # -- GDPR purge --------------------------------------------------------------------------

    async def delete_user(self, user_id: str) -> int:
        """Delete every cache key of the user (SCAN, never KEYS); returns how many.

        Raises CacheUnavailableError when Redis cannot be reached, even with the circuit
        breaker open: a purge must not claim success while keys may remain.
        """
        if self._redis is None:
            return 0
        try:
            deleted = await self._in_slot(lambda r: self._purge(r, user_id), self._redis)
        except REDIS_DOWN as exc:
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
        verdict_prefix = f"judge:{user_id}:".encode()

        def own_session(key: bytes) -> bool:
            # Skip "session:alice:x:<conv>" (user "alice:x") when purging "alice".
            return b":" not in key[len(session_prefix) :]

        def own_query(key: bytes) -> bool:
            return QUERY_KEY_TAIL.fullmatch(key[len(query_prefix) :]) is not None

        def own_verdict(key: bytes) -> bool:
            return VERDICT_KEY_TAIL.fullmatch(key[len(verdict_prefix) :]) is not None

        deleted = await self._delete_matching(r, f"session:{escaped}:*", own_session)
        deleted += await self._delete_matching(r, f"query_cache:{escaped}:*", own_query)
        deleted += await self._delete_matching(r, f"judge:{escaped}:*", own_verdict)
        deleted += await r.delete(
            *(f"{bucket}:{user_id}" for bucket in RATE_BUCKETS), f"query_gen:{user_id}"
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
