"""Per-user statistics the query path reads before it searches."""

from __future__ import annotations

from sqlalchemy import text

from app.repositories.retrieval.common import SessionBound


class Stats(SessionBound):
    async def item_count(self, user_id: str) -> int:
        """Indexed items of this user (memories + messages): picks exact vs ANN search."""
        value = await self.session.scalar(
            text("SELECT doc_count FROM search_stats WHERE user_id = :user_id"),
            {"user_id": user_id},
        )
        return int(value or 0)
