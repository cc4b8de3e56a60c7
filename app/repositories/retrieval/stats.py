"""Per-user statistics the query path reads before it searches."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.repositories.maintenance import user_index_name
from app.repositories.retrieval.common import SessionBound
from app.repositories.search_index import Source


@dataclass(frozen=True)
class SearchSize:
    """What a user's exact vector statement would score."""

    items: int  # indexed items (memories + messages): sizes the ANN probes
    passages: int  # the user's message passages, counted up to the caller's cap (search_size)
    generic_plans: bool = False  # the transaction's later statements run on generic plans
    # The sources whose table holds an index of this user's own (`pgrecall reindex`): the
    # vector statement reads it instead of scoring each of the user's vectors.
    indexed: frozenset[Source] = field(default_factory=frozenset)


class Stats(SessionBound):
    async def item_count(self, user_id: str) -> int:
        """Indexed items of this user (memories + messages)."""
        rows = await self._rows(
            "SELECT doc_count FROM search_stats WHERE user_id = :user_id", {"user_id": user_id}
        )
        return int(rows[0]["doc_count"] or 0) if rows else 0

    async def search_size(self, user_id: str, *, up_to: int, generic_max: int = 0) -> SearchSize:
        """Items and passages of this user in one round trip; picks exact vs ANN search. The
        passages are counted until items + passages reach `up_to` (an index-only range of the
        user's passages, stopped there: past the exact threshold the number does not matter,
        and a user above it by items alone reads none). A user with at most a quarter of
        `up_to` in items reads none either: the count costs about 0.3 ms of Postgres CPU per
        1,000 passages, and such a user would need more than three passages per turn (LoCoMo
        turns have about two; docs/performance.md, "Half the CPU per query").

        The same statement picks the plans of the transaction's later statements: a user with
        at most `generic_max` items runs them on the connection's generic plans (planned once
        per connection; the plan of a small user's fetch and vector statements does not depend
        on the values), a bigger one on plans made for its values (`set_config(..., true)`
        lasts until the end of the transaction, as the scope's SET LOCAL). Never on a server
        with Citus loaded: its coordinator refused the generic plans of the read path's
        statements ("could not create distributed plan"; docs/scaling.md).

        And which of the user's tables have an index of the user's own (`to_regclass` of its
        name: a catalog lookup, no scan). A user whose messages have one reads no passages:
        the index finds the messages and their passages re-score them, whatever their number."""
        (row,) = await self._rows(
            "SELECT s.items, (SELECT count(*) FROM (SELECT 1 FROM message_passages AS p "
            "WHERE p.user_id = :user_id LIMIT CASE WHEN s.items * 4 > :up_to "
            "AND NOT s.messages_index "
            "THEN greatest(:up_to - s.items, 0) ELSE 0 END) AS c) AS passages, "
            "set_config('plan_cache_mode', CASE WHEN s.items <= :generic_max AND "
            "current_setting('citus.propagate_set_commands', true) IS NULL "
            "THEN 'force_generic_plan' ELSE 'force_custom_plan' END, true) AS plans, "
            "s.memories_index, s.messages_index "
            "FROM (SELECT coalesce((SELECT doc_count FROM search_stats "
            "WHERE user_id = :user_id), 0) AS items, "
            "to_regclass(:memories_index) IS NOT NULL AS memories_index, "
            "to_regclass(:messages_index) IS NOT NULL AS messages_index) AS s",
            {
                "user_id": user_id,
                "up_to": max(int(up_to), 0),
                "generic_max": int(generic_max) if generic_max > 0 else -1,
                "memories_index": user_index_name("memory_items", user_id),
                "messages_index": user_index_name("messages", user_id),
            },
        )
        indexed = frozenset(
            source
            for source, column in (
                (Source.MEMORY, "memories_index"),
                (Source.MESSAGE, "messages_index"),
            )
            if row[column]
        )
        return SearchSize(
            int(row["items"]), int(row["passages"]), row["plans"] == "force_generic_plan", indexed
        )
