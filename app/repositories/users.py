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

from app.domain import SPACE_PREFIX

# A shared space's memories are memory_items of the owner `space:<id>` (app.domain): a space
# is not a user (user ids may not start with the prefix), so the directory leaves them out.
_IDS = f"""
WITH ids AS (
    SELECT user_id FROM conversations WHERE user_id LIKE :pattern ESCAPE '\\'
    UNION
    SELECT user_id FROM memory_items WHERE user_id LIKE :pattern ESCAPE '\\'
       AND user_id NOT LIKE '{SPACE_PREFIX}%'
)
"""
_PAGE = text(_IDS + "SELECT user_id FROM ids ORDER BY user_id LIMIT :limit OFFSET :offset")
_TOTAL = text(_IDS + "SELECT count(*) FROM ids")
# Counted per table and grouped by user, not with subqueries correlated to the list of ids:
# Citus cannot run a correlated subquery over a distributed table; each branch here is a plain
# aggregate it runs on the shards of the listed users and merges (docs/scaling.md).
_COUNTS = text(
    """
SELECT 'conversations' AS kind, user_id, count(*) AS n, 0 AS n2 FROM conversations
 WHERE user_id = ANY(CAST(:user_ids AS text[])) GROUP BY user_id
UNION ALL
SELECT 'messages', user_id, count(*), 0 FROM messages
 WHERE user_id = ANY(CAST(:user_ids AS text[])) GROUP BY user_id
UNION ALL
SELECT 'memories', user_id, count(*) FILTER (WHERE deleted_at IS NULL AND valid_to IS NULL),
       count(*) FILTER (WHERE deleted_at IS NOT NULL) FROM memory_items
 WHERE user_id = ANY(CAST(:user_ids AS text[])) GROUP BY user_id
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
        counts: dict[tuple[str, str], tuple[int, int]] = {
            (r.kind, r.user_id): (int(r.n), int(r.n2)) for r in rows
        }

        def n(kind: str, user_id: str, which: int = 0) -> int:
            return counts.get((kind, user_id), (0, 0))[which]

        return [
            UserCounts(
                u,
                n("conversations", u),
                n("messages", u),
                n("memories", u),
                n("memories", u, 1),
            )
            for u in user_ids
        ]
