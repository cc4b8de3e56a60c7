"""Bulk loading of memory items: COPY, then set-based keyword postings and statistics.

For imports and benchmarks that write tens of thousands of rows at once, where the per-row
ORM path (MemoryService.create_many) is too slow. Works on a raw asyncpg connection because
COPY needs one; the caller owns the transaction. Postings and per-user statistics are computed
exactly as SearchIndexRepository.index does for a memory item (its own text, no context), so
BM25 scores do not depend on how rows arrived. Rebuild the vector index afterwards
(app.services.reindex) and ANALYZE.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import numpy as np
import numpy.typing as npt

from app.vectors import encode_halfvec

_COLUMNS = (
    "id",
    "user_id",
    "content",
    "content_hash",
    "type",
    "embedding",
    "embedding_model",
    "importance",
    "created_at",
    "updated_at",
    "valid_from",
)


@dataclass(frozen=True)
class BulkMemory:
    """One memory item row, ready for COPY (content_hash as MemoryService computes it)."""

    id: uuid.UUID
    user_id: str
    content: str
    content_hash: str
    type: str
    embedding: npt.NDArray[np.float32]
    embedding_model: str
    importance: float
    created_at: datetime


# Postings for the given memory ids (tf = positions per lexeme, dl = sum of tf per item), then
# per-user statistics: doc_count counts every item, as SearchIndexRepository.index does.
_INDEX_MEMORIES_SQL = """
WITH docs AS MATERIALIZED (
    SELECT m.id, m.user_id, to_tsvector('english', m.content) AS tsv
    FROM memory_items AS m JOIN unnest($1::uuid[]) AS ids(id) ON ids.id = m.id
), lex AS (
    SELECT docs.id, docs.user_id, u.lexeme,
           coalesce(array_length(u.positions, 1), 1)::real AS tf
    FROM docs, unnest(docs.tsv) AS u
), lens AS (
    SELECT id, sum(tf)::real AS dl FROM lex GROUP BY id
), ins AS (
    INSERT INTO search_postings (user_id, lexeme, item_id, source, tf, dl)
    SELECT lex.user_id, lex.lexeme, lex.id, 0, lex.tf, lens.dl FROM lex JOIN lens USING (id)
    ON CONFLICT DO NOTHING
    RETURNING user_id, item_id, dl
), per_item AS (
    SELECT DISTINCT user_id, item_id, dl FROM ins
), lengths AS (
    SELECT user_id, sum(dl) AS total FROM per_item GROUP BY user_id
), counts AS (
    SELECT user_id, count(*) AS n FROM docs GROUP BY user_id
)
INSERT INTO search_stats (user_id, doc_count, total_length)
SELECT counts.user_id, counts.n, coalesce(lengths.total, 0)
FROM counts LEFT JOIN lengths USING (user_id)
ON CONFLICT (user_id) DO UPDATE
  SET doc_count = search_stats.doc_count + EXCLUDED.doc_count,
      total_length = search_stats.total_length + EXCLUDED.total_length
"""


class BulkRepository:
    """Set-based writes of many memory items on one asyncpg connection."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn

    async def register_codecs(self) -> None:
        """Binary halfvec codec for COPY (this connection only; the ORM keeps the text form)."""
        await self.conn.set_type_codec(
            "halfvec", schema="public", encoder=encode_halfvec, decoder=bytes, format="binary"
        )

    async def copy_memories(self, rows: Iterable[BulkMemory]) -> int:
        """COPY memory items (call register_codecs first); index them with index_memories."""
        records = [
            (
                r.id,
                r.user_id,
                r.content,
                r.content_hash,
                r.type,
                r.embedding,
                r.embedding_model,
                r.importance,
                r.created_at,
                r.created_at,
                r.created_at,
            )
            for r in rows
        ]
        if records:
            await self.conn.copy_records_to_table("memory_items", records=records, columns=_COLUMNS)
        return len(records)

    async def index_memories(self, ids: Sequence[uuid.UUID], *, batch: int = 20_000) -> None:
        """Keyword postings and search_stats for memory items that have none yet."""
        for start in range(0, len(ids), batch):
            await self.conn.execute(_INDEX_MEMORIES_SQL, list(ids[start : start + batch]))

    async def analyze(self) -> None:
        """Fresh planner statistics for every table the query path reads."""
        for table in (
            "memory_items",
            "messages",
            "conversations",
            "search_postings",
            "search_stats",
        ):
            await self.conn.execute(f"ANALYZE {table}")
