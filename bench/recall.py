"""Filtered ANN recall@10 and short result sets, on the service's own vector SQL.

The candidate query is RetrievalRepository.vector with the service's settings (exact path for
users at or under exact_search_max_items, ivfflat with iterative scans above). Ground truth is a
brute-force scan of the user's rows through a MATERIALIZED CTE (the index cannot serve its
ORDER BY) on a separate connection without a statement cache, so no plan is shared.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt
from sqlalchemy import text

from app.db import create_sessionmaker, user_session
from app.repositories.maintenance import user_index_name
from app.repositories.retrieval import RetrievalRepository, vector_search_settings
from app.repositories.search_index import Source
from app.roles import service_engine
from app.services.query import ann_probes
from app.vectors import vector_literal
from bench.drive import BenchQuery

_EXACT_SQL = """
WITH u AS MATERIALIZED (
    SELECT id, embedding FROM memory_items
    WHERE user_id = $1 AND deleted_at IS NULL AND (expires_at IS NULL OR expires_at > now())
)
SELECT id, (embedding <=> $2::text::halfvec)::float8 AS distance,
       (SELECT count(*) FROM u) AS visible
FROM u ORDER BY distance LIMIT $3
"""


@dataclass(frozen=True)
class VectorSearch:
    """The service's vector settings (Settings at the edge: exact threshold, probes)."""

    exact_search_max_items: int
    ivfflat_probes: int
    ivfflat_max_probes: int
    model: str  # the embedding model of the query vectors (rows of other models are skipped)
    candidates: int = 50  # RetrievalPreset.candidates: the arm's LIMIT
    k: int = 10
    ivfflat_probe_share: float = 0.0  # the service's rule: app/services/query/model.py ann_probes


@dataclass
class _Outcome:
    recall: float
    short: bool
    exact_path: bool
    big: bool
    returned: int
    own_index: bool | None  # the statement scanned the user's own index (None: none exists)


OWN_INDEX_SCANS = text("SELECT coalesce(pg_stat_get_xact_numscans(to_regclass(:name)), -1) AS n")


async def _ann(
    sessionmaker: Any, user_id: str, vector: npt.NDArray[np.float32], cfg: VectorSearch
) -> tuple[dict[uuid.UUID, float], bool, bool | None]:
    """The service's vector arm: its role, the user's row-level security, custom plans, its
    probes rule. Also whether the statement scanned the user's own index (None: it has none)."""
    async with user_session(sessionmaker, user_id, custom_plans=True) as session, session.begin():
        repo = RetrievalRepository(session)
        items = await repo.item_count(user_id)
        exact = items <= cfg.exact_search_max_items
        probes = ann_probes(items, cfg.ivfflat_probes, cfg.ivfflat_probe_share)
        await repo.set_vector_search(
            vector_search_settings(exact=exact, probes=probes, max_probes=cfg.ivfflat_max_probes)
        )
        own = {"name": user_index_name("memory_items", user_id)}
        before = int((await session.execute(OWN_INDEX_SCANS, own)).scalar_one())
        hits = await repo.vector(
            user_id,
            vector,
            limit=cfg.candidates,
            memories=True,
            messages=False,
            types=None,
            exact=exact,
            model=cfg.model,
        )
        after = int((await session.execute(OWN_INDEX_SCANS, own)).scalar_one())
    return (
        {item: 1.0 - cosine for (source, item), cosine in hits.items() if source is Source.MEMORY},
        exact,
        None if before < 0 else after > before,
    )


async def measure_recall(
    database_url: str,
    dsn: str,
    queries: Sequence[BenchQuery],
    embed: Callable[[list[str]], npt.NDArray[np.float32]],
    cfg: VectorSearch,
) -> dict[str, Any]:
    """Recall@k of the service's vector candidates vs exact search, per query, and short sets.

    A result counts as a hit when its distance is within the k-th exact distance (ties at the
    boundary are not misses). A short result set: fewer rows than min(candidates, visible).
    """
    vectors = embed([q.text for q in queries])
    # As the service runs it: the service role, bound by row-level security.
    engine = await service_engine(database_url, pool_size=2, statement_timeout_ms=120_000)
    conn = await asyncpg.connect(dsn, statement_cache_size=0)
    outcomes: list[_Outcome] = []
    try:
        sessionmaker = create_sessionmaker(engine)
        for query, vector in zip(queries, vectors, strict=True):
            ann, exact_path, own_index = await _ann(sessionmaker, query.user_id, vector, cfg)
            rows = await conn.fetch(
                _EXACT_SQL, query.user_id, vector_literal(vector), cfg.candidates
            )
            visible = int(rows[0]["visible"]) if rows else 0
            truth = [float(r["distance"]) for r in rows[: cfg.k]]
            top = sorted(ann.values())[: cfg.k]
            wanted = min(cfg.k, visible)
            hits = sum(1 for d in top if truth and d <= truth[-1] + 1e-6)
            outcomes.append(
                _Outcome(
                    recall=min(hits, wanted) / wanted if wanted else 1.0,
                    short=len(ann) < min(cfg.candidates, visible),
                    exact_path=exact_path,
                    big=query.big,
                    returned=len(ann),
                    own_index=own_index,
                )
            )
    finally:
        await conn.close()
        await engine.dispose()
    return _summary(outcomes, cfg)


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def _summary(outcomes: list[_Outcome], cfg: VectorSearch) -> dict[str, Any]:
    recalls = [o.recall for o in outcomes]
    short = sum(1 for o in outcomes if o.short)
    return {
        "queries": len(outcomes),
        "k": cfg.k,
        "candidates": cfg.candidates,
        f"recall_at_{cfg.k}": _mean(recalls),
        f"min_recall_at_{cfg.k}": round(min(recalls), 4) if recalls else None,
        f"big_user_recall_at_{cfg.k}": _mean([o.recall for o in outcomes if o.big]),
        f"small_user_recall_at_{cfg.k}": _mean([o.recall for o in outcomes if not o.big]),
        f"ann_path_recall_at_{cfg.k}": _mean([o.recall for o in outcomes if not o.exact_path]),
        "ann_path_queries": sum(1 for o in outcomes if not o.exact_path),
        "ann_path_on_own_index": sum(1 for o in outcomes if not o.exact_path and o.own_index),
        "exact_path_queries": sum(1 for o in outcomes if o.exact_path),
        "short_result_sets": short,
        "short_result_share": round(short / len(outcomes), 4) if outcomes else 0.0,
        "settings": {
            "exact_search_max_items": cfg.exact_search_max_items,
            "ivfflat_probes": cfg.ivfflat_probes,
            "ivfflat_max_probes": cfg.ivfflat_max_probes,
            "ivfflat_probe_share": cfg.ivfflat_probe_share,
        },
    }
