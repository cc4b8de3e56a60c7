"""`python -m bench.spaces --size 10k`: what reading two shared spaces adds to a query (issue 43).

The bench_<size> store of bench.rls (`--store synthetic`: memories), or bench.real's
bench_real_<size> (`--store real`: LoCoMo conversation turns, its users' own questions), plus two
shared spaces of `--space-size` memories each (copies of stored memories or turns, vectors and
all, indexed by the service's own keyword index). Every sampled user is granted read on both.
The same questions then go through the service's QueryService as the service role (or, with
`--served`, over HTTP to `pgrecall serve` running as the service role, through the Python
client's POST /v1/memory/query), interleaved in a seeded random order per question:

- user alone: the user's memory (how a query runs without X-Spaces);
- user + 2 spaces: the same request naming both spaces (one statement per stage for both,
  ranked with the user's as one set).

No query cache (a query that reads spaces is never cached; the served mode runs without Redis).
In process, query vectors are computed up front (the database and ranking stages alone), or
with `--embed` by the local model inside each request, as a request is served when its question
is not in the vector cache; served, every request embeds. Printed: wall ms per mode (p50, p95),
the service's CPU per query (in process: this process; served: the server's processes), the
Postgres backends' CPU per query (/proc/<pid>/schedstat of every backend of the server, read
before and after each query), and the ratios of one run. Indicative on a shared machine:
compare the two rows of one run, not runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.adapters.cache import Cache
from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import create_engine
from app.domain import MemoryScope, space_owner
from app.embedded import EmbeddedPostgres
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, service_engine, with_user
from app.runtime import query_config
from app.services.embedding import EmbeddingService
from app.services.query import QueryRequest, QueryService
from bench.drive import BenchQuery
from bench.inprocess import prepared
from bench.modes import echo_modes, measure, postmaster_pid, ratios
from bench.options import ROOT, parse_size
from bench.real import default_big_size, real_store, settle
from bench.server import cpu_seconds, start_server
from bench.store import Database
from pgrecall.client import NO_RETRY, AsyncClient

cli = typer.Typer(add_completion=False)

SPACES = ("bench-team", "bench-family")


@dataclass(frozen=True)
class Workload:
    """The store the questions are asked of: its database, the sampled questions, their vectors
    computed up front (the synthetic store's; None: embedded in the request), and the table the
    spaces' memories are copied from."""

    db: Database
    sample: list[BenchQuery]
    embeddings: EmbeddingService | None
    source: str


@asynccontextmanager
async def workload(
    kind: str, size: int, queries: int, out: Path, big_size: int
) -> AsyncIterator[Workload]:
    """`synthetic`: bench.rls's bench_<size> store of memories; `real`: bench.real's store of
    LoCoMo conversation turns (bench_real_<size>) and its users' own questions."""
    if kind == "synthetic":
        async with prepared(size, queries, out, big_size) as bench:
            yield Workload(bench.store.db, bench.sample, bench.embeddings, "memory_items")
        return
    pg = EmbeddedPostgres(out / "pg")
    server_url = await asyncio.to_thread(pg.start)
    try:
        db, _, questions, _ = await real_store(server_url, size, out, 42, default_big_size(size))
        await ensure_service_role(db.url, DEFAULT_APP_ROLE, create=True)
        yield Workload(db, questions[:queries], None, "messages")
    finally:
        if pg.started_here:
            await asyncio.to_thread(pg.stop)


async def add_spaces(
    db: Database, users: list[str], size: int, source: str = "memory_items"
) -> None:
    """The two spaces (made again), each with `size` memories copied from stored users' rows of
    `source` (memory_items or messages), and a read grant for each of `users`."""
    kind = "m.type" if source == "memory_items" else "'fact'"
    engine = create_engine(db.url)
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
                        f"md5(m.content || CAST(:o AS text) || m.id::text), {kind}, m.embedding, "
                        f"m.embedding_model FROM {source} AS m "
                        "WHERE m.user_id NOT LIKE 'space:%' AND m.embedding IS NOT NULL "
                        "ORDER BY m.id OFFSET :skip LIMIT :n RETURNING id, content"
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
    finally:
        await engine.dispose()
    # Settled like the users' store (bench.real.settle): the visibility map set and the
    # statistics fresh, so the spaces' index-only scans read no heap (as after autovacuum).
    await settle(db.dsn)


# Each mode's spaces; a question in a mode counts the shared items in its answer.
MODES: dict[str, tuple[str, ...]] = {"user alone": (), "user + 2 spaces": SPACES}


async def run(
    size: int,
    queries: int,
    out: Path,
    big_size: int,
    space_size: int,
    embed: bool = False,
    served: bool = False,
    kind: str = "synthetic",
    rounds: int = 1,
) -> dict[str, Any]:
    async with workload(kind, size, queries, out, big_size) as bench:
        url = bench.db.url
        users = sorted({q.user_id for q in bench.sample})
        await add_spaces(bench.db, users, space_size, bench.source)
        postmaster = postmaster_pid(out / "pg")
        if served:
            server = await start_server(
                with_user(url, DEFAULT_APP_ROLE), out / "server-spaces.log", {}
            )
            try:
                async with AsyncClient(server.base_url, timeout=30.0, retry=NO_RETRY) as client:

                    async def ask_server(query: BenchQuery, spaces: tuple[str, ...]) -> int:
                        scoped = client.as_user(query.user_id).scoped(spaces=spaces or None)
                        answer = await scoped.memory_query(query.text, limit=10, min_score=0.0)
                        return sum(1 for i in answer.items if i.space is not None)

                    def server_ms() -> float:
                        return sum(cpu_seconds(server.pids()).values()) * 1000

                    result = await measure(
                        bench.sample, MODES, ask_server, server_ms, postmaster, rounds
                    )
            finally:
                server.stop()
        else:
            settings = load_settings(rate_limit_per_minute=0)
            engine = await service_engine(url, pool_size=6)
            embeddings = bench.embeddings
            if embed or embeddings is None:
                embeddings = EmbeddingService(LocalEmbedder())
            config = query_config(settings)
            service = QueryService(engine, embeddings, Cache.from_url(None), config)

            async def ask(query: BenchQuery, spaces: tuple[str, ...]) -> int:
                request = QueryRequest(
                    user_id=query.user_id,
                    query=query.text,
                    limit=10,
                    min_score=0.0,
                    memory=MemoryScope(query.user_id, spaces=spaces) if spaces else None,
                )
                answer = await service.query(request)
                if answer.error is not None:
                    raise RuntimeError(f"query failed: {answer.error}")
                return sum(1 for i in answer.items if i.space is not None)

            try:
                result = await measure(
                    bench.sample, MODES, ask, lambda: time.process_time() * 1000, postmaster, rounds
                )
            finally:
                await engine.dispose()
        return result | {"users": len(users)}


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="questions (each asked in both modes)")] = 200,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    space_size: Annotated[int, typer.Option(help="memories in each space")] = 300,
    embed: Annotated[bool, typer.Option(help="embed each question in the request")] = False,
    served: Annotated[
        bool, typer.Option(help="over HTTP to `pgrecall serve` (embeds in each request)")
    ] = False,
    store: Annotated[
        str, typer.Option(help="synthetic (bench.rls's memories) or real (bench.real's turns)")
    ] = "synthetic",
    rounds: Annotated[int, typer.Option(min=1, help="measured passes over the questions")] = 1,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """query_memory with and without two shared spaces: wall ms, CPU, ratios."""
    if store not in ("synthetic", "real"):
        raise typer.BadParameter("synthetic or real", param_hint="--store")
    result = asyncio.run(
        run(parse_size(size), queries, out, big_size, space_size, embed, served, store, rounds)
    )
    echo_modes(result)
    typer.echo(
        f"spaces / alone: {ratios(result, 'user + 2 spaces', 'user alone')}; "
        f"{result['counted']} shared items returned over {len(result['wall']['user alone'])} "
        f"queries of {result['users']} users ({rounds} measured pass(es))"
    )


if __name__ == "__main__":
    cli()
