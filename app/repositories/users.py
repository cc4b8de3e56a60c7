"""The user directory of the admin console: which users exist, and how much each one holds.

Users are not a table: a user exists while they own a conversation or a memory item. The listing
spans users by design (it runs in the audited admin mode); every statement still names
`user_id` in its predicate, and the counts are per user id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

_IDS = """
WITH ids AS (
    SELECT user_id FROM conversations WHERE user_id LIKE :pattern ESCAPE '\\'
    UNION
    SELECT user_id FROM memory_items WHERE user_id LIKE :pattern ESCAPE '\\'
)
"""
_PAGE = text(_IDS + "SELECT user_id FROM ids ORDER BY user_id LIMIT :limit OFFSET :offset")
_TOTAL = text(_IDS + "SELECT count(*) FROM ids")
_COUNTS = text(
    """
SELECT u.user_id,
       (SELECT count(*) FROM conversations AS c WHERE c.user_id = u.user_id) AS conversations,
       (SELECT count(*) FROM messages AS m WHERE m.user_id = u.user_id) AS messages,
       (SELECT count(*) FROM memory_items AS i
         WHERE i.user_id = u.user_id AND i.deleted_at IS NULL AND i.valid_to IS NULL) AS memories,
       (SELECT count(*) FROM memory_items AS i
         WHERE i.user_id = u.user_id AND i.deleted_at IS NOT NULL) AS deleted_memories
FROM unnest(CAST(:user_ids AS text[])) WITH ORDINALITY AS u(user_id, n)
ORDER BY u.n
"""
)


@dataclass(frozen=True)
class UserCounts:
    user_id: str
    conversations: int
    messages: int
    memories: int  # current (not deleted, not superseded)
    deleted_memories: int


def like_pattern(fragment: str) -> str:
    """A LIKE pattern matching ids that contain `fragment` literally."""
    escaped = fragment.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class UserDirectoryRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def page(self, contains: str, *, limit: int, offset: int) -> tuple[list[str], int]:
        """User ids containing `contains` (all when empty), in id order, and how many match."""
        params = {"pattern": like_pattern(contains)}
        ids = await self.session.execute(_PAGE, {**params, "limit": limit, "offset": offset})
        total = await self.session.execute(_TOTAL, params)
        return [row[0] for row in ids], int(total.scalar_one())

    async def counts(self, user_ids: Sequence[str]) -> list[UserCounts]:
        """Conversations, messages, memories (live and deleted) of each user, in the given order."""
        if not user_ids:
            return []
        rows = await self.session.execute(_COUNTS, {"user_ids": list(user_ids)})
        return [
            UserCounts(r.user_id, r.conversations, r.messages, r.memories, r.deleted_memories)
            for r in rows
        ]
