"""The keyword arm: BM25 over the per-user postings (app/repositories/search_index.py), and one
round of pseudo-relevance feedback over the same statement."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, Unpack

from app.repositories.retrieval.common import (
    NO_TIME_FILTER,
    SOURCES,
    Row,
    SessionBound,
    TagFilter,
    TimeFilter,
    _scope_params,
    memory_valid,
    memory_visible,
)
from app.repositories.search_index import Source


@dataclass(frozen=True)
class KeywordHits:
    scores: dict[tuple[Source, uuid.UUID], float]
    max_score: float  # BM25 of an ideal document holding every query lexeme: sum(idf) * (k1+1)
    expansion: dict[tuple[Source, uuid.UUID], float] | None = None  # PRF round, if any
    # BM25 over the query's lexemes that are not names (app/retrieval/names.py), per item
    plain: dict[tuple[Source, uuid.UUID], float] | None = None


BM25_SQL = """
WITH q AS (
    SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', :query)) AS u
), nq AS (
    -- the lexemes of the names in the question (app/retrieval/names.py)
    SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', :names)) AS u
), st AS (
    -- k1 and b as float8 once: a numeric bind would be converted on every posting's row (a
    -- numeric-to-float8 conversion goes through text: most of this statement's CPU).
    SELECT greatest(doc_count, 1)::float8 AS n,
           greatest(total_length::float8 / greatest(doc_count, 1), 1.0) AS avgdl,
           CAST(:k1 AS float8) AS k1, CAST(:b AS float8) AS b
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
           sum({terms}.idf * p.tf * (st.k1 + 1.0)
               / (p.tf + st.k1 * (1.0 - st.b + st.b * p.dl / st.avgdl))) AS score,
           -- the same sum over the lexemes that are not names: a name alone is no evidence
           coalesce(sum({terms}.idf * p.tf * (st.k1 + 1.0)
               / (p.tf + st.k1 * (1.0 - st.b + st.b * p.dl / st.avgdl)))
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
       (SELECT coalesce(sum(idf), 0) * (CAST(:k1 AS float8) + 1.0) FROM query_idf) AS max_score
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


def source_filter(
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
            f"WHERE m.id = s.item_id AND {memory_visible(types, tags)}{when.sql('m')}"
            f"{memory_valid('m', when)}))"
        )
    return " OR ".join(parts) if parts else None


class KeywordScope(TypedDict):
    """What the keyword arm searches and how it scores: how many items, which sources, types,
    tags and times, BM25's k1 and b, and the participant names the query mentions (the
    pipeline finds them)."""

    limit: int
    memories: bool
    messages: bool
    types: Sequence[str] | None
    k1: float
    b: float
    when: NotRequired[TimeFilter]
    tags: NotRequired[TagFilter | None]
    names: NotRequired[Sequence[str]]


class KeywordArm(SessionBound):
    async def keyword(
        self, user_id: str, query: str, **scope: Unpack[KeywordScope]
    ) -> KeywordHits:
        """Top items by BM25 (per-user document frequencies) over any of the query's lexemes."""
        rows = await self._bm25(user_id, query, scope, None)
        keys = [(SOURCES[r["source"]], r["item_id"]) for r in rows]
        scores = {k: float(r["score"]) for k, r in zip(keys, rows, strict=True)}
        plain = {k: float(r["plain"]) for k, r in zip(keys, rows, strict=True)}
        max_score = float(rows[0]["max_score"]) if rows else 0.0
        return KeywordHits(scores, max_score, plain=plain)

    async def expansion(
        self,
        user_id: str,
        query: str,
        seeds: Sequence[uuid.UUID],
        *,
        terms: int,
        min_df: int,
        **scope: Unpack[KeywordScope],
    ) -> dict[tuple[Source, uuid.UUID], float]:
        """BM25 of the items over the seeds' rarest lexemes the query lacks (one PRF round)."""
        if not seeds or terms <= 0:
            return {}
        expansion = {"seeds": list(seeds), "terms": terms, "min_df": min_df}
        rows = await self._bm25(user_id, query, scope, expansion)
        return {(SOURCES[r["source"]], r["item_id"]): float(r["score"]) for r in rows}

    async def _bm25(
        self,
        user_id: str,
        query: str,
        scope: KeywordScope,
        expansion: dict[str, Any] | None,
    ) -> Sequence[Row]:
        """Run the BM25 statement over the query's lexemes, or over the expansion terms."""
        statement = bm25_statement(query, scope, expansion)
        if statement is None:
            return []
        sql, params = statement
        return await self._rows(sql, {"user_id": user_id, **params})


def bm25_statement(
    query: str, scope: KeywordScope, expansion: dict[str, Any] | None
) -> tuple[str, dict[str, Any]] | None:
    """The BM25 statement (over the query's lexemes, or over the expansion terms) and its
    parameters but `:user_id`; None when the scope admits no source."""
    types, when, tags = scope["types"], scope.get("when", NO_TIME_FILTER), scope.get("tags")
    visible = source_filter(scope["memories"], scope["messages"], types, when, tags)
    if visible is None:
        return None
    sql = BM25_SQL.format(
        source_filter=visible,
        expansion=_EXPANSION_CTE if expansion else "",
        terms="expansion" if expansion else "idf",
    )
    params: dict[str, Any] = {
        "query": query,
        "names": " ".join(scope.get("names", ())),
        "limit": scope["limit"],
        "k1": scope["k1"],
        "b": scope["b"],
        **when.params(),
        **(expansion or {}),
        **_scope_params(types, tags),
    }
    return sql, params
