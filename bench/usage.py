"""`python -m bench.usage --size 10k`: what writing usage data costs query_memory.

The same queries go through the service's QueryService twice, interleaved in a seeded random
order per query: with the UsageRecorder (how the service runs: the memories an answer returned
are stamped by a background flush after it) and without. The latency of each answer is timed as
the caller sees it, so a flush running meanwhile shows up in the next answers' times. The
flush's own statements are timed too (mean and p95 per flush). Query vectors are computed once
up front. Wall times on a shared machine: compare the two columns of one run, not runs.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from app.adapters.cache import Cache
from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user
from app.runtime import query_config
from app.services.embedding import EmbeddingService
from app.services.query import QueryRequest, QueryService
from app.services.usage import UsageRecorder
from bench.drive import BenchQuery, make_queries, percentiles
from bench.options import ROOT, parse_size
from bench.rls import _Precomputed
from bench.store import build_store

cli = typer.Typer(add_completion=False)


class _TimedRecorder(UsageRecorder):
    """The service's recorder, timing each flush (all users pending at once)."""

    flushes: list[float]

    async def _flush(self) -> None:
        started = time.perf_counter()
        await super()._flush()
        self.flushes.append((time.perf_counter() - started) * 1000)


async def _time(service: QueryService, query: BenchQuery) -> tuple[float, int]:
    request = QueryRequest(user_id=query.user_id, query=query.text, limit=10, min_score=0.0)
    started = time.perf_counter()
    result = await service.query(request)
    elapsed = (time.perf_counter() - started) * 1000
    if result.error is not None:
        raise RuntimeError(f"query failed in the benchmark: {result.error}")
    return elapsed, sum(1 for i in result.items if i.source_kind == "memory")


async def run(
    size: int, queries: int, out: Path, big_size: int
) -> tuple[dict[str, list[float]], list[float], int]:
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
        embeddings = EmbeddingService(_Precomputed(embedder.model, vectors))
        config = query_config(load_settings(rate_limit_per_minute=0))
        cache = Cache.from_url(None)
        engine = create_engine(with_user(store.db.url, DEFAULT_APP_ROLE), pool_size=4)
        sessionmaker = create_sessionmaker(engine)
        recorder = _TimedRecorder(sessionmaker)
        recorder.flushes = []
        services = {
            "usage on": QueryService(sessionmaker, embeddings, cache, config, usage=recorder),
            "usage off": QueryService(sessionmaker, embeddings, cache, config),
        }
        times: dict[str, list[float]] = {mode: [] for mode in services}
        stamped = 0
        rng = random.Random(42)
        try:
            for warm in (True, False):  # the first pass fills buffers and plan caches
                for query in sample:
                    modes = list(services)
                    rng.shuffle(modes)
                    for mode in modes:
                        elapsed, memories = await _time(services[mode], query)
                        if not warm:
                            times[mode].append(elapsed)
                            stamped += memories if mode == "usage on" else 0
                if warm:
                    await recorder.drain()
                    recorder.flushes = []
            await recorder.drain()
        finally:
            await engine.dispose()
        return times, recorder.flushes, stamped
    finally:
        if pg.started_here:
            await asyncio.to_thread(pg.stop)


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="queries per mode")] = 200,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """query_memory latency (ms) with and without the usage write after each answer."""
    times, flushes, stamped = asyncio.run(run(parse_size(size), queries, out, big_size))
    typer.echo(f"{'mode':10} {'n':>4} {'p50':>7} {'p95':>7} {'p99':>7} {'mean':>7}")
    for mode, values in times.items():
        p = percentiles(values)
        typer.echo(
            f"{mode:10} {len(values):4d} {p['p50']:7.2f} {p['p95']:7.2f} {p['p99']:7.2f} "
            f"{p['mean']:7.2f}"
        )
    f = percentiles(flushes) if flushes else {"mean": 0.0, "p95": 0.0}
    typer.echo(
        f"flushes: {len(flushes)} for {len(times['usage on'])} answers ({stamped} memories "
        f"stamped), {f['mean']:.2f} ms mean, {f['p95']:.2f} ms p95 each (off the answer's path)"
    )
    on, off = np.median(times["usage on"]), np.median(times["usage off"])
    typer.echo(f"median cost of usage data: {on - off:+.2f} ms ({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    cli()
