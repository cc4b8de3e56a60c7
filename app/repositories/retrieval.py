"""Candidate queries for query_memory: BM25 over the postings, cosine over pgvector.

Every statement is scoped by `user_id`; memory items additionally by deleted/expired/type and
validity (valid now, or at as_of).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import SET_LOCAL, set_local_params, vector_literal
from app.repositories.search_index import Source
from app.retrieval.names import query_names
from app.retrieval.speakers import usable_speaker


@dataclass(frozen=True)
class KeywordHits:
    scores: dict[tuple[Source, uuid.UUID], float]
    max_score: float  # BM25 of an ideal document holding every query lexeme: sum(idf) * (k1+1)
    expansion: dict[tuple[Source, uuid.UUID], float] | None = None  # PRF round, if any
    # BM25 over the query's lexemes that are not names (app/retrieval/names.py), per item
    plain: dict[tuple[Source, uuid.UUID], float] | None = None


@dataclass(frozen=True)
class Candidate:
    source: Source
    id: uuid.UUID
    content: str
    type: str | None
    importance: float | None
    created_at: datetime
    reference: str | None
    conversation_id: uuid.UUID | None
    role: str | None
    speaker: str | None = None  # a message's metadata.speaker, when the writer named one


_BM25_SQL = """
WITH q AS (
    SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', :query)) AS u
), nq AS (
    -- the lexemes of the names in the question (app/retrieval/names.py)
    SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', :names)) AS u
), st AS (
    SELECT greatest(doc_count, 1)::float8 AS n,
           greatest(total_length::float8 / greatest(doc_count, 1), 1.0) AS avgdl
    FROM search_stats WHERE user_id = :user_id
), df AS (
    -- Counted per query lexeme over its (user_id, lexeme) index range, whatever the statistics:
    -- a join lets the planner read all of a just-imported user's postings (estimated 1 row,
    -- read 14,206: docs/performance.md, "Just-imported users").
    SELECT q.lexeme, c.df
    FROM q CROSS JOIN LATERAL (
        SELECT count(*)::float8 AS df FROM search_postings AS p
        WHERE p.user_id = :user_id AND p.lexeme = q.lexeme
    ) AS c
    WHERE c.df > 0
), idf AS (
    SELECT df.lexeme, ln(1.0 + (st.n - df.df + 0.5) / (df.df + 0.5)) AS idf FROM df, st
), query_idf AS (
    -- every query lexeme, also those no document has (df 0): the ideal score covers them all
    SELECT q.lexeme, ln(1.0 + (st.n - coalesce(df.df, 0) + 0.5) / (coalesce(df.df, 0) + 0.5)) AS idf
    FROM q CROSS JOIN st LEFT JOIN df ON df.lexeme = q.lexeme
){expansion}, scored AS (
    SELECT p.item_id, p.source,
           sum({terms}.idf * p.tf * (:k1 + 1.0)
               / (p.tf + :k1 * (1.0 - :b + :b * p.dl / st.avgdl))) AS score,
           -- the same sum over the lexemes that are not names: a name alone is no evidence
           coalesce(sum({terms}.idf * p.tf * (:k1 + 1.0)
               / (p.tf + :k1 * (1.0 - :b + :b * p.dl / st.avgdl)))
               FILTER (WHERE {terms}.lexeme NOT IN (SELECT lexeme FROM nq)), 0) AS plain
    -- One index range per query lexeme. LATERAL + OFFSET 0 because the planner cannot see that
    -- idf has a handful of rows and seq-scans a big user's postings (84 ms at 50k items).
    FROM {terms} CROSS JOIN st CROSS JOIN LATERAL (
        SELECT p.item_id, p.source, p.tf, p.dl FROM search_postings AS p
        WHERE p.user_id = :user_id AND p.lexeme = {terms}.lexeme OFFSET 0
    ) AS p
    GROUP BY p.item_id, p.source
)
SELECT s.item_id, s.source, s.score, s.plain,
       (SELECT coalesce(sum(idf), 0) * (:k1 + 1.0) FROM query_idf) AS max_score
