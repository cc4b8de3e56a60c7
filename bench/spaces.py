"""`python -m bench.spaces --size 10k`: what reading two shared spaces adds to a query (issue 43).

The bench_<size> store of bench.rls, plus two shared spaces of `--space-size` memories each
(copies of a few users' memories, vectors and all, indexed by the service's own keyword
index). Every sampled user is granted read on both. The same questions then go through the
service's QueryService as the service role, interleaved in a seeded random order per question:

- user alone: the user's memory (how a query runs without X-Spaces);
- user + 2 spaces: the same request naming both spaces (each read on its own, ranked as one).

No query cache (a query that reads spaces is never cached). Query vectors are computed up front
(the database and ranking stages alone), or with `--embed` by the local model inside each
request, as a request is served when its question is not in the vector cache. Printed: wall ms
per mode (p50, p95), the in-process CPU per query (the service's Python and the model), the
Postgres backends' CPU per query (/proc/<pid>/schedstat of every backend of the server, read
before and after each query), and the ratios of one run. Indicative on a shared machine:
compare the two rows of one run, not runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import psutil
import typer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import Cache
from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import create_engine
from app.domain import MemoryScope, space_owner
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.roles import service_engine
from app.runtime import query_config
from app.services.embedding import EmbeddingService
from app.services.query import QueryRequest, QueryService
from bench.drive import percentiles
from bench.inprocess import prepared
from bench.options import ROOT, parse_size

cli = typer.Typer(add_completion=False)

SPACES = ("bench-team", "bench-family")


async def add_spaces(url: str, users: list[str], size: int) -> None:
    """The two spaces (made again), each with `size` memories copied from stored users', and a
    read grant for each of `users`."""
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for n, space in enumerate(SPACES):
                owner = space_owner(space)
                for table in ("search_postings", "search_stats", "memory_items"):
                    await conn.execute(
                        text(f"DELETE FROM {table} WHERE user_id = :o"), {"o": owner}
                    )
                await conn.execute(text("DELETE FROM spaces WHERE id = :s"), {"s": space})
                await conn.execute(text("INSERT INTO spaces (id) VALUES (:s)"), {"s": space})
                rows = await conn.execute(
                    text(
                        "INSERT INTO memory_items (id, user_id, content, content_hash, type, "
                        "embedding, embedding_model) "
                        "SELECT gen_random_uuid(), CAST(:o AS text), m.content, "
                        "md5(m.content || CAST(:o AS text) || m.id::text), m.type, m.embedding, "
                        "m.embedding_model FROM memory_items AS m "
                        "WHERE m.user_id NOT LIKE 'space:%' ORDER BY m.id OFFSET :skip LIMIT :n "
                        "RETURNING id, content"
                    ),
                    {"o": owner, "skip": n * size, "n": size},
                )
                docs = [Document(r.id, Source.MEMORY, r.content) for r in rows]
                async with AsyncSession(bind=conn) as session:
                    await SearchIndexRepository(session).index(owner, docs)
                    await session.flush()
                await conn.execute(
                    text(
                        "INSERT INTO space_members (space_id, user_id, access) "
                        "SELECT :s, u, 'read' FROM unnest(CAST(:users AS text[])) AS u "
                        "ON CONFLICT DO NOTHING"
                    ),
                    {"s": space, "users": users},
                )
            await conn.execute(text("ANALYZE memory_items, search_postings, search_stats"))
    finally:
        await engine.dispose()


async def run(
    size: int, queries: int, out: Path, big_size: int, space_size: int, embed: bool = False
) -> dict[str, Any]:
    async with prepared(size, queries, out, big_size) as bench:
        url = bench.store.db.url
        users = sorted({q.user_id for q in bench.sample})
        await add_spaces(url, users, space_size)
        settings = load_settings(rate_limit_per_minute=0)
        engine = await service_engine(url, pool_size=6)
        embeddings = EmbeddingService(LocalEmbedder()) if embed else bench.embeddings
        service = QueryService(engine, embeddings, Cache.from_url(None), query_config(settings))
        modes = {"user alone": (), "user + 2 spaces": SPACES}
        wall: dict[str, list[float]] = {m: [] for m in modes}
        cpu: dict[str, list[float]] = {m: [] for m in modes}
        pg: dict[str, list[float]] = {m: [] for m in modes}
        postmaster = int((out / "pg" / "pg" / "postmaster.pid").read_text().split()[0])
        shared_items = 0
        rng = np.random.default_rng(42)
        try:
            for warm in (True, False):
                for query in bench.sample:
                    order = list(modes)
                    rng.shuffle(order)
                    for mode in order:
                        scope = MemoryScope(query.user_id, spaces=modes[mode])
                        request = QueryRequest(
                            user_id=query.user_id,
                            query=query.text,
                            limit=10,
                            min_score=0.0,
                            memory=scope if modes[mode] else None,
                        )
                        pg0 = backends_ms(postmaster)
                        started, cpu0 = time.perf_counter(), time.process_time()
                        result = await service.query(request)
                        elapsed = (time.perf_counter() - started) * 1000
                        used = (time.process_time() - cpu0) * 1000
                        pg1 = backends_ms(postmaster)
                        if result.error is not None:
                            raise RuntimeError(f"query failed: {result.error}")
                        if warm:
                            continue
                        wall[mode].append(elapsed)
                        cpu[mode].append(used)
                        pg[mode].append(sum(v - pg0.get(p, 0.0) for p, v in pg1.items()))
                        shared_items += sum(1 for i in result.items if i.space is not None)
        finally:
            await engine.dispose()
        return {
            "wall": wall,
            "cpu": cpu,
            "pg": pg,
            "shared_items": shared_items,
            "users": len(users),
        }


def backends_ms(postmaster: int) -> dict[int, float]:
    """CPU ms so far of each process under the postmaster (its backends), from schedstat."""
    out: dict[int, float] = {}
    for child in psutil.Process(postmaster).children():
        with contextlib.suppress(OSError), open(f"/proc/{child.pid}/schedstat") as f:
            out[child.pid] = int(f.read().split()[0]) / 1e6
    return out


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="questions (each asked in both modes)")] = 200,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    space_size: Annotated[int, typer.Option(help="memories in each space")] = 300,
    embed: Annotated[bool, typer.Option(help="embed each question in the request")] = False,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """query_memory with and without two shared spaces: wall ms, in-process CPU, ratios."""
    result = asyncio.run(run(parse_size(size), queries, out, big_size, space_size, embed))
    typer.echo(f"{'mode':16} {'n':>4} {'p50':>7} {'p95':>7} {'cpu ms':>7} {'pg ms':>7}")
    for mode, values in result["wall"].items():
        p = percentiles(values)
        typer.echo(
            f"{mode:16} {len(values):4d} {p['p50']:7.2f} {p['p95']:7.2f} "
            f"{np.mean(result['cpu'][mode]):7.2f} {np.mean(result['pg'][mode]):7.2f}"
        )
    alone, shared = result["wall"]["user alone"], result["wall"]["user + 2 spaces"]
    pa, ps = percentiles(alone), percentiles(shared)
    cpu_ratio = np.mean(result["cpu"]["user + 2 spaces"]) / np.mean(result["cpu"]["user alone"])
    pg_ratio = np.mean(result["pg"]["user + 2 spaces"]) / np.mean(result["pg"]["user alone"])
    both = [
        np.mean(result["cpu"][m]) + np.mean(result["pg"][m])
        for m in ("user alone", "user + 2 spaces")
    ]
    typer.echo(
        f"spaces / alone: p50 {ps['p50'] / pa['p50']:.2f}x, p95 {ps['p95'] / pa['p95']:.2f}x, "
        f"in-process CPU {cpu_ratio:.2f}x, Postgres CPU {pg_ratio:.2f}x, both "
        f"{both[1] / both[0]:.2f}x; {result['shared_items']} shared items returned "
        f"over {len(shared)} queries of {result['users']} users"
    )


if __name__ == "__main__":
    cli()
