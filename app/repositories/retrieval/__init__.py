"""Candidate queries for query_memory, one module per arm: keyword (BM25 over the postings),
vector (cosine over pgvector; passages for the passage-scored messages branch), context (the
chosen rows and the turns around them) and stats.

Every statement is scoped by `user_id`; memory items additionally by deleted/expired/type and
validity (valid now, or at as_of).
"""

from __future__ import annotations

from app.repositories.retrieval.common import (
    NO_TIME_FILTER,
    Candidate,
    TagFilter,
    TimeFilter,
    memory_valid,
    memory_visible,
)
from app.repositories.retrieval.context import ContextReads
from app.repositories.retrieval.keyword import BM25_SQL, KeywordArm, KeywordHits, source_filter
from app.repositories.retrieval.passages import passage_messages_sql
from app.repositories.retrieval.shared import SharedReads, SpaceRows
from app.repositories.retrieval.stats import SearchSize, Stats
from app.repositories.retrieval.vector import (
    ANN_RANDOM_PAGE_COST,
    VectorArm,
    ann_settings,
    vector_search_settings,
)
from app.repositories.search_index import Source


class RetrievalRepository(KeywordArm, VectorArm, ContextReads, Stats, SharedReads):
    """The statements of one query, on one session (each arm's methods in its own module; the
    shared spaces' in shared.py)."""


__all__ = [
    "ANN_RANDOM_PAGE_COST",
    "BM25_SQL",
    "NO_TIME_FILTER",
    "Candidate",
    "KeywordHits",
    "RetrievalRepository",
    "SearchSize",
    "Source",
    "SpaceRows",
    "TagFilter",
    "TimeFilter",
    "ann_settings",
    "memory_valid",
    "memory_visible",
    "passage_messages_sql",
    "source_filter",
    "vector_search_settings",
]
