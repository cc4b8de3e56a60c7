"""Cached query answers per user, made unreachable at once by bumping the user's generation."""

from __future__ import annotations

import re
from collections import OrderedDict

from redis.asyncio import Redis

from app.adapters.redis.breaker import GuardedRedis, sha256_hex

# Generations seen by get_query_result, kept for the matching set_query_result (see there).
_GENERATION_MEMO_SIZE = 4096
# A query key after "query_cache:<user>:" (what a purge may delete for exactly that user).
QUERY_KEY_TAIL = re.compile(rb"[0-9]+:[0-9a-f]{64}")


class QueryResultCache(GuardedRedis):
    """get/set_query_result and invalidate_user of `Cache`."""

    query_ttl_s: int
    _generation_memo: OrderedDict[tuple[str, str], int]
    _pending_invalidations: set[str]

    @staticmethod
    async def _generation(r: Redis, user_id: str) -> int:
        raw = await r.get(f"query_gen:{user_id}")
        return int(raw) if raw is not None else 0

    @staticmethod
    def _query_prefix(user_id: str) -> str:
        """The user's query keys start so; the generation and the digest follow."""
        return f"query_cache:{user_id}:"

    @classmethod
    def _query_key(cls, user_id: str, generation: int, digest: str) -> str:
        return f"{cls._query_prefix(user_id)}{generation}:{digest}"

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
        digest = sha256_hex(key)

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
        digest = sha256_hex(key)
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
