"""A query's first Redis round trip: its rate limit, its cached answer and its cached query
vector in one script, where three calls took four round trips (docs/redis.md)."""

from __future__ import annotations

from dataclasses import dataclass

from redis.commands.core import AsyncScript

from app.adapters.redis.breaker import sha256_hex
from app.adapters.redis.embeddings import EmbeddingCache, Vector, _decode_vector
from app.adapters.redis.query_results import QueryResultCache
from app.adapters.redis.rate_limit import COUNT_HIT_LUA, RateDecision, RateLimiter

# KEYS: the rate counter, the user's query generation, the query vector's key. ARGV: the window
# (s), "1" when the request counts against the limit, the user's query-key prefix, the digest.
# The counter is RATE_LIMIT_LUA's; the answer is read under the generation read here, as
# get_query_result reads it. Returns {count, pttl, generation, answer or nil, vector or nil}.
ADMIT_QUERY_LUA = (
    "local count, pttl = 0, 0\n"
    "if ARGV[2] == '1' then\n" + COUNT_HIT_LUA + "end\n"
    "local generation = redis.call('GET', KEYS[2]) or '0'\n"
    "local answer = redis.call('GET', ARGV[3] .. generation .. ':' .. ARGV[4])\n"
    "return {count, pttl, generation, answer, redis.call('GET', KEYS[3])}\n"
)


@dataclass(frozen=True)
class Admission:
    """What a query's first round trip found."""

    decision: RateDecision
    answer: bytes | None  # the cached answer of this query, in the user's current generation
    vector: Vector | None  # the cached vector of the query text
    looked_up: bool  # the vector was looked up (a None vector is a miss, not unknown)


class QueryAdmission(EmbeddingCache, RateLimiter, QueryResultCache):
    """admit_query of `Cache`: hit_rate_limit, get_query_result and get_embeddings of one
    query text in one round trip, with the same outcomes and the same failing open."""

    _admit_script: AsyncScript | None

    async def admit_query(
        self,
        user_id: str,
        limit: int,
        key: str,
        model: str,
        text: str,
        window_s: int = 60,
    ) -> Admission:
        """Count the query in the user's window (`limit` <= 0: not counted), and read its cached
        answer (`key`: get_query_result's) and the cached vector of `text` under `model`."""
        allowed = RateDecision(allowed=True, count=0, limit=limit, reset_s=0)
        script = self._admit_script
        if self._redis is None or script is None:
            return Admission(allowed, None, None, looked_up=False)
        if not await self._flush_pending_invalidation(user_id):
            # The user's answers are off limits until the invalidation lands (get_query_result).
            decision = await self.hit_rate_limit(user_id, limit, window_s)
            return Admission(decision, None, None, looked_up=False)
        digest = sha256_hex(key)
        counting = limit > 0
        keys = [f"rate_limit:{user_id}", f"query_gen:{user_id}", self.embedding_key(model, text)]
        args = [window_s, "1" if counting else "0", self._query_prefix(user_id), digest]
        reply = await self._guarded(
            "admit_query", lambda r: script(keys=keys, args=args, client=r), None
        )
        if reply is None:  # Redis off or down: allowed, nothing cached
            self.stats.query_misses += 1
            return Admission(allowed, None, None, looked_up=False)
        count, pttl, generation, answer, raw_vector = reply
        self._remember_generation(user_id, digest, int(generation))
        if answer is None:
            self.stats.query_misses += 1
        else:
            self.stats.query_hits += 1
        vector = _decode_vector(raw_vector)
        if vector is None:
            self.stats.embedding_misses += 1
        else:
            self.stats.embedding_hits += 1
        decision = RateDecision.counted(int(count), int(pttl), limit) if counting else allowed
        return Admission(decision, answer, vector, looked_up=True)
