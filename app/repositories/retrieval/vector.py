"""The vector arm: cosine over pgvector, exact (a few thousand items) or ANN (the user's own
ivfflat/HNSW index), and the planner settings of the ANN path's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from app.db import SET_LOCAL, set_local_params
from app.repositories.retrieval.common import (
    NO_TIME_FILTER,
    SOURCES,
    SessionBound,
    TagFilter,
    TimeFilter,
    _scope_params,
    memory_valid,
    memory_visible,
)
from app.repositories.retrieval.passages import passage_messages_sql
from app.repositories.search_index import Source
from app.vectors import QUERY_VECTOR, query_vector

# The planner's random page cost on the ANN path (see RetrievalRepository.set_vector_search).
ANN_RANDOM_PAGE_COST = 1.1


def ann_settings(
    *,
    probes: int,
    max_probes: int,
    ef_search: int = 40,
    max_scan_tuples: int = 20_000,
    random_page_cost: float = ANN_RANDOM_PAGE_COST,
) -> dict[str, str]:
    """The planner settings of the ANN path's transaction (RetrievalRepository.set_vector_search;
    the benchmarks' floor sets the same on its connection)."""
    return {
        # A cached generic plan (asyncpg prepares statements) sizes user_id by the average
        # user and scans a big user's rows exactly through the user_id index: 50 ms vs 9.
        "plan_cache_mode": "force_custom_plan",
        "ivfflat.probes": str(int(probes)),
        "ivfflat.iterative_scan": "relaxed_order",
        "ivfflat.max_probes": str(int(max_probes)),
        "hnsw.ef_search": str(int(ef_search)),
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.max_scan_tuples": str(int(max_scan_tuples)),
        "random_page_cost": str(float(random_page_cost)),
    }


def vector_search_settings(
    *,
    exact: bool,
    probes: int,
    max_probes: int,
    ef_search: int = 40,
    max_scan_tuples: int = 20_000,
    random_page_cost: float = ANN_RANDOM_PAGE_COST,
    rescore_passages: bool = False,
    indexed: bool = False,
) -> dict[str, str]:
    """The planner settings of a transaction's vector statement. The scan settings of both
    index methods are set, so the statement is the same on an ivfflat or an HNSW index
    (whichever `pgrecall reindex` built); iterative scans on either.

    random_page_cost: pgvector prices every ivfflat list it probes as pages read from disk
    at random_page_cost (4 by default), so from about 45 probes of a 50k-item user's own 100
    lists the planner chose that user's exact scan (user_id index + sort), 3.5x slower
    (`python -m bench.plans`). The index is in memory or on SSD, as a query path's
    working set is: 1.1, the usual value for SSD storage, prices it so, for this
    transaction only (docs/performance.md, "Big users on real conversation turns").

    The exact path reads the user's vectors by an index-only scan of the covering indexes
    (migration 0017_halfvec_covering), priced at the same random_page_cost: at 4 the planner
    chose a bitmap heap scan of a 5,520-turn user's rows on a store whose visibility map lagged
    behind its inserts (docs/performance.md, "Half-precision vectors and index-only exact
    search").

    rescore_passages (exact path): a user holding a third of the messages table (5,520 of
    16,990 rows, estimated 1,812) got a scan of the whole table, 12.4 ms of Postgres CPU instead
    of 3.4 (docs/performance.md, "Half the CPU per query"), and the bitmap heap scan above on
    another store: neither is considered. The other statements of the transaction read through
    indexes anyway (the keyword arm's postings ranges, the fetch's primary keys).

    indexed (exact path): a branch of the statement reads the user's own index (`vector`'s
    `indexed`), so the ANN settings apply too: custom plans (the partial index's predicate is
    proven from the user id as a constant), the scan settings; and no sort where an index can
    give the order. Row-level security's policy, a condition the planner cannot estimate, cut
    a 5,520-turn user's estimated rows to 137, and at that size it priced the scan of all its
    vectors plus a sort under the HNSW index and took it (docs/performance.md). The statement's
    other sorts (the re-ranked branches, a branch without an own index) have no alternative
    and stay."""
    if exact:
        settings = {"random_page_cost": str(float(random_page_cost))}
        if indexed:
            settings = ann_settings(
                probes=probes,
                max_probes=max_probes,
                ef_search=ef_search,
                max_scan_tuples=max_scan_tuples,
                random_page_cost=random_page_cost,
            ) | {"enable_sort": "off"}
        if rescore_passages:
            settings |= {"enable_seqscan": "off", "enable_bitmapscan": "off"}
        return settings
    return ann_settings(
        probes=probes,
        max_probes=max_probes,
        ef_search=ef_search,
        max_scan_tuples=max_scan_tuples,
        random_page_cost=random_page_cost,
    )


