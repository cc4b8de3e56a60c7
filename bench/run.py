"""One benchmark run per store size: build the store, start the server, drive, measure recall."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt

from app.config import Settings, load_settings
from app.db import create_engine, create_sessionmaker
from app.repositories.maintenance import Table
from app.retrieval.presets import get_preset
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user
from app.services.reindex import OwnIndexBands, reindex_users
from bench.drive import BenchQuery, make_queries, run_level, timing_breakdown
from bench.recall import VectorSearch, measure_recall
from bench.report import result_path, write_result
from bench.server import Server, cpu_seconds, start_server
from bench.store import Store, build_store
from pgrecall.client import NO_RETRY, AsyncClient

log = logging.getLogger("bench")
Embed = Callable[[list[str]], npt.NDArray[np.float32]]
_MB = 1024 * 1024


@dataclass(frozen=True)
class BenchConfig:
    out_dir: Path
    levels: Sequence[tuple[int, int]] = ((1, 300), (8, 1000), (32, 1000))  # (concurrency, requests)
    time_cap_s: float = 120.0
    warmup: int = 30
    queries: int = 2000
    recall_queries: int = 300
    timing_samples: int = 100
    big_share: float = 0.2
    seed: int = 42
    distinct: int = 100_000  # texts embedded for real; bigger stores reuse them across users
    big_size: int = 50_000
    reuse: bool = True
    workers: int = 1
    settings: Mapping[str, str] = field(default_factory=dict)  # PGRECALL_* overrides
    tag: str | None = None


def _targets(items: int, levels: list[dict[str, Any]], recall: dict[str, Any]) -> dict[str, Any]:
    budget = 30.0 if items <= 100_000 else 60.0
    c1 = next((lvl for lvl in levels if lvl["concurrency"] == 1), None)
    p95 = c1["latency_ms"].get("p95") if c1 else None
    return {
        "p95_c1_budget_ms": budget,
        "p95_c1_ms": p95,
        "p95_c1_met": p95 is not None and p95 <= budget,
        # The ANN path on its own too: exact-path queries score 1.0 and would hide it.
        "recall_at_10_met": min(
            recall["recall_at_10"] or 0.0, recall["ann_path_recall_at_10"] or 1.0
        )
        >= 0.95,
        "zero_short_result_sets": recall["short_result_sets"] == 0,
    }


async def _store_facts(store: Store) -> dict[str, Any]:
    conn = await asyncpg.connect(store.db.dsn)
    try:
        size = await conn.fetchval("SELECT pg_database_size(current_database())")
        version = await conn.fetchval("SHOW server_version")
        pgvector = await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
    finally:
        await conn.close()
    small = sorted(u.size for u in store.users if not u.big)
    return {
        "items": store.items,
        "distinct_texts": len(store.memories),
        "users": len(store.users),
        "big_users": [{"user_id": u.user_id, "items": u.size} for u in store.users if u.big],
        "small_user_items": {"min": small[0], "median": small[len(small) // 2], "max": small[-1]}
        if small
        else {},
        "ivfflat_lists": store.lists,
        "database_mb": round(size / _MB),
        "postgres": version,
        "pgvector": pgvector,
        "load_seconds": store.load_seconds,
    }


@dataclass(frozen=True)
class _Cpu:
    """CPU seconds so far, per process: the service, its Postgres backends, the load generator."""

    service: dict[int, float]
    postgres: dict[int, float]
    client: float


async def _cpu(server: Server, dsn: str) -> _Cpu:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgrecall' "
            "AND datname = current_database()"
        )
    finally:
        await conn.close()
    client = sum(cpu_seconds([os.getpid()]).values())
    return _Cpu(cpu_seconds(server.pids()), cpu_seconds([r["pid"] for r in rows]), client)


def _cpu_per_request(before: _Cpu, after: _Cpu, requests: int) -> dict[str, float]:
    """CPU cost per request: robust to other load on the machine, unlike latency."""

    def per_request(start: dict[int, float], end: dict[int, float]) -> float:
        # Backends opened during the level started from zero.
        used = sum(t - start.get(pid, 0.0) for pid, t in end.items())
        return round(used * 1000 / max(requests, 1), 2)

    out = {
        "service": per_request(before.service, after.service),
        "postgres": per_request(before.postgres, after.postgres),
    }
    out["total"] = round(out["service"] + out["postgres"], 2)
    out["load_generator"] = per_request({0: before.client}, {0: after.client})
    return out


async def measured_level(
    client: AsyncClient,
    server: Server,
    dsn: str,
    queries: list[BenchQuery],
    *,
    concurrency: int,
    requests: int,
    time_cap_s: float,
    offset: int = 0,
    keep_latencies: bool = False,
) -> dict[str, Any]:
    """`run_level`'s figures and the level's CPU per request (`cpu_ms_per_request`: the
    service's processes, its Postgres backends on `dsn`, the load generator)."""
    before = await _cpu(server, dsn)
    level = await run_level(
        client,
        queries,
        concurrency=concurrency,
        requests=requests,
        time_cap_s=time_cap_s,
        offset=offset,
        keep_latencies=keep_latencies,
    )
    level["cpu_ms_per_request"] = _cpu_per_request(
        before, await _cpu(server, dsn), level["completed"]
    )
    return level


async def user_indexes(
    url: str, settings: Settings, tables: tuple[Table, ...] = ("memory_items",)
) -> dict[str, int]:
    """What `pgrecall reindex --if-stale` does to the users' own indexes under these settings
    (ivfflat for users above exact_search_max_items, HNSW for those under it with more than
    user_hnsw_min_items; all dropped with user_vector_indexes off)."""
    engine = create_engine(url, pool_size=1, statement_timeout_ms=3_600_000)
    out = {"users": 0, "built": 0, "fresh": 0, "dropped": 0}
    try:
        for table in tables:
            async with create_sessionmaker(engine)() as session, session.begin():
                done = await reindex_users(
                    session,
                    table,
                    **OwnIndexBands.of(
                        enabled=settings.user_vector_indexes,
                        exact_max_items=settings.exact_search_max_items,
                        hnsw_min_items=settings.user_hnsw_min_items,
                    )._asdict(),
                    only_if_stale=True,
                )
            for key in out:
                out[key] += getattr(done, key)
    finally:
        await engine.dispose()
    return out


async def run_size(server_url: str, items: int, embed: Embed, cfg: BenchConfig) -> dict[str, Any]:
    """Benchmark one store size; writes bench/out/results-<items>[-tag].json and returns it."""
    store = await build_store(
        server_url,
        items,
        seed=cfg.seed,
        embed=embed,
        out_dir=cfg.out_dir,
        distinct=cfg.distinct,
        reuse=cfg.reuse,
        big_size=cfg.big_size,
    )
    settings = load_settings(**dict(cfg.settings))  # the environment plus the overrides
    per_user = await user_indexes(store.db.url, settings)
    log.info("%s: per-user vector indexes %s", store.db.name, per_user)
    queries = make_queries(store, cfg.queries, big_share=cfg.big_share, seed=cfg.seed)
    suffix = f"-{cfg.tag}" if cfg.tag else ""
    # The server runs as the service role, bound by row-level security, as in production.
    await ensure_service_role(store.db.url, DEFAULT_APP_ROLE, create=True)
    server = await start_server(
        with_user(store.db.url, DEFAULT_APP_ROLE),
        cfg.out_dir / f"server-{items}{suffix}.log",
        cfg.settings,
        workers=cfg.workers,
    )
    levels: list[dict[str, Any]] = []
    idle_rss = server.rss()
    sampler = asyncio.create_task(server.sample_rss())
    try:
        async with AsyncClient(
            server.base_url, timeout=30.0, retry=NO_RETRY, max_connections=256
        ) as client:
            await run_level(
                client,
                queries,
                concurrency=1,
                requests=cfg.warmup,
                time_cap_s=60,
                offset=len(queries) // 2,
            )
            breakdown = await timing_breakdown(
                client,
                queries[-cfg.timing_samples :],
                cfg.timing_samples,
                limit=settings.max_results,
                min_score=settings.min_relevance,
            )
            for concurrency, requests in cfg.levels:
                load = os.getloadavg()[0]
                server.peak_rss = 0
                level = await measured_level(
                    client,
                    server,
                    store.db.dsn,
                    queries,
                    concurrency=concurrency,
                    requests=requests,
                    time_cap_s=cfg.time_cap_s,
                )
                level["rss_mb_peak"] = round(max(server.peak_rss, server.rss()) / _MB)
                level["loadavg_1m_before"] = round(load, 2)
                levels.append(level)
                log.info(
                    "%d items, concurrency %d: %s, %s req/s",
                    items,
                    concurrency,
                    level["latency_ms"],
                    level["throughput_rps"],
                )
        final_rss = server.rss()
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        server.stop()
    preset = get_preset(settings.retrieval_preset)
    recall = await measure_recall(
        store.db.url,
        store.db.dsn,
        queries[: cfg.recall_queries],
        embed,
        VectorSearch(
            settings.exact_search_max_items,
            settings.ivfflat_probes,
            settings.ivfflat_max_probes,
            model=settings.embedding_model,
            candidates=preset.candidates,
            ivfflat_probe_share=settings.ivfflat_probe_share,
        ),
    )
    log.info("%d items: recall %s", items, recall)
    result = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "tag": cfg.tag,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "settings": {
            "exact_search_max_items": settings.exact_search_max_items,
            "ivfflat_probes": settings.ivfflat_probes,
            "ivfflat_max_probes": settings.ivfflat_max_probes,
            "ivfflat_probe_share": settings.ivfflat_probe_share,
            "user_vector_indexes": per_user,
            "db_pool_size": settings.db_pool_size,
            "embedding_threads": settings.embedding_threads,
            "workers": cfg.workers,
            "retrieval_preset": settings.retrieval_preset,
            "max_results": settings.max_results,
            "overrides": dict(cfg.settings),
        },
        "store": await _store_facts(store),
        "server": {
            "startup_s": round(server.startup_s, 1),
            "rss_mb_idle": round(idle_rss / _MB),
            "rss_mb_after": round(final_rss / _MB),
        },
        "breakdown_c1": breakdown,
        "levels": levels,
        "recall": recall,
    }
    result["targets"] = _targets(items, levels, recall)
    write_result(result_path(cfg.out_dir, items, cfg.tag), result)
    return result
