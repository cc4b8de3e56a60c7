"""Per-user statistics the query path reads before it searches."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text

from app.repositories.retrieval.common import SessionBound


@dataclass(frozen=True)
class SearchSize:
    """What a user's exact vector statement would score."""

    items: int  # indexed items (memories + messages): sizes the ANN probes
    passages: int  # the user's message passages, counted up to the caller's cap


class Stats(SessionBound):
    async def item_count(self, user_id: str) -> int:
        """Indexed items of this user (memories + messages)."""
        value = await self.session.scalar(
            text("SELECT doc_count FROM search_stats WHERE user_id = :user_id"),
            {"user_id": user_id},
        )
        return int(value or 0)

    async def search_size(self, user_id: str, *, passages_up_to: int) -> SearchSize:
        """Items and passages of this user in one round trip; picks exact vs ANN search. The
        passages are counted up to `passages_up_to` (an index-only range of the user's
        passages, stopped there): past the exact threshold the exact number does not matter."""
        row = (
            await self.session.execute(
                text(
                    "SELECT (SELECT doc_count FROM search_stats WHERE user_id = :user_id) "
                    "AS items, (SELECT count(*) FROM (SELECT 1 FROM message_passages AS p "
                    "WHERE p.user_id = :user_id LIMIT :up_to) AS c) AS passages"
                ),
                {"user_id": user_id, "up_to": max(int(passages_up_to), 0)},
            )
        ).one()
        return SearchSize(int(row.items or 0), int(row.passages or 0))
