"""The query configuration (from Settings) and the one place a door builds a query request:
the door's arguments, the configured defaults for the rest. The query service itself comes from
`app.runtime.resources.query_service`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from app.config import Settings
from app.retrieval.presets import get_preset
from app.services.query import QueryConfig, QueryRequest, SourceName

BOTH_SOURCES: tuple[SourceName, ...] = ("memory", "message")


def query_config(settings: Settings) -> QueryConfig:
    """Retrieval settings handed to the query service."""
    return QueryConfig(
        preset=get_preset(settings.retrieval_preset),
        token_budget=settings.token_budget,
        min_relevance=settings.min_relevance,
        max_results=settings.max_results,
        rate_limit_per_minute=settings.rate_limit_per_minute,
        timeout_s=settings.query_timeout_s,
        exact_search_max_items=settings.exact_search_max_items,
        ivfflat_probes=settings.ivfflat_probes,
        ivfflat_max_probes=settings.ivfflat_max_probes,
        ivfflat_probe_share=settings.ivfflat_probe_share,
        hnsw_ef_search=settings.hnsw_ef_search,
        hnsw_max_scan_tuples=settings.hnsw_max_scan_tuples,
        generic_plan_max_items=settings.generic_plan_max_items,
        search_size_ttl_s=settings.search_size_ttl_s,
    )


def query_request(
    config: QueryConfig,
    user_id: str,
    query: str,
    *,
    limit: int | None = None,
    min_score: float | None = None,
    types: Sequence[str] | None = None,
    sources: Sequence[SourceName] | None = None,
    token_budget: int | None = None,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
    as_of: datetime | None = None,
    tags: Sequence[str] | None = None,
    tags_match: Literal["any", "all"] = "any",
    recency: float | None = None,
) -> QueryRequest:
    """A query request: what the caller chose, the configured defaults for what it left out
    (limit PGRECALL_MAX_RESULTS, PGRECALL_MIN_RELEVANCE, both sources, every type)."""
    return QueryRequest(
        user_id=user_id,
        query=query,
        limit=config.max_results if limit is None else limit,
        min_score=config.min_relevance if min_score is None else min_score,
        types=tuple(types) if types else None,
        sources=tuple(sources) if sources else BOTH_SOURCES,
        token_budget=token_budget,
        time_from=time_from,
        time_to=time_to,
        as_of=as_of,
        tags=tuple(tags) if tags else None,
        tags_match=tags_match,
        recency=recency,
    )
