"""What the Health page shows: database, migrations, Redis, embedder, caches, evaluation runs."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from app.adapters.mlflow_runs import EvalRuns, last_runs
from app.errors import EmbeddingError
from app.migrate import current_revision, head_revision
from app.runtime import Resources
from app.services.embedding import Priority

_PROBE = "pgrecall console health check"
_EMBED_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class HealthReport:
    checks: list[Check]
    embedding_hits: int
    embedding_misses: int
    embedding_hit_ratio: float
    query_hits: int
    query_misses: int
    cache_errors: int
    evaluations: EvalRuns


async def gather(resources: Resources, mlflow_tracking_uri: str) -> HealthReport:
    """Run each check once; a failing check is reported, never raised."""
    checks: list[Check] = []
    try:
        revision, head = await current_revision(resources.engine), head_revision()
        checks.append(Check("database", True, "reachable"))
        checks.append(Check("migrations", revision == head, f"at {revision}, head {head}"))
    except Exception as exc:  # the page reports any failure of the database as down
        checks.append(Check("database", False, f"unavailable: {type(exc).__name__}"))
    cache = resources.cache
    if not cache.enabled:
        checks.append(Check("redis", True, "not configured: no caches, no rate limits"))
    else:
        up = await cache.ping()
        checks.append(Check("redis", up, "reachable" if up else "unreachable: serving uncached"))
    embeddings = resources.embeddings
    started = time.perf_counter()
    try:
        # Straight to the embedder, past the cache: this checks the model itself.
        await asyncio.wait_for(
            embeddings.scheduler.embed([_PROBE], Priority.INTERACTIVE), _EMBED_TIMEOUT_S
        )
        ms = (time.perf_counter() - started) * 1000
        detail = f"{embeddings.model}, {embeddings.dimension} dimensions, one text in {ms:.1f} ms"
        checks.append(Check("embedder", True, detail))
    except (EmbeddingError, TimeoutError, OSError) as exc:
        checks.append(Check("embedder", False, f"{embeddings.model}: {type(exc).__name__}"))
    stats = cache.stats
    return HealthReport(
        checks=checks,
        embedding_hits=stats.embedding_hits,
        embedding_misses=stats.embedding_misses,
        embedding_hit_ratio=stats.embedding_hit_ratio(),
        query_hits=stats.query_hits,
        query_misses=stats.query_misses,
        cache_errors=stats.errors,
        evaluations=await last_runs(mlflow_tracking_uri),
    )
