"""The query configuration (from Settings), the one place a door's query (its QueryFilters and
limits) becomes the service's request, and the answers made from the service's result. The
query service itself comes from `app.runtime.resources.query_service`."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

from pydantic import BaseModel

from app.config import Settings
from app.domain import MemoryScope, as_scope
from app.retrieval.presets import get_preset
from app.schemas.memory import MemoryItemOut, MemoryQueryResponse
from app.schemas.query import QueryFilters
from app.services.query import QueryConfig, QueryRequest, QueryResult

M = TypeVar("M", bound=BaseModel)

# QueryConfig's fields are the Settings fields of the same name (the defaults live in
# app/config.py), but for these; the preset is named by PGRECALL_RETRIEVAL_PRESET.
_SETTING_NAMES = {"timeout_s": "query_timeout_s"}


def query_config(settings: Settings) -> QueryConfig:
    """Retrieval settings handed to the query service."""
    values = {
        f.name: getattr(settings, _SETTING_NAMES.get(f.name, f.name))
        for f in fields(QueryConfig)
        if f.name != "preset"
    }
    return QueryConfig(preset=get_preset(settings.retrieval_preset), **values)


def query_request(
    config: QueryConfig,
    user: str | MemoryScope,
    query: str,
    filters: QueryFilters | None = None,
    *,
    limit: int | None = None,
    min_score: float | None = None,
    token_budget: int | None = None,
) -> QueryRequest:
    """The service's request from a door's query: every filter the caller set (each
    QueryFilters field is the QueryRequest field of the same name, lists as tuples), and the
    configured defaults for what it left out (limit PGRECALL_MAX_RESULTS,
    PGRECALL_MIN_RELEVANCE, both sources, every type). `user`: the caller's user, or its
    memory scope (agent, run, spaces: Caller.memory)."""
    scope = as_scope(user)
    given = (filters or QueryFilters()).model_dump(
        include=set(QueryFilters.model_fields), exclude_none=True
    )
    chosen = {name: tuple(v) if isinstance(v, list) else v for name, v in given.items()}
    return QueryRequest(
        user_id=scope.user_id,
        memory=scope,
        query=query,
        limit=config.max_results if limit is None else limit,
        min_score=config.min_relevance if min_score is None else min_score,
        token_budget=token_budget,
        **chosen,
    )


def read_fields(model: type[M], item: object, **attributes: str) -> M:
    """`model` with each field read from the item's attribute of the same name, but for
    `attributes` (field -> attribute): a door's answer made from a service's result item."""
    return model(**{name: getattr(item, attributes.get(name, name)) for name in model.model_fields})


def result_status(result: QueryResult) -> dict[str, Any]:
    """How complete an answer is, the fields every query response carries alike."""
    return {
        "truncated": result.truncated,
        "token_count": result.token_count,
        "error": result.error,
        "degraded": result.degraded,
        "rate_limited": result.rate_limited,
    }


def memory_query_response(result: QueryResult) -> MemoryQueryResponse:
    """POST /v1/memory/query's answer: the items with their scores and references, timings."""
    return MemoryQueryResponse(
        items=[read_fields(MemoryItemOut, i, truncated="cut") for i in result.items],
        total_count=result.total_count,
        query_embedding_ms=result.query_embedding_ms,
        retrieval_ms=result.retrieval_ms,
        **result_status(result),
    )
