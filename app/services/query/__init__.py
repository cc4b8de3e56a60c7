"""query_memory. The stages, in the order they run, are in pipeline.py; the service around them
(cache, rate limit, time limit, audit) in service.py; the types in model.py."""

from __future__ import annotations

from app.repositories.search_index import Source
from app.services.query.context import informative, time_preference
from app.services.query.model import (
    MAX_QUERY_CHARS,
    QueryConfig,
    QueryItem,
    QueryRequest,
    QueryResult,
    QueryTrace,
    SourceName,
    ann_probes,
    query_hash,
)
from app.services.query.service import QueryService

__all__ = [
    "MAX_QUERY_CHARS",
    "QueryConfig",
    "QueryItem",
    "QueryRequest",
    "QueryResult",
    "QueryService",
    "QueryTrace",
    "Source",
    "SourceName",
    "ann_probes",
    "informative",
    "query_hash",
    "time_preference",
]
