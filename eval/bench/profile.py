"""`python -m eval.bench.profile --size 100k`: where one query_memory spends its time, statement
by statement, for small and big users, on a store the benchmark loaded.

Runs the query path's own repository calls in the order QueryService makes them (embed, keyword,
item count, planner settings, vector per source, fetch), each timed, in one transaction per query
like the service. Wall time per step, so run it on a quiet machine; it is a profile, not the
benchmark.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from app.adapters.embedder import LOCAL_MODEL_ID, LocalEmbedder
from app.config import load_settings
from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.repositories.retrieval import RetrievalRepository
from app.retrieval.presets import get_preset
from eval.bench.__main__ import ROOT, parse_settings, parse_size
from eval.bench.drive import make_queries
from eval.bench.store import build_store

cli = typer.Typer(add_completion=False)


async def profile(
    server_url: str, items: int, queries: int, overrides: dict[str, str], out: Path
) -> dict[tuple[str, str], list[float]]:
    """Milliseconds per (user class, step) over `queries` queries (second pass: warm caches)."""
    embedder = LocalEmbedder()
    settings = load_settings(**overrides)
    preset = get_preset(settings.retrieval_preset)
    store = await build_store(server_url, items, seed=42, embed=embedder.embed_sync, out_dir=out)
    sample = make_queries(store, 2000, big_share=0.2, seed=42)[:queries]
    engine = create_engine(store.db.url, pool_size=2)
    sessionmaker = create_sessionmaker(engine)
    n = preset.candidates
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    try:
        for _ in range(2):  # the first pass warms buffers and plan caches
            times.clear()
            for query in sample:
                kind = "big" if query.big else "small"
                t = time.perf_counter()
                vector = embedder.embed_sync([query.text])[0]
                steps = [("embed", time.perf_counter() - t)]
                async with sessionmaker() as session, session.begin():
                    repo = RetrievalRepository(session)
                    t = time.perf_counter()
                    await repo.keyword(
                        query.user_id,
                        query.text,
                        limit=n,
                        memories=True,
                        messages=True,
                        types=None,
                        k1=preset.bm25_k1,
                        b=preset.bm25_b,
                    )
                    steps.append(("keyword", time.perf_counter() - t))
                    t = time.perf_counter()
                    exact = await repo.item_count(query.user_id) <= settings.exact_search_max_items
                    await repo.set_vector_search(
                        exact=exact,
                        probes=settings.ivfflat_probes,
                        max_probes=settings.ivfflat_max_probes,
                    )
                    steps.append(("count+settings", time.perf_counter() - t))
                    hits = {}
                    for label, memories in (("vector memories", True), ("vector messages", False)):
                        t = time.perf_counter()
                        hits.update(
                            await repo.vector(
                                query.user_id,
                                vector,
                                limit=n,
                                memories=memories,
                                messages=not memories,
                                types=None,
                                exact=exact,
                                model=LOCAL_MODEL_ID,
                            )
                        )
                        steps.append((label, time.perf_counter() - t))
                    t = time.perf_counter()
                    await repo.fetch(query.user_id, list(hits)[:30])
                    steps.append(("fetch", time.perf_counter() - t))
                for step, seconds in steps:
                    times[(kind, step)].append(seconds * 1000)
    finally:
        await engine.dispose()
    return times


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="a store the benchmark loaded")] = "100k",
    queries: Annotated[int, typer.Option()] = 200,
    set_: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE")] = None,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """Per-statement timings of the query path, p50/p95 per user class."""

    async def run() -> dict[tuple[str, str], list[float]]:
        pg = EmbeddedPostgres(out / "pg")
        url = await asyncio.to_thread(pg.start)
        try:
            return await profile(url, parse_size(size), queries, parse_settings(set_ or []), out)
        finally:
            if pg.started_here:
                await asyncio.to_thread(pg.stop)

    times = asyncio.run(run())
    typer.echo(f"{'user':6} {'step':16} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}")
    for (kind, step), values in sorted(times.items()):
        arr = np.asarray(values)
        typer.echo(
            f"{kind:6} {step:16} {len(arr):4d} {np.percentile(arr, 50):8.2f} "
            f"{np.percentile(arr, 95):8.2f} {arr.mean():8.2f}"
        )


if __name__ == "__main__":
    cli()
