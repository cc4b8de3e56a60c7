"""The keyword index: per-user postings and corpus statistics that BM25 is computed from.

Lexemes come from Postgres itself (`to_tsvector('english', ...)`: stemming, stop words), so
the index and the query always agree on tokenisation.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from enum import IntEnum

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession


class Source(IntEnum):
    MEMORY = 0
    MESSAGE = 1


_INDEX_SQL = text(
    """
    WITH docs AS (
        SELECT d.item_id, d.source, to_tsvector('english', d.body) AS tsv
        FROM unnest(CAST(:ids AS uuid[]), CAST(:sources AS smallint[]), CAST(:bodies AS text[]))
             AS d(item_id, source, body)
    ), lex AS (
        SELECT docs.item_id, docs.source, u.lexeme,
               coalesce(array_length(u.positions, 1), 1) AS tf
        FROM docs, unnest(docs.tsv) AS u
    ), lens AS (
        SELECT item_id, sum(tf)::int AS dl FROM lex GROUP BY item_id
    ), ins AS (
        INSERT INTO search_postings (user_id, lexeme, item_id, source, tf, dl)
        SELECT :user_id, lex.lexeme, lex.item_id, lex.source, lex.tf, lens.dl
        FROM lex JOIN lens USING (item_id)
        ON CONFLICT DO NOTHING
        RETURNING item_id, dl
    )
    INSERT INTO search_stats (user_id, doc_count, total_length)
    SELECT :user_id, :doc_count,
           coalesce((SELECT sum(dl) FROM (SELECT DISTINCT item_id, dl FROM ins) AS per_item), 0)
    ON CONFLICT (user_id) DO UPDATE
      SET doc_count = search_stats.doc_count + EXCLUDED.doc_count,
          total_length = search_stats.total_length + EXCLUDED.total_length
    """
)

_UNINDEX_SQL = text(
    """
    WITH gone AS (
        DELETE FROM search_postings
        WHERE user_id = :user_id AND item_id = ANY(CAST(:ids AS uuid[]))
        RETURNING item_id, dl
    ), per_item AS (SELECT DISTINCT item_id, dl FROM gone)
    UPDATE search_stats
       SET doc_count = greatest(0, doc_count - (SELECT count(*) FROM per_item)),
           total_length = greatest(0, total_length - coalesce((SELECT sum(dl) FROM per_item), 0))
     WHERE user_id = :user_id
    """
)


class SearchIndexRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def index(
        self, user_id: str, items: Sequence[tuple[uuid.UUID, Source, str]]
    ) -> None:
        """Add postings for (item id, source, keyword text) triples of one user."""
        if not items:
            return
        await self.session.execute(
            _INDEX_SQL,
            {
                "user_id": user_id,
                "ids": [i for i, _, _ in items],
                "sources": [int(s) for _, s, _ in items],
                "bodies": [b for _, _, b in items],
                "doc_count": len(items),
            },
        )

    async def unindex(self, user_id: str, item_ids: Sequence[uuid.UUID]) -> None:
        """Remove an item's postings (content changed or purged). Zero-lexeme items stay counted."""
        if item_ids:
            await self.session.execute(_UNINDEX_SQL, {"user_id": user_id, "ids": list(item_ids)})
