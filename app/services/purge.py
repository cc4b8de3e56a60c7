"""GDPR purge: delete everything one user owns, in Postgres and in Redis.

Order matters. The rows go in one transaction; before it commits, the user's Redis keys and the
cached vectors of the user's texts are deleted, so a Redis outage aborts the purge with nothing
deleted (a purge must never report success while data remains). After the commit the user's
keys are deleted once more: a request running during the purge may have cached something
from the rows being deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache, CacheUnavailableError
from app.db import user_session
from app.repositories.purge import PurgeRepository

_KEY_CHUNK = 1000


class PurgeIncompleteError(Exception):
    """The rows are gone but Redis failed afterwards: run the purge again to clear the keys."""

    def __init__(self, report: PurgeReport) -> None:
        super().__init__(
            f"{report.summary()}; Redis failed after the commit: re-run purge-user for the keys"
        )
        self.report = report


@dataclass
class PurgeReport:
    user_id: str
    rows: dict[str, int] = field(default_factory=dict)
    redis_keys: int = 0
    cached_embeddings: int = 0

    def summary(self) -> str:
        """One line of counts."""
        rows = ", ".join(f"{table} {n}" for table, n in self.rows.items())
        return (
            f"purged user {self.user_id}: {rows}; redis keys {self.redis_keys}, "
            f"cached embeddings {self.cached_embeddings}"
        )


async def count_user_rows(
    sessionmaker: async_sessionmaker[AsyncSession], user_id: str
) -> dict[str, int]:
    """What a purge would delete, per table."""
    async with user_session(sessionmaker, user_id) as session:
        return await PurgeRepository(session).counts(user_id)


async def purge_user(
    sessionmaker: async_sessionmaker[AsyncSession], cache: Cache, user_id: str
) -> PurgeReport:
    """Delete the user's rows and cache keys; raises CacheUnavailableError with nothing deleted
    when Redis is configured but unreachable before the commit."""
    report = PurgeReport(user_id)
    # Scoped to the one user, not the admin mode: row-level security keeps the delete to them.
    async with user_session(sessionmaker, user_id) as session, session.begin():
        purged = await PurgeRepository(session).delete_user(user_id)
        report.rows = purged.counts
        report.redis_keys = await cache.delete_user(user_id)
        for model, texts in purged.texts.items():
            for start in range(0, len(texts), _KEY_CHUNK):
                report.cached_embeddings += await cache.delete_embeddings(
                    model, texts[start : start + _KEY_CHUNK]
                )
        if cache.enabled and not cache.available:
            # delete_embeddings degrades silently; for a purge that is not good enough.
            raise CacheUnavailableError("Redis unavailable: cached embeddings may remain")
    try:
        report.redis_keys += await cache.delete_user(user_id)
    except CacheUnavailableError as exc:
        raise PurgeIncompleteError(report) from exc
    return report