-- Sorted before the visibility filter: LIMIT stops the EXISTS probes after the top rows.
FROM (SELECT * FROM scored ORDER BY score DESC OFFSET 0) AS s
WHERE {source_filter}
ORDER BY s.score DESC
LIMIT :limit
"""

# Pseudo-relevance feedback: the rarest lexemes of the seed items (the first round's best hits)
# that the query does not have, each in at least :min_df items (a lexeme only the seed has
# cannot find anything else), weighted by idf like any query term.
_EXPANSION_CTE = """
, seed_terms AS (
    SELECT DISTINCT p.lexeme FROM search_postings AS p
    WHERE p.user_id = :user_id AND p.item_id = ANY(CAST(:seeds AS uuid[]))
      AND p.lexeme NOT IN (SELECT lexeme FROM q)
), seed_df AS (
    SELECT t.lexeme, (SELECT count(*) FROM search_postings AS p
                      WHERE p.user_id = :user_id AND p.lexeme = t.lexeme)::float8 AS df
    FROM seed_terms AS t
), expansion AS (
    SELECT d.lexeme, ln(1.0 + (st.n - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM seed_df AS d, st WHERE d.df >= :min_df
    ORDER BY idf DESC, d.lexeme LIMIT :terms
)"""

_MEMORY_VISIBLE = """
    m.user_id = :user_id AND m.deleted_at IS NULL
    AND (m.expires_at IS NULL OR m.expires_at > now())
    {type_filter}{tag_filter}
"""


@dataclass(frozen=True)
class TagFilter:
    """Memories with any (`all_=False`) or every one of `tags` (the GIN index serves both)."""

    tags: Sequence[str]
    all_: bool = False

    def sql(self, alias: str) -> str:
        op = "@>" if self.all_ else "&&"
        return f" AND {alias}.tags {op} CAST(:tags AS text[])"


def _memory_visible(types: Sequence[str] | None, tags: TagFilter | None = None) -> str:
    return _MEMORY_VISIBLE.format(
        type_filter="AND m.type = ANY(CAST(:types AS text[]))" if types else "",
        tag_filter=tags.sql("m") if tags else "",
    )


def _scope_params(types: Sequence[str] | None, tags: TagFilter | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if types:
        params["types"] = list(types)
    if tags:
        params["tags"] = list(tags.tags)
    return params


def _memory_valid(alias: str, when: TimeFilter) -> str:
    """' AND ...': the memory is valid now, or (with as_of) was not yet superseded at as_of.

    Validity ends at valid_to, which is never in the future (app/services/supersession.py), so
    "valid now" is `valid_to IS NULL` (the partial index idx_memory_items_current). The start
    of the window is created_at (= valid_from), which TimeFilter.sql already bounds by as_of.
    """
    if when.as_of is None:
        return f" AND {alias}.valid_to IS NULL"
    return f" AND ({alias}.valid_to IS NULL OR {alias}.valid_to > :as_of)"


@dataclass(frozen=True)
class TimeFilter:
    """Hard limits on an item's event time (its created_at): time_from <= t <= time_to, and
    nothing created after as_of (what was known then)."""

    time_from: datetime | None = None
    time_to: datetime | None = None
    as_of: datetime | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.time_from, self.time_to, self.as_of))

    def sql(self, alias: str) -> str:
        """' AND ...' conditions on `alias`.created_at (empty when there are no limits)."""
        parts = []
        if self.time_from is not None:
            parts.append(f"{alias}.created_at >= :time_from")
        if self.time_to is not None:
            parts.append(f"{alias}.created_at <= :time_to")
        if self.as_of is not None:
            parts.append(f"{alias}.created_at <= :as_of")
        return "".join(f" AND {p}" for p in parts)

    def params(self) -> dict[str, datetime]:
        values = {"time_from": self.time_from, "time_to": self.time_to, "as_of": self.as_of}
        return {k: v for k, v in values.items() if v is not None}


NO_TIME_FILTER = TimeFilter()


def _source_filter(
    memories: bool,
    messages: bool,
    types: Sequence[str] | None,
    when: TimeFilter,
    tags: TagFilter | None = None,
) -> str | None:
    """Which postings rows may be returned: visible memories, messages, within the time filter."""
    parts = []
    if messages and when:
        parts.append(
            "(s.source = 1 AND EXISTS (SELECT 1 FROM messages AS m "
            f"WHERE m.id = s.item_id AND m.user_id = :user_id{when.sql('m')}))"
        )
    elif messages:
        parts.append("s.source = 1")
    if memories:
        parts.append(
            "(s.source = 0 AND EXISTS (SELECT 1 FROM memory_items AS m "
            f"WHERE m.id = s.item_id AND {_memory_visible(types, tags)}{when.sql('m')}"
            f"{_memory_valid('m', when)}))"
        )
    return " OR ".join(parts) if parts else None


_MESSAGE_COLUMNS = (
    "m.id, m.content, m.role, m.created_at, m.conversation_id, m.seq, "
    "CASE WHEN jsonb_typeof(m.metadata -> 'speaker') = 'string' "
    "THEN m.metadata ->> 'speaker' END AS speaker"
)

# (previous, next) turn of each seed message in its own conversation.
_NEIGHBOURS_SQL = """
    SELECT c.id,
           (SELECT p.id FROM messages AS p
             WHERE p.conversation_id = c.conversation_id AND p.user_id = :user_id
               AND p.seq < c.seq ORDER BY p.seq DESC LIMIT 1) AS previous_id,
           (SELECT n.id FROM messages AS n
             WHERE n.conversation_id = c.conversation_id AND n.user_id = :user_id
               AND n.seq > c.seq ORDER BY n.seq LIMIT 1) AS next_id
    FROM messages AS c
    WHERE c.user_id = :user_id AND c.id = ANY(CAST(:seeds AS uuid[]))
"""


# A message's passage score: its best passage's cosine, or its own where it has none (a turn of
# one sentence). Read through the passages' primary key, one index probe per scored message.
_BEST_PASSAGE = (
    "coalesce((SELECT max(1 - (p.embedding <=> CAST(:q AS vector))) FROM message_passages AS p "
    "WHERE p.user_id = :user_id AND p.message_id = {id} AND p.embedding_model = :model), {own})"
)


# Typed: a bare `1 - :w` makes Postgres infer an integer parameter, and 0.7 arrives as 0.
_W = "CAST(:w AS float8)"
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


def _passage_messages_sql(exact: bool, when_sql: str) -> str:
    """The messages branch of the vector statement with passage scoring (see `vector`)."""
    own = "1 - (t.embedding <=> CAST(:q AS vector))"
    scope = (
        f"t.user_id = :user_id AND t.embedding IS NOT NULL AND t.embedding_model = :model{when_sql}"
    )
    if exact:
        # Every message and every passage of the user in one list, grouped per message: no
        # join, so no plan can pair each message with each passage (a nested loop is what a
        # just-imported user's missing statistics chose for a join: 50 ms instead of 3).
        # HAVING drops passages of messages outside the scope (time filter, model).
        rows = (
            f"SELECT t.id, {own} AS own, NULL::float8 AS part FROM messages AS t WHERE {scope} "
            "UNION ALL SELECT p.message_id, NULL, 1 - (p.embedding <=> CAST(:q AS vector)) "
            "FROM message_passages AS p "
            "WHERE p.user_id = :user_id AND p.embedding_model = :model"
        )
        inner = (
            f"SELECT u.id, (1 - {_W}) * max(u.own) + {_W} * coalesce(max(u.part), max(u.own)) "
            f"AS cosine FROM ({rows}) AS u GROUP BY u.id HAVING max(u.own) IS NOT NULL "
            "ORDER BY cosine DESC LIMIT :limit"
        )
    else:
        # The index finds the messages by their own vectors; their passages re-score them.
        found = (
            f"SELECT t.id, {own} AS own FROM messages AS t WHERE {scope} "
            "ORDER BY t.embedding <=> CAST(:q AS vector) LIMIT :limit"
        )
        inner = (
            f"SELECT a.id, (1 - {_W}) * a.own + {_W} * "
            f"{_BEST_PASSAGE.format(id='a.id', own='a.own')} AS cosine FROM ({found}) AS a"
        )
    return (
        f"(SELECT {int(Source.MESSAGE)} AS source, c.id, c.cosine "
        f"FROM ({inner}) AS c ORDER BY c.cosine DESC)"
    )


def _message_candidate(r: Any) -> Candidate:
    return Candidate(
        Source.MESSAGE,
        r.id,
        r.content,
        None,
        None,
        r.created_at,
        f"conversation:{r.conversation_id}#{r.seq}",
        r.conversation_id,
        r.role,
        usable_speaker(r.speaker),
    )


class RetrievalRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def keyword(
        self,
        user_id: str,
        query: str,
        *,
        limit: int,
        memories: bool,
        messages: bool,
        types: Sequence[str] | None,
        k1: float,
        b: float,
        when: TimeFilter = NO_TIME_FILTER,
        tags: TagFilter | None = None,
    ) -> KeywordHits:
        """Top items by BM25 (per-user document frequencies) over any of the query's lexemes."""
        rows = await self._bm25(
            user_id, query, limit, memories, messages, types, k1, b, when, tags, expansion=None
        )
        scores = {(Source(r.source), r.item_id): float(r.score) for r in rows}
        plain = {(Source(r.source), r.item_id): float(r.plain) for r in rows}
        max_score = float(rows[0].max_score) if rows else 0.0
        return KeywordHits(scores, max_score, plain=plain)

    async def expansion(
        self,
        user_id: str,
        query: str,
        seeds: Sequence[uuid.UUID],
        *,
        terms: int,
        min_df: int,
        limit: int,
        memories: bool,
        messages: bool,
        types: Sequence[str] | None,
        k1: float,
        b: float,
        when: TimeFilter = NO_TIME_FILTER,
        tags: TagFilter | None = None,
    ) -> dict[tuple[Source, uuid.UUID], float]:
        """BM25 of the items over the seeds' rarest lexemes the query lacks (one PRF round)."""
        if not seeds or terms <= 0:
            return {}
        expansion = {"seeds": list(seeds), "terms": terms, "min_df": min_df}
        rows = await self._bm25(
            user_id, query, limit, memories, messages, types, k1, b, when, tags, expansion=expansion
        )
        return {(Source(r.source), r.item_id): float(r.score) for r in rows}

    async def _bm25(
        self,
        user_id: str,
        query: str,
        limit: int,
        memories: bool,
        messages: bool,
        types: Sequence[str] | None,
        k1: float,
        b: float,
        when: TimeFilter,
        tags: TagFilter | None,
        *,
        expansion: dict[str, Any] | None,
    ) -> Sequence[Any]:
        """Run the BM25 statement over the query's lexemes, or over the expansion terms."""
        source_filter = _source_filter(memories, messages, types, when, tags)
        if source_filter is None:
            return []
        sql = text(
            _BM25_SQL.format(
                source_filter=source_filter,
                expansion=_EXPANSION_CTE if expansion else "",
                terms="expansion" if expansion else "idf",
            )
        )
        params: dict[str, Any] = {
            "user_id": user_id,
            "query": query,
            "names": " ".join(query_names(query)),
            "limit": limit,
            "k1": k1,
            "b": b,
            **when.params(),
            **(expansion or {}),
            **_scope_params(types, tags),
        }
        return (await self.session.execute(sql, params)).all()

    async def set_vector_search(
        self,
        *,
        exact: bool,
        probes: int,
        max_probes: int,
        ef_search: int = 40,
        max_scan_tuples: int = 20_000,
        random_page_cost: float = ANN_RANDOM_PAGE_COST,
    ) -> None:
        """Planner settings for this transaction's vector queries (one statement). The scan
        settings of both index methods are set, so the statement is the same on an ivfflat or
        an HNSW index (whichever `pgrecall reindex` built); iterative scans on either.

        random_page_cost: pgvector prices every ivfflat list it probes as pages read from disk
        at random_page_cost (4 by default), so from about 45 probes of a 50k-item user's own 100
        lists the planner chose that user's exact scan (user_id index + sort), 3.5x slower
        (`python -m bench.plans`). The index is in memory or on SSD, as a query path's
        working set is: 1.1, the usual value for SSD storage, prices it so, for this
        transaction only (docs/performance.md, "Big users on real conversation turns")."""
        if not exact:
            settings = ann_settings(
                probes=probes,
                max_probes=max_probes,
                ef_search=ef_search,
                max_scan_tuples=max_scan_tuples,
                random_page_cost=random_page_cost,
            )
            # SET LOCAL (app/db.py): on Citus it reaches the worker that runs the statement.
            await self.session.execute(SET_LOCAL, set_local_params(settings))

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
    ) -> dict[tuple[Source, uuid.UUID], float]:
        """Top items by cosine similarity, per source.

        exact=True orders by an expression the ivfflat index cannot serve, so Postgres scans the
        user's rows through the user_id index: exact, and fast for stores of a few thousand
        items. exact=False uses the index with iterative scans (filtered ANN without short
        result sets); the outer ORDER BY repairs relaxed ordering.

        passage_weight > 0 scores a message by (1 - w) x its own cosine + w x its best
        passage's (its own where it has none). Exact: over all the user's messages and
        passages. ANN: the index finds messages by their own vectors and their passages
        re-score them (a passage alone cannot bring a message in; docs/retrieval.md).
        """
        order = (
            "(t.embedding <=> CAST(:q AS vector)) + 0"
            if exact
            else "t.embedding <=> CAST(:q AS vector)"
        )
        results: dict[tuple[Source, uuid.UUID], float] = {}
        params: dict[str, Any] = {
            "user_id": user_id,
            "q": vector_literal(embedding),
            "limit": limit,
            **when.params(),
            **_scope_params(types, tags),
        }
        params["model"] = model
        statements: list[tuple[Source, str]] = []
        # Vectors of another model (mid re-embed) live in another space: never compare them.
        if memories:
            visible = _memory_visible(types, tags).replace("m.", "t.")
            statements.append(
                (
                    Source.MEMORY,
                    "SELECT t.id, t.embedding FROM memory_items AS t "
                    f"WHERE {visible} AND t.embedding_model = :model{when.sql('t')}"
                    f"{_memory_valid('t', when)}",
                )
            )
        messages_sql: str | None = None
        if messages and passage_weight > 0:
            params["w"] = float(passage_weight)
            messages_sql = _passage_messages_sql(exact, when.sql("t"))
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
        branches = [
            f"(SELECT {int(source)} AS source, id, 1 - (embedding <=> CAST(:q AS vector)) "
            f"AS cosine FROM ({base} ORDER BY {order} LIMIT :limit) AS c ORDER BY cosine DESC)"
            for source, base in statements
        ]
        if messages_sql is not None:
            branches.append(messages_sql)
        sql = text(" UNION ALL ".join(branches))
        rows = (await self.session.execute(sql, params)).all()
        for row in sorted(rows, key=lambda r: r.source):  # stable: keeps each branch's order
            results[(Source(row.source), row.id)] = float(row.cosine)
        return results

    async def fetch(
        self,
        user_id: str,
        keys: Sequence[tuple[Source, uuid.UUID]],
        when: TimeFilter = NO_TIME_FILTER,
    ) -> dict[tuple[Source, uuid.UUID], Candidate]:
        """Content and metadata of the chosen items (still scoped by user and time filter)."""
        out: dict[tuple[Source, uuid.UUID], Candidate] = {}
        memory_ids = [i for s, i in keys if s is Source.MEMORY]
        message_ids = [i for s, i in keys if s is Source.MESSAGE]
        if memory_ids:
            for r in await self._memory_rows(user_id, memory_ids, when):
                ref = r.source or (
                    f"message:{r.source_message_id}" if r.source_message_id else None
                )
                out[(Source.MEMORY, r.id)] = Candidate(
                    Source.MEMORY,
                    r.id,
                    r.content,
                    r.type,
                    r.importance,
                    r.created_at,
                    ref,
                    None,
                    None,
                )
        if message_ids:
            rows = await self.session.execute(
                text(
                    f"SELECT {_MESSAGE_COLUMNS} FROM messages AS m "
                    "JOIN conversations AS c ON c.id = m.conversation_id "
                    "WHERE m.user_id = :user_id AND c.user_id = :user_id "
                    "AND m.id = ANY(CAST(:ids AS uuid[]))" + when.sql("m")
                ),
                {"user_id": user_id, "ids": message_ids, **when.params()},
            )
            for r in rows:
                out[(Source.MESSAGE, r.id)] = _message_candidate(r)
        return out

    async def _memory_rows(
        self, user_id: str, ids: Sequence[uuid.UUID], when: TimeFilter
    ) -> Sequence[Any]:
        rows = await self.session.execute(
            text(
                "SELECT id, content, type, importance, created_at, source, source_message_id "
                "FROM memory_items WHERE user_id = :user_id AND id = ANY(CAST(:ids AS uuid[])) "
                "AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > now())"
                + when.sql("memory_items")
                + _memory_valid("memory_items", when)
            ),
            {"user_id": user_id, "ids": list(ids), **when.params()},
        )
        return rows.all()

    async def fetch_around(
        self,
        user_id: str,
        keys: Sequence[tuple[Source, uuid.UUID]],
        seeds: Sequence[uuid.UUID],
        when: TimeFilter = NO_TIME_FILTER,
    ) -> tuple[
        dict[uuid.UUID, tuple[uuid.UUID | None, uuid.UUID | None]],
        dict[tuple[Source, uuid.UUID], Candidate],
    ]:
        """(previous, next) message of each seed in its own conversation, and `fetch` of the keys
        and of those neighbours, with one statement for the messages (one round trip on the
        query path); the memories as in `fetch`. The wanted ids reach the messages' primary key
        as one array (`= ANY(ARRAY(...))`): as `IN (SELECT ...)` the planner, which estimates a
        user's rows low under row-level security, joined every message of the user first."""
        out: dict[tuple[Source, uuid.UUID], Candidate] = {}
        memory_ids = [i for s, i in keys if s is Source.MEMORY]
        message_ids = [i for s, i in keys if s is Source.MESSAGE]
        around: dict[uuid.UUID, tuple[uuid.UUID | None, uuid.UUID | None]] = {}
        if memory_ids:
            out = await self.fetch(user_id, [(Source.MEMORY, i) for i in memory_ids], when)
        if not message_ids and not seeds:
            return around, out
        rows = await self.session.execute(
            text(
                f"""
                WITH nb AS MATERIALIZED ({_NEIGHBOURS_SQL}), wanted AS (
                    SELECT unnest(CAST(:ids AS uuid[])) AS id
                    UNION SELECT previous_id FROM nb UNION SELECT next_id FROM nb
                )
                SELECT true AS seed, nb.id, nb.previous_id, nb.next_id, NULL AS content,
                       NULL AS role, NULL::timestamptz AS created_at, NULL::uuid AS conversation_id,
                       NULL::bigint AS seq, NULL AS speaker
                FROM nb
                UNION ALL
                SELECT false, m.id, NULL, NULL, {_MESSAGE_COLUMNS.replace("m.id, ", "")}
                FROM messages AS m JOIN conversations AS c ON c.id = m.conversation_id
                WHERE m.user_id = :user_id AND c.user_id = :user_id
                  AND m.id = ANY(ARRAY(SELECT id FROM wanted)){when.sql("m")}
                """
            ),
            {"user_id": user_id, "ids": message_ids, "seeds": list(seeds), **when.params()},
        )
        for r in rows:
            if r.seed:
                around[r.id] = (r.previous_id, r.next_id)
            else:
                out[(Source.MESSAGE, r.id)] = _message_candidate(r)
        return around, out

    async def item_count(self, user_id: str) -> int:
        """Indexed items of this user (memories + messages): picks exact vs ANN search."""
        value = await self.session.scalar(
            text("SELECT doc_count FROM search_stats WHERE user_id = :user_id"),
            {"user_id": user_id},
        )
        return int(value or 0)
