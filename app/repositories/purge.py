"""The GDPR purge's SQL: hard deletes of every row one user owns, with their counts."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import (
    text,
)
from sqlalchemy.ext.asyncio import AsyncSession


@dataclass
class PurgedRows:
    counts: dict[str, int]
    texts: dict[str, list[str]] = field(default_factory=dict)  # embedding model -> texts


# Every table holding a user's rows, in delete order: rows that point at others go first.
# HOOK: a new user-data table (extraction jobs, ...) is one entry here - before
# "memory_items"/"messages" if it references them - and purge and its counts cover it.
PURGE_TABLES: tuple[str, ...] = (  # in the order the purge reports them
    "memory_items",  # every version: supersession links stay within the user's own rows
    "messages",
    "conversations",
    "search_postings",
    "search_stats",
    "extraction_jobs",
    "extraction_usage",
    "message_passages",
    # The user's grants on shared spaces (migration 0019): the space and its memories are the
    # space's, not the user's, and stay.
    "space_members",
)
# Rows that point at the user's messages are deleted first (they would cascade unseen).
_DELETED_FIRST = ("extraction_jobs", "extraction_usage", "message_passages")
_DELETE_ORDER = _DELETED_FIRST + tuple(t for t in PURGE_TABLES if t not in _DELETED_FIRST)
# Tables whose texts have cached vectors in Redis (their embeddings are purged too).
_EMBEDDED_TABLES = ("memory_items", "messages")


class PurgeRepository:
    """Hard deletes of everything one user owns."""

    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def counts(self, user_id: str) -> dict[str, int]:
        """Rows the user owns, per table."""
        selects = ", ".join(
            f"(SELECT count(*) FROM {t} WHERE user_id = :u) AS {t}" for t in PURGE_TABLES
        )
        row = (await self.session.execute(text(f"SELECT {selects}"), {"u": user_id})).one()
        return {k: int(v) for k, v in row._mapping.items()}

    async def delete_user(self, user_id: str) -> PurgedRows:
        """Delete every row of the user; return counts and the embedded texts (cache keys)."""
        purged = PurgedRows(counts={})
        for table in _DELETE_ORDER:
            if table in _EMBEDDED_TABLES:
                rows = await self.session.execute(
                    text(
                        f"DELETE FROM {table} WHERE user_id = :u RETURNING content, embedding_model"
                    ),
                    {"u": user_id},
                )
                n = 0
                for content, model in rows:
                    n += 1
                    if model is not None:
                        purged.texts.setdefault(model, []).append(content)
                purged.counts[table] = n
            else:
                result = await self.session.execute(
                    text(f"DELETE FROM {table} WHERE user_id = :u"), {"u": user_id}
                )
                purged.counts[table] = int(result.rowcount)  # type: ignore[attr-defined]
        purged.counts = {table: purged.counts[table] for table in PURGE_TABLES}
        return purged
