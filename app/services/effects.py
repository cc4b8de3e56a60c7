"""Side effects a service owns beyond its rows: the per-user write admission and dropping the
user's cached query results once the write commits.

Services call these inside their own methods, so every door (HTTP, MCP, console, proxy) gets
them by calling the service; none repeats them in its handler.
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import Cache
from app.db import after_commit
from app.errors import RateLimitedError


async def admit_write(cache: Cache, user_id: str, per_minute: int) -> None:
    """Count one agent write; RateLimitedError (429) over the limit. Fails open without Redis."""
    decision = await cache.hit_rate_limit(user_id, per_minute, bucket="write_limit")
    if not decision.allowed:
        raise RateLimitedError(
            f"write limit of {per_minute} per minute reached; retry in {decision.reset_s} s"
        )


def invalidate_after_commit(session: AsyncSession, cache: Cache | None, *user_ids: str) -> None:
    """These users' cached query results are stale once the write commits (no cache: no-op)."""
    if cache is None or not user_ids:
        return

    async def invalidate() -> None:
        for user_id in dict.fromkeys(user_ids):
            await cache.invalidate_user(user_id)

    after_commit(session, invalidate)
