"""ivfflat vs HNSW for the big users' message vectors, on a loaded real-workload store.

`python -m eval.bench.ann --messages 60k --big-size 50000` (after `python -m eval.bench.real`
built `bench_real_<messages>`): the big user's own questions, embedded by the local model, each
answered by

- the exact scan (ground truth: the user_id index, `ORDER BY distance + 0`),
- the service's ANN statement on ivfflat (probes, iterative scan, max_probes as configured),
- the same statement on an HNSW index (m=16, ef_construction=64) with `hnsw.iterative_scan =
  relaxed_order` and the given ef_search values; the HNSW index is built, and the ivfflat one
  dropped, inside one transaction that is rolled back, so the store is left as it was.

Prints recall@10 (ties count as hits), short result sets (fewer than min(50, user's rows)) and
p50/p95 of the statement alone, all measured in one run.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import numpy as np
import typer

from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import vector_literal
from app.embedded import EmbeddedPostgres
from app.observability import configure_logging
from eval.bench.drive import percentiles
from eval.bench.real import LOCOMO, make_users, questions
from eval.bench.store import database
from eval.datasets.locomo import load_locomo

ROOT = Path(__file__).resolve().parents[2]
_SQL = (
    "SELECT t.id, t.embedding <=> CAST($2 AS vector) AS d FROM messages AS t "
    "WHERE t.user_id = $1 AND t.embedding IS NOT NULL ORDER BY {order} LIMIT $3"
)
ANN = _SQL.format(order="t.embedding <=> CAST($2 AS vector)")
EXACT = _SQL.format(order="(t.embedding <=> CAST($2 AS vector)) + 0")


async def _timed(conn: asyncpg.Connection, sql: str, *args: Any) -> tuple[list[float], float]:
    t = time.perf_counter()
    rows = await conn.fetch(sql, *args)
    return [float(r["d"]) for r in rows], (time.perf_counter() - t) * 1000


def _recall(ann: list[float], exact: list[float], k: int = 10) -> float:
    if not exact:
        return 1.0
    cut = exact[min(k, len(exact)) - 1]
    return sum(1 for d in sorted(ann)[:k] if d <= cut + 1e-9) / min(k, len(exact))


async def _run(
    items: int, big_size: int, count: int, ef: list[int], probes: list[int], out: Path
) -> str:
    cfg = load_settings()
    users = make_users(load_locomo(LOCOMO), items, big_size, 42)
    big = next(u for u in users if u.big)
    qs = [q for q in questions(users, 20 * count, 1.0, 42) if q.user_id == big.user_id][:count]
    embedder = LocalEmbedder(threads=1)
    vectors = [vector_literal(v) for v in embedder.embed_sync([q.text for q in qs])]
    pg = EmbeddedPostgres(out / "pg")
    url = await asyncio.to_thread(pg.start)
    db = database(url, f"bench_real_{items}")
    lines = [
        f"big user {big.user_id}: {big.size} turns, {len(qs)} of its questions",
        "",
        "| index | setting | recall@10 | min | short | p50 ms | p95 ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    conn = await asyncpg.connect(db.dsn)
    try:
        rows = await conn.fetchval(
            "SELECT count(*) FROM messages WHERE user_id = $1 AND embedding IS NOT NULL",
            big.user_id,
        )
        need = min(50, rows)
        exact = [(await _timed(conn, EXACT, big.user_id, v, 50))[0] for v in vectors]

        def line(name: str, setting: str, runs: list[tuple[list[float], float]]) -> str:
            recalls = [_recall(a, e) for (a, _), e in zip(runs, exact, strict=True)]
            short = sum(1 for a, _ in runs if len(a) < need)
            lat = percentiles([ms for _, ms in runs])
            return (
                f"| {name} | {setting} | {np.mean(recalls):.3f} | {min(recalls):.1f} | {short} "
                f"| {lat['p50']} | {lat['p95']} |"
            )

        async with conn.transaction():
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            await conn.execute("SET LOCAL ivfflat.iterative_scan = relaxed_order")
            await conn.execute(f"SET LOCAL ivfflat.max_probes = {cfg.ivfflat_max_probes}")
            for value in probes or [cfg.ivfflat_probes]:
                await conn.execute(f"SET LOCAL ivfflat.probes = {int(value)}")
                for v in vectors[:5]:  # warm-up
                    await conn.fetch(ANN, big.user_id, v, 50)
                runs = [await _timed(conn, ANN, big.user_id, v, 50) for v in vectors]
                lines.append(line("ivfflat", f"probes={value}, iterative", runs))
            plan = await conn.fetch("EXPLAIN " + ANN, big.user_id, vectors[0], 50)
            lines.append(f"|  | plan: {plan[0][0][:60]} | | | | | |")
        exact_runs = [await _timed(conn, EXACT, big.user_id, v, 50) for v in vectors]
        lines.append(line("exact", "user_id index, + 0", exact_runs))
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
            await conn.execute("SET LOCAL statement_timeout = 0")
            t = time.perf_counter()
            await conn.execute(
                "CREATE INDEX bench_hnsw ON messages USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 64)"
            )
            build_s = time.perf_counter() - t
            await conn.execute("DROP INDEX idx_messages_embedding")
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            for value in ef:
                await conn.execute(f"SET LOCAL hnsw.ef_search = {int(value)}")
                for v in vectors[:5]:
                    await conn.fetch(ANN, big.user_id, v, 50)
                runs = [await _timed(conn, ANN, big.user_id, v, 50) for v in vectors]
                lines.append(line("hnsw", f"ef_search={value}, iterative", runs))
            plan = await conn.fetch("EXPLAIN " + ANN, big.user_id, vectors[0], 50)
            lines.append(f"|  | plan: {plan[0][0][:60]} | | | | | |")
            total = await conn.fetchval("SELECT count(*) FROM messages")
            lines += ["", f"HNSW build over {total} message vectors: {build_s:.1f} s"]
        finally:
            await tx.rollback()
    finally:
        await conn.close()
        if pg.started_here:
            await asyncio.to_thread(pg.stop)
    return "\n".join(lines)


cli = typer.Typer(add_completion=False, help=__doc__)


@cli.command()
def main(
    messages: Annotated[str, typer.Option(help="the real store's size (stored turns)")] = "60k",
    big_size: Annotated[int, typer.Option(help="turns of its big user")] = 50_000,
    queries: Annotated[int, typer.Option(help="big-user questions")] = 100,
    ef_search: Annotated[str, typer.Option(help="hnsw.ef_search values")] = "40,100",
    probes: Annotated[str, typer.Option(help="ivfflat.probes values ('' = the setting)")] = "",
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    from eval.bench.__main__ import parse_size

    configure_logging("WARNING", "text")
    ef = [int(x) for x in ef_search.split(",")]
    sweep = [int(x) for x in probes.split(",") if x]
    typer.echo(asyncio.run(_run(parse_size(messages), big_size, queries, ef, sweep, out)))


if __name__ == "__main__":
    cli()
