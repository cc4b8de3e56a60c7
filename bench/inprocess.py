"""The set-up the in-process benchmarks share (bench.rls, bench.usage).

A bench_<size> store on the embedded server, a seeded sample of its queries and their vectors
computed once up front (the model is the same in every mode and would only add noise), and
one timed query through the service's QueryService.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import typer

from app.adapters.embedder import LocalEmbedder
from app.embedded import EmbeddedPostgres
from app.roles import DEFAULT_APP_ROLE, ensure_service_role
from app.services.embedding import EmbeddingService
from app.services.query import QueryRequest, QueryResult, QueryService
from bench.drive import BenchQuery, make_queries, percentiles
from bench.store import Store, build_store


class Precomputed:
    """The local model's vectors for the benchmark's questions, computed before timing."""

    def __init__(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        self.model = model
        self.dimension = 384
        self.vectors = vectors

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


@dataclass(frozen=True)
class Prepared:
    store: Store
    sample: list[BenchQuery]
    embeddings: EmbeddingService


@asynccontextmanager
async def prepared(size: int, queries: int, out: Path, big_size: int) -> AsyncIterator[Prepared]:
    """The store (loaded unless reusable), `queries` sampled questions and their vectors."""
    pg = EmbeddedPostgres(out / "pg")
    server = await asyncio.to_thread(pg.start)
    embedder = LocalEmbedder()
    try:
        store = await build_store(
            server, size, seed=42, embed=embedder.embed_sync, out_dir=out, big_size=big_size
        )
        await ensure_service_role(store.db.url, DEFAULT_APP_ROLE, create=True)
        sample = make_queries(store, queries, big_share=0.2, seed=42)
        texts = sorted({q.text for q in sample})
        vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
        yield Prepared(store, sample, EmbeddingService(Precomputed(embedder.model, vectors)))
    finally:
        if pg.started_here:
            await asyncio.to_thread(pg.stop)


async def timed_query(service: QueryService, query: BenchQuery) -> tuple[float, QueryResult]:
    """One query_memory answer (limit 10, no floor) and its wall time in ms."""
    request = QueryRequest(user_id=query.user_id, query=query.text, limit=10, min_score=0.0)
    started = time.perf_counter()
    result = await service.query(request)
    elapsed = (time.perf_counter() - started) * 1000
    if result.error is not None:
        raise RuntimeError(f"query failed in the benchmark: {result.error}")
    return elapsed, result


def echo_table(times: Mapping[str, list[float]]) -> None:
    """One row per mode: n, p50, p95, p99 and mean in ms."""
    width = max(len(mode) for mode in times)
    typer.echo(f"{'mode':{width}} {'n':>4} {'p50':>7} {'p95':>7} {'p99':>7} {'mean':>7}")
    for mode, values in times.items():
        p = percentiles(values)
        typer.echo(
            f"{mode:{width}} {len(values):4d} {p['p50']:7.2f} {p['p95']:7.2f} {p['p99']:7.2f} "
            f"{p['mean']:7.2f}"
        )


async def interleaved(
    services: Mapping[str, QueryService],
    sample: Sequence[BenchQuery],
    *,
    after_warm: Callable[[], Awaitable[None]] | None = None,
    seed: int = 42,
) -> AsyncIterator[tuple[BenchQuery, str, float, QueryResult]]:
    """Each query through every mode in a seeded random order, twice; yields the second pass
    (the first fills buffers and plan caches; `after_warm` runs between) as (query, mode, ms,
    result)."""
    rng = random.Random(seed)
    for warm in (True, False):
        if not warm and after_warm is not None:
            await after_warm()
        for query in sample:
            modes = list(services)
            rng.shuffle(modes)
            for mode in modes:
                elapsed, result = await timed_query(services[mode], query)
                if not warm:
                    yield query, mode, elapsed, result
