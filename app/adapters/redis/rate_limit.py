"""Fixed-window request counters per user (queries, and agent writes), failing open."""

from __future__ import annotations

import math
from dataclasses import dataclass

from redis.commands.core import AsyncScript

from app.adapters.redis.breaker import GuardedRedis

# Separate fixed-window counters per user: tool queries, and agent writes (save/forget/rate).
RATE_BUCKETS = ("rate_limit", "write_limit")

# INCR the counter KEYS[1], start the window (ARGV[1] seconds) on the first hit, and repair a
# counter that somehow lost its TTL (it would otherwise block the user forever); sets the
# locals count and pttl. Shared with admission.ADMIT_QUERY_LUA.
COUNT_HIT_LUA = """
count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  pttl = tonumber(ARGV[1]) * 1000
end
"""
# Returns {count, pttl}.
RATE_LIMIT_LUA = "local count, pttl\n" + COUNT_HIT_LUA + "return {count, pttl}\n"


@dataclass(frozen=True)
class RateDecision:
    """Outcome of one rate-limited request."""

    allowed: bool
    count: int  # hits in the current window including this one (0 when Redis is not used)
    limit: int
    reset_s: int  # seconds until the window ends (0 when unknown)

    @classmethod
    def counted(cls, count: int, pttl_ms: int, limit: int) -> RateDecision:
        """The decision for a hit that made the counter `count`, its window ending in `pttl_ms`."""
        return cls(
            allowed=count <= limit,
            count=count,
            limit=limit,
            reset_s=max(0, math.ceil(pttl_ms / 1000)),
        )


class RateLimiter(GuardedRedis):
    """hit_rate_limit of `Cache`."""

    _rate_limit_script: AsyncScript | None

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
        if bucket not in RATE_BUCKETS:
            raise ValueError(f"unknown rate-limit bucket {bucket!r}")
        key = f"{bucket}:{user_id}"
        reply = await self._guarded(
            "hit_rate_limit", lambda r: script(keys=[key], args=[window_s], client=r), None
        )
        if reply is None:
            return allowed
        return RateDecision.counted(int(reply[0]), int(reply[1]), limit)
