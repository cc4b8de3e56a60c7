"""The guard around every Redis call: what "Redis is down" looks like, a small circuit breaker
that keeps a dead Redis from adding a timeout to each request, one warning per interval, and
the counters the health check reports."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import redis.exceptions
from redis.asyncio import Redis

# Named for the module that held it all before the split, so log filters keep matching.
logger = logging.getLogger("app.adapters.cache")

T = TypeVar("T")

# A connect may wait for this process's own event loop as much as for Redis: under CPU load a
# burst of connects at 0.25 s timed out against a healthy server, and the rate limit failed open.
# Connections are few and kept (MAX_CONNECTIONS), so a connect is rare; a blackholed Redis costs
# one request this long per breaker interval.
# 1 s still timed out once in a burst of eight cold connects beside two CPU-bound threads.
CONNECT_TIMEOUT_S = 2.0
OP_TIMEOUT_S = 0.5
# One process needs few: each call holds a connection for one round trip. At most this many
# calls run at once (GuardedRedis's slots, which also cap the pool); a burst waits for a slot
# (up to POOL_WAIT_S, then counts as "down") instead of opening a connection per request.
MAX_CONNECTIONS = 8
# A burst of 50 calls under two CPU-bound threads queued past 1 s for a slot: the wait is this
# process's own saturation, not Redis, yet it opened the breaker and the rate limit failed open
# for the rest of the burst (tests/adapters/test_cache.py). 2 s holds the burst; a blackholed
# Redis still ends each call within OP_TIMEOUT_S of getting its slot.
POOL_WAIT_S = 2.0
# What "Redis is down" looks like; anything else (e.g. ResponseError) is a bug and propagates.
REDIS_DOWN: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    OSError,
)


class CacheUnavailableError(Exception):
    """Redis could not be reached for an operation that must not silently do nothing."""


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


def sha256_hex(value: str) -> str:
    # surrogatepass: text decoded from JSON may hold lone surrogates; hashing must not fail.
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class GuardedRedis:
    """A Redis client (or None: disabled) whose calls degrade to a default when it is down."""

    def __init__(
        self, client: Redis | None, *, warn_interval_s: float, retry_after_s: float
    ) -> None:
        self._redis = client
        # A semaphore rather than redis-py's BlockingConnectionPool: an uncontended acquire does
        # not suspend, where the pool takes a condition and starts a timer on every call.
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self.enabled = client is not None
        self.available = False  # nothing has succeeded yet
        self.stats = CacheStats()
        self.warn_interval_s = warn_interval_s
        self.retry_after_s = retry_after_s
        self._open_until = 0.0  # monotonic time before which Redis is skipped
        self._last_warning_at: float | None = None
        self._suppressed_failures = 0
        self._warned_since_recovery = False

    async def ping(self) -> bool:
        """Probe Redis now, ignoring the circuit breaker; True when it answered."""
        return await self._guarded("ping", lambda r: r.ping(), False, probe=True)

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
            result = await self._in_slot(call, client)
        except REDIS_DOWN as exc:
            self._record_failure(op, exc)
            return default
        self._record_success()
        return result

    async def _in_slot(self, call: Callable[[Redis], Awaitable[T]], client: Redis) -> T:
        """Run `call` in one of MAX_CONNECTIONS slots; waiting longer than POOL_WAIT_S for one
        raises TimeoutError (an OSError: "down")."""
        slots = self._slots
        if slots.locked():
            async with asyncio.timeout(POOL_WAIT_S):
                await slots.acquire()
        else:
            await slots.acquire()  # a free slot: returns without suspending
        try:
            return await call(client)
        finally:
            slots.release()

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
