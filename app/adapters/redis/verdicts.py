"""Cached judge verdicts: one key per user and (judge model, question, item text) digest, so the
same pair is never sent to the model twice while the key lives. The item's text, not its id, is
hashed: an edited memory is judged again."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from redis.asyncio import Redis

from app.adapters.redis.breaker import GuardedRedis, sha256_hex

# A verdict key after "judge:<user>:" (what a purge may delete for exactly that user).
VERDICT_KEY_TAIL = re.compile(rb"[0-9a-f]{64}")


class VerdictCache(GuardedRedis):
    """get/set_verdicts of `Cache`."""

    @staticmethod
    def verdict_digest(model: str, question: str, text: str) -> str:
        """The digest of one (question, item) pair as `model` judges it; the question is
        compared as the result cache compares it (case and spacing aside)."""
        normalised = " ".join(question.lower().split())
        return sha256_hex("\x00".join((model, normalised, text)))

    @staticmethod
    def verdict_key(user_id: str, digest: str) -> str:
        return f"judge:{user_id}:{digest}"

    async def get_verdicts(self, user_id: str, digests: Sequence[str]) -> list[bool | None] | None:
        """The cached verdict of each digest (None per miss) with one MGET; None when Redis is
        configured but down (or its breaker open). Without Redis every pair is a miss."""
        if self._redis is None or not digests:
            return [None] * len(digests)
        keys = [self.verdict_key(user_id, d) for d in digests]
        raw = await self._guarded("get_verdicts", lambda r: r.mget(keys), None)
        if raw is None:
            return None
        return [True if v == b"1" else False if v == b"0" else None for v in raw]

    async def set_verdicts(self, user_id: str, verdicts: Mapping[str, bool], ttl_s: int) -> None:
        """Store verdicts by digest for `ttl_s` seconds (0: not stored)."""
        if self._redis is None or not verdicts or ttl_s <= 0:
            return

        async def store(r: Redis) -> None:
            async with r.pipeline(transaction=False) as pipe:
                for digest, verdict in verdicts.items():
                    pipe.set(self.verdict_key(user_id, digest), b"1" if verdict else b"0", ex=ttl_s)
                await pipe.execute()

        await self._guarded("set_verdicts", store, None)
