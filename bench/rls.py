"""`python -m bench.rls --size 10k`: what row-level security costs the query path.

The same queries go through the service's QueryService (keyword and vector arms on two
connections, fusion, packing) twice, interleaved in a seeded random order per query:

- rls on: as the service role, which the policies bind (how the service runs);
- rls off: as the server's superuser, which bypasses them (how the service ran before).

Both run the same code, so both send the one scope statement per transaction (app/db.py: the
SET LOCALs of pgrecall_set_local); its round trip is timed on its own and printed too. Query
vectors are computed once up front (the model is the same in both modes and would only add
noise). Wall times on whatever else the machine
runs: indicative, not a benchmark result; compare the two columns of one run, not runs.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from sqlalchemy import text

from app.adapters.cache import Cache
from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import SET_LOCAL, create_engine, create_sessionmaker, set_local_params, user_session
from app.embedded import EmbeddedPostgres
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user
from app.runtime import query_config
from app.services.embedding import EmbeddingService
from app.services.query import QueryRequest, QueryService
from bench.drive import BenchQuery, make_queries, percentiles
from bench.options import ROOT, parse_size
from bench.store import build_store

cli = typer.Typer(add_completion=False)


class _Precomputed:
    """The local model's vectors for the benchmark's questions, computed before timing."""

    def __init__(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        self.model = model
        self.dimension = 384
        self.vectors = vectors

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vectors[t] for t in texts])


async def _time(service: QueryService, query: BenchQuery) -> float:
    request = QueryRequest(user_id=query.user_id, query=query.text, limit=10, min_score=0.0)
    started = time.perf_counter()
    result = await service.query(request)
    elapsed = (time.perf_counter() - started) * 1000
    if result.error is not None:
        raise RuntimeError(f"query failed in the benchmark: {result.error}")
    return elapsed


async def run(size: int, queries: int, out: Path, big_size: int) -> dict[str, list[float]]:
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
        settings = load_settings(rate_limit_per_minute=0)
        cache = Cache.from_url(None)
        engines = {
            "rls on": create_engine(with_user(store.db.url, DEFAULT_APP_ROLE), pool_size=4),
            "rls off": create_engine(store.db.url, pool_size=4),
        }
        services = {
            mode: QueryService(create_sessionmaker(e), embeddings, cache, query_config(settings))
            for mode, e in engines.items()
        }
        times: dict[str, list[float]] = {mode: [] for mode in services}
        times["scope statement round trip"] = []
        rng = random.Random(42)
        try:
            for warm in (True, False):  # the first pass fills buffers and plan caches
                for query in sample:
                    modes = list(services)
                    rng.shuffle(modes)
                    for mode in modes:
                        elapsed = await _time(services[mode], query)
                        if not warm:
                            times[mode].append(elapsed)
                    if not warm:
                        times["scope statement round trip"].append(
                            await _scope_statement_ms(services["rls on"], query.user_id)
                        )
        finally:
            for engine in engines.values():
                await engine.dispose()
        return times
    finally:
        if pg.started_here:
            await asyncio.to_thread(pg.stop)


async def _scope_statement_ms(service: QueryService, user_id: str) -> float:
    """One extra round trip of the statement that names the user (already in both modes)."""
    async with user_session(service.sessionmaker, user_id) as session, session.begin():
        await session.execute(text("SELECT 1"))  # the transaction's scope statement runs first
        started = time.perf_counter()
        await session.execute(SET_LOCAL, set_local_params({"pgrecall.user_id": user_id}))
        return (time.perf_counter() - started) * 1000


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="queries per mode")] = 200,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """query_memory latency (ms) as the service role (RLS on) and as a superuser (RLS off)."""
    times = asyncio.run(run(parse_size(size), queries, out, big_size))
    typer.echo(f"{'mode':22} {'n':>4} {'p50':>7} {'p95':>7} {'p99':>7} {'mean':>7}")
    for mode, values in times.items():
        p = percentiles(values)
        typer.echo(
            f"{mode:22} {len(values):4d} {p['p50']:7.2f} {p['p95']:7.2f} {p['p99']:7.2f} "
            f"{p['mean']:7.2f}"
        )
    on, off = np.median(times["rls on"]), np.median(times["rls off"])
    typer.echo(f"median cost of RLS: {on - off:+.2f} ms ({(on / off - 1) * 100:+.1f}%); indicative")


if __name__ == "__main__":
    cli()
