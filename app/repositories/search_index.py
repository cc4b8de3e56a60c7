"""The keyword index: per-user postings and corpus statistics that BM25 is computed from.

Lexemes come from Postgres itself (`to_tsvector('english', ...)`: stemming, stop words), so
the index and the query always agree on tokenisation.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.domain import ContextWeights


class Source(IntEnum):
    MEMORY = 0
    MESSAGE = 1


_INDEX_SQL = text(
    """
    WITH docs AS (
        SELECT d.item_id, d.source, d.body, d.previous, d.following
        FROM unnest(CAST(:ids AS uuid[]), CAST(:sources AS smallint[]), CAST(:bodies AS text[]),
                    CAST(:previous AS text[]), CAST(:following AS text[]))
             AS d(item_id, source, body, previous, following)
    ), terms AS (
        SELECT docs.item_id, docs.source, u.lexeme,
               coalesce(array_length(u.positions, 1), 1)::real AS tf
        FROM docs, unnest(to_tsvector('english', docs.body)) AS u
        UNION ALL
        SELECT docs.item_id, docs.source, u.lexeme,
               CAST(:weight_previous AS real) * coalesce(array_length(u.positions, 1), 1) AS tf
        FROM docs, unnest(to_tsvector('english', docs.previous)) AS u
        WHERE docs.previous <> ''
        UNION ALL
        SELECT docs.item_id, docs.source, u.lexeme,
               CAST(:weight_next AS real) * coalesce(array_length(u.positions, 1), 1) AS tf
        FROM docs, unnest(to_tsvector('english', docs.following)) AS u
        WHERE docs.following <> ''
    ), lex AS (
        SELECT item_id, source, lexeme, sum(tf)::real AS tf FROM terms
        GROUP BY item_id, source, lexeme
    ), lens AS (
        SELECT item_id, sum(tf)::real AS dl FROM lex GROUP BY item_id
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


@dataclass(frozen=True)
class Document:
    """What the keyword index sees of one item: its own text and its neighbours' (weighted)."""

    item_id: uuid.UUID
    source: Source
    text: str
    previous: str = ""
    following: str = ""


# Characters (text and context) parsed per INSERT: about 0.1-0.3 s of work on a busy 2-core box.
INDEX_BATCH_CHARS = 300_000


def _batches(items: Sequence[Document], max_chars: int) -> list[Sequence[Document]]:
    """Consecutive runs of documents of at most `max_chars` characters (at least one each)."""
    batches: list[Sequence[Document]] = []
    start, size = 0, 0
    for i, doc in enumerate(items):
        length = len(doc.text) + len(doc.previous) + len(doc.following)
        if i > start and size + length > max_chars:
            batches.append(items[start:i])
            start, size = i, 0
        size += length
    if start < len(items):
        batches.append(items[start:])
    return batches


class SearchIndexRepository:
    def __init__(self, session: AsyncSession, weights: ContextWeights = ContextWeights()) -> None:
        """`weights`: how the lexemes of a document's context count (the preset's
        `context_weights`; the default is the default preset's)."""
        self.session = session
        self.weights = weights

    async def index(self, user_id: str, items: Sequence[Document]) -> None:
        """Add postings for documents of one user, in statements of bounded size.

        One statement per batch keeps each under the statement timeout: a bulk import of 1,000
        long messages is millions of characters to parse into lexemes.
        """
        for batch in _batches(items, INDEX_BATCH_CHARS):
            await self.session.execute(
                _INDEX_SQL,
                {
                    "user_id": user_id,
                    "ids": [d.item_id for d in batch],
                    "sources": [int(d.source) for d in batch],
                    "bodies": [d.text for d in batch],
                    "previous": [d.previous for d in batch],
                    "following": [d.following for d in batch],
                    "weight_previous": self.weights.previous,
                    "weight_next": self.weights.next,
                    "doc_count": len(batch),
                },
            )

    async def reindex(self, user_id: str, items: Sequence[Document]) -> None:
        """Replace the postings of documents whose text or context changed."""
        await self.unindex(user_id, [d.item_id for d in items])
        await self.index(user_id, items)

    async def unindex(self, user_id: str, item_ids: Sequence[uuid.UUID]) -> None:
        """Remove an item's postings (content changed or purged). Zero-lexeme items stay counted."""
        if item_ids:
            await self.session.execute(_UNINDEX_SQL, {"user_id": user_id, "ids": list(item_ids)})

    async def clear(self, user_id: str) -> None:
        """Drop every posting and the corpus statistics of one user (before a rebuild)."""
        await self.session.execute(
            text("DELETE FROM search_postings WHERE user_id = :user_id"), {"user_id": user_id}
        )
        await self.session.execute(
            text("DELETE FROM search_stats WHERE user_id = :user_id"), {"user_id": user_id}
        )

    async def sources(self, user_id: str) -> tuple[Sequence[Any], Sequence[Any]]:
        """What the index is built from: the user's memories (id, content) and messages (id,
        conversation_id, content, metadata) in conversation order."""
        memories = await self.session.execute(
            text("SELECT id, content FROM memory_items WHERE user_id = :user_id ORDER BY id"),
            {"user_id": user_id},
        )
        messages = await self.session.execute(
            text(
                "SELECT id, conversation_id, content, metadata FROM messages "
                "WHERE user_id = :user_id ORDER BY conversation_id, seq"
            ),
            {"user_id": user_id},
        )
        return memories.all(), messages.all()
