"""Liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from app.extraction.stats import extraction_metrics
from app.http.deps import ResourcesDep, require_service_key
from app.migrate import current_revision, head_revision

router = APIRouter(tags=["health"])


@router.get("/health")
async def health() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/ready")
async def ready(resources: ResourcesDep) -> JSONResponse:
    """Postgres reachable and migrated to head; Redis state reported (it is optional)."""
    checks: dict[str, object] = {}
    ok = True
    try:
        revision = await current_revision(resources.engine)
        head = head_revision()
        checks["database"] = "ok"
        checks["migrations"] = {"current": revision, "head": head}
        ok = revision == head
    except Exception as exc:  # readiness reports any failure as not ready
        checks["database"] = f"unavailable: {type(exc).__name__}"
        ok = False
    if resources.cache.enabled:
        checks["redis"] = "ok" if await resources.cache.ping() else "unavailable (degraded)"
    else:
        checks["redis"] = "disabled"
    return JSONResponse(status_code=200 if ok else 503, content={"ready": ok, "checks": checks})


@router.get("/metrics", dependencies=[Depends(require_service_key)])
async def metrics(resources: ResourcesDep, request: Request) -> dict[str, object]:
    """Process counters: cache hits and misses (embedding and query caches), Redis state;
    extraction's jobs and tokens (per job, per user today) when it is on."""
    stats = resources.cache.stats
    pipeline = getattr(request.app.state, "extraction", None)  # app.main's, when it is on
    extraction = await extraction_metrics(resources.sessionmaker, pipeline)
    return {
        "extraction": extraction,
        "redis": {"enabled": resources.cache.enabled, "available": resources.cache.available},
        "embedding_cache": {
            "hits": stats.embedding_hits,
            "misses": stats.embedding_misses,
            "hit_ratio": round(stats.embedding_hit_ratio(), 4),
        },
        "query_cache": {"hits": stats.query_hits, "misses": stats.query_misses},
        "cache_errors": stats.errors,
    }
