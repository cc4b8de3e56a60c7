"""`python -m bench.profile --size 100k`: where one query_memory spends its time, statement
by statement, for small and big users, on a store the benchmark loaded.

Runs the query path's own repository calls in the order QueryService makes them (embed, keyword,
item count and planner settings, vector per source, fetch), each timed, in one transaction per
query like the service. With --overlap it also times the same calls arranged as
`gather(keyword, embed -> vector)` on two connections: what reordering the service would gain.
Wall time per step, so run it on a quiet machine; it is a profile, not the benchmark.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.embedder import LocalEmbedder
from app.config import Settings, load_settings
from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.repositories.retrieval import RetrievalRepository, vector_search_settings
from app.retrieval.names import query_names
from app.retrieval.presets import get_preset
from app.services.query import ann_probes
from bench.drive import BenchQuery, make_queries
from bench.options import ROOT, parse_settings, parse_size
from bench.store import build_store

cli = typer.Typer(add_completion=False)
Times = dict[tuple[str, str], list[float]]


@dataclass
class _Path:
    """The query path's repository calls with the service's settings."""

    embedder: LocalEmbedder
    sessionmaker: async_sessionmaker[AsyncSession]
    settings: Settings

    @property
    def candidates(self) -> int:
        return get_preset(self.settings.retrieval_preset).candidates

    async def embed(self, text: str) -> Any:
        return (await self.embedder.embed([text]))[0]

    async def keyword(self, repo: RetrievalRepository, query: BenchQuery) -> None:
        preset = get_preset(self.settings.retrieval_preset)
        await repo.keyword(
            query.user_id, query.text, limit=self.candidates, memories=True, messages=True,
            types=None, k1=preset.bm25_k1, b=preset.bm25_b, names=query_names(query.text),
        )  # fmt: skip

    async def choose_path(self, repo: RetrievalRepository, query: BenchQuery) -> bool:
        """Exact or ANN by the user's item count, and the planner settings: once per query."""
        items = await repo.item_count(query.user_id)
        exact = items <= self.settings.exact_search_max_items
        await repo.set_vector_search(
            vector_search_settings(
                exact=exact,
                probes=ann_probes(
                    items, self.settings.ivfflat_probes, self.settings.ivfflat_probe_share
                ),
                max_probes=self.settings.ivfflat_max_probes,
            )
        )
        return exact

    async def vector(
        self,
        repo: RetrievalRepository,
        query: BenchQuery,
        vector: Any,
        *,
        exact: bool,
        memories: bool,
    ) -> dict[Any, float]:
        return await repo.vector(
            query.user_id, vector, limit=self.candidates, memories=memories,
            messages=not memories, types=None, exact=exact, model=self.embedder.model,
        )  # fmt: skip


async def _steps(path: _Path, query: BenchQuery) -> list[tuple[str, float]]:
    """One query, sequential as the service runs it, timed per step."""
    t = time.perf_counter()
    vector = await path.embed(query.text)
    steps = [("embed", time.perf_counter() - t)]
    async with path.sessionmaker() as session, session.begin():
        repo = RetrievalRepository(session)
        t = time.perf_counter()
        await path.keyword(repo, query)
        steps.append(("keyword", time.perf_counter() - t))
        t = time.perf_counter()
        exact = await path.choose_path(repo, query)
        steps.append(("count+settings", time.perf_counter() - t))
        hits: dict[Any, float] = {}
        for label, memories in (("vector memories", True), ("vector messages", False)):
            t = time.perf_counter()
            hits.update(await path.vector(repo, query, vector, exact=exact, memories=memories))
            steps.append((label, time.perf_counter() - t))
        t = time.perf_counter()
        await repo.fetch(query.user_id, list(hits)[:30])
        steps.append(("fetch", time.perf_counter() - t))
    steps.append(("sequential total", sum(s for _, s in steps)))
    return steps


async def _overlapped(path: _Path, query: BenchQuery) -> float:
    """The same calls as gather(keyword, embed -> vectors) on two connections, then fetch."""
    t = time.perf_counter()

    async def keyword() -> None:
        async with path.sessionmaker() as session, session.begin():
            await path.keyword(RetrievalRepository(session), query)

    async def vectors() -> dict[Any, float]:
        vector = await path.embed(query.text)
        async with path.sessionmaker() as session, session.begin():
            repo = RetrievalRepository(session)
            exact = await path.choose_path(repo, query)
            hits = await path.vector(repo, query, vector, exact=exact, memories=True)
            return hits | await path.vector(repo, query, vector, exact=exact, memories=False)

    _, hits = await asyncio.gather(keyword(), vectors())
    async with path.sessionmaker() as session, session.begin():
        await RetrievalRepository(session).fetch(query.user_id, list(hits)[:30])
    return time.perf_counter() - t


async def profile(
    server_url: str, items: int, queries: int, overrides: dict[str, str], out: Path,
    *, overlap: bool,
) -> Times:  # fmt: skip
    """Milliseconds per (user class, step), second pass over the queries (warm caches)."""
    embedder = LocalEmbedder()
    store = await build_store(server_url, items, seed=42, embed=embedder.embed_sync, out_dir=out)
    sample = make_queries(store, 2000, big_share=0.2, seed=42)[:queries]
    engine = create_engine(store.db.url, pool_size=4)
    path = _Path(embedder, create_sessionmaker(engine), load_settings(**overrides))
    times: Times = defaultdict(list)
    try:
        for _ in range(2):  # the first pass warms buffers and plan caches
            times.clear()
            for query in sample:
                kind = "big" if query.big else "small"
                for step, seconds in await _steps(path, query):
                    times[(kind, step)].append(seconds * 1000)
                if overlap:
                    times[(kind, "overlapped total")].append(await _overlapped(path, query) * 1000)
    finally:
        await engine.dispose()
    return times


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="a store the benchmark loaded")] = "100k",
    queries: Annotated[int, typer.Option()] = 200,
    overlap: Annotated[bool, typer.Option(help="also time gather(keyword, embed->vector)")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="KEY=VALUE")] = None,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """Per-statement timings of the query path, p50/p95 per user class."""

    async def run() -> Times:
        pg = EmbeddedPostgres(out / "pg")
        url = await asyncio.to_thread(pg.start)
        try:
            overrides = parse_settings(set_ or [])
            return await profile(url, parse_size(size), queries, overrides, out, overlap=overlap)
        finally:
            if pg.started_here:
                await asyncio.to_thread(pg.stop)

    times = asyncio.run(run())
    typer.echo(f"{'user':6} {'step':17} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'mean ms':>8}")
    for (kind, step), values in sorted(times.items()):
        arr = np.asarray(values)
        typer.echo(
            f"{kind:6} {step:17} {len(arr):4d} {np.percentile(arr, 50):8.2f} "
            f"{np.percentile(arr, 95):8.2f} {arr.mean():8.2f}"
        )


if __name__ == "__main__":
    cli()