def memory_vectors_sql(
    types: Sequence[str] | None, tags: TagFilter | None, when: TimeFilter
) -> str:
    """The vectors of the user's visible, valid memories of the service's model (`:model`)."""
    visible = memory_visible(types, tags).replace("m.", "t.")
    return (
        "SELECT t.id, t.embedding FROM memory_items AS t "
        f"WHERE {visible} AND t.embedding_model = :model{when.sql('t')}"
        f"{memory_valid('t', when)}"
    )


def nearest_sql(source: Source, base: str, order: str) -> str:
    """One source's branch of the vector statement: the `:limit` rows of `base` first by
    `order`, with their cosine, best first."""
    return (
        f"(SELECT {int(source)} AS source, id, 1 - (embedding <=> {QUERY_VECTOR}) "
        f"AS cosine FROM ({base} ORDER BY {order} LIMIT :limit) AS c "
        "ORDER BY cosine DESC)"
    )


class VectorArm(SessionBound):
    async def set_vector_search(self, settings: Mapping[str, str]) -> None:
        """Make a transaction's vector_search_settings, in one statement (none when there are
        none). SET LOCAL (app/db.py): on Citus it reaches the worker that runs the statement."""
        if settings:
            await self._execute(SET_LOCAL.text, set_local_params(settings))

    async def vector(
        self,
        user_id: str,
        embedding: Any,
        *,
        limit: int,
        memories: bool,
        messages: bool,
        types: Sequence[str] | None,
        exact: bool,
        model: str,
        when: TimeFilter = NO_TIME_FILTER,
        passage_weight: float = 0.0,
        tags: TagFilter | None = None,
        rescore_passages: bool = False,
        indexed: Collection[Source] = (),
    ) -> dict[tuple[Source, uuid.UUID], float]:
        """Top items by cosine similarity, per source.

        exact=True orders by an expression the ivfflat index cannot serve, so Postgres scores
        every vector of the user, read by an index-only scan of the covering indexes (migration
        0017; vector_search_settings): exact, and fast for stores of a few thousand items.
        exact=False uses the index with iterative scans (filtered ANN without short result
        sets); the outer ORDER BY repairs relaxed ordering.

        passage_weight > 0 scores a message by (1 - w) x its own cosine + w x its best
        passage's (its own where it has none). Exact: over all the user's messages and
        passages. ANN: the index finds messages by their own vectors and their passages
        re-score them (a passage alone cannot bring a message in; docs/retrieval.md).
        rescore_passages (exact only): the messages found exactly by their own vectors, their
        passages re-score them as on the ANN path (a user of few turns and many passages).
        indexed (exact only): the sources whose table holds an index of the user's own
        (`pgrecall reindex`'s HNSW for users under the threshold): their branch reads it, as
        on the ANN path, instead of scoring every vector of the user.
        """

        def order(source: Source) -> str:
            if exact and source not in indexed:
                return f"(t.embedding <=> {QUERY_VECTOR}) + 0"
            return f"t.embedding <=> {QUERY_VECTOR}"

        exact_messages = exact and Source.MESSAGE not in indexed
        results: dict[tuple[Source, uuid.UUID], float] = {}
        params: dict[str, Any] = {
            "user_id": user_id,
            "q": query_vector(embedding),
            "limit": limit,
            **when.params(),
            **_scope_params(types, tags),
        }
        params["model"] = model
        statements: list[tuple[Source, str]] = []
        # Vectors of another model (mid re-embed) live in another space: never compare them.
        if memories:
            statements.append((Source.MEMORY, memory_vectors_sql(types, tags, when)))
        messages_sql: str | None = None
        if messages and passage_weight > 0:
            params["w"] = float(passage_weight)
            messages_sql = passage_messages_sql(
                exact_messages, when.sql("t"), rescore=rescore_passages and exact_messages
            )
        elif messages:
            statements.append(
                (
                    Source.MESSAGE,
                    "SELECT t.id, t.embedding FROM messages AS t "
                    "WHERE t.user_id = :user_id AND t.embedding IS NOT NULL "
                    f"AND t.embedding_model = :model{when.sql('t')}",
                )
            )
        if not statements and messages_sql is None:
            return results
        # Both sources in one round trip. Each branch keeps its own ORDER BY ... LIMIT (and index
        # scan) and its own sort by cosine, so rows of equal cosine (duplicate turns) come in the
        # same order as from one statement per source; Append returns the branches in turn.
        branches = [nearest_sql(source, base, order(source)) for source, base in statements]
        if messages_sql is not None:
            branches.append(messages_sql)
        rows = await self._rows(" UNION ALL ".join(branches), params)
        for row in sorted(rows, key=lambda r: r["source"]):  # stable: keeps each branch's order
            results[(SOURCES[row["source"]], row["id"])] = float(row["cosine"])
        return results
