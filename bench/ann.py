"""ivfflat vs HNSW for the big users' vectors, on a loaded store.

`python -m bench.ann --messages 60k --big-size 50000` (after `python -m bench.real`
built `bench_real_<messages>`; the big user's message vectors), or `python -m bench.ann
--synthetic 1m` (after `python -m bench --sizes 1m` built `bench_<items>`; the big users'
memory vectors, 50,000 distinct vectors each): the big users' own questions, embedded by the
local model, each answered by

- the exact scan (ground truth: the user_id index, `ORDER BY distance + 0`),
- the service's ANN statement on ivfflat (probes, iterative scan, max_probes as configured),
- the same statement on each big user's own ivfflat index (`--own-lists`, `--builds`,
  `--shares`: probes as a share of its lists, as the service's rule sets them), built inside a
  transaction that is rolled back,
- the same statement on an HNSW index (m=16, ef_construction=64) with `hnsw.iterative_scan =
  relaxed_order` and the given ef_search values; the HNSW index is built, and the ivfflat one
  dropped, inside one transaction that is rolled back, so the store is left as it was.

Prints recall@10 (ties count as hits), short result sets (fewer than min(50, user's rows)) and
p50/p95 of the statement alone, all measured in one run.
"""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Annotated, Any

import asyncpg
import numpy as np
import typer

from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.embedded import EmbeddedPostgres
from app.observability import configure_logging
from app.repositories.maintenance import EMBEDDING_INDEXES, user_lists_for
from app.repositories.retrieval import ann_settings
from app.vectors import vector_literal
from bench.corpus import generate, layout
from bench.drive import make_queries, percentiles
from bench.options import ROOT, parse_size
from bench.real import LOCOMO, make_users, questions
from bench.store import Store, database
from eval.datasets.locomo import load_locomo

_SQL = (
    "SELECT t.id, t.embedding <=> CAST($2 AS halfvec) AS d FROM {table} AS t "
    "WHERE t.user_id = $1 AND t.embedding IS NOT NULL ORDER BY {order} LIMIT $3"
)


async def _timed(conn: asyncpg.Connection, sql: str, *args: Any) -> tuple[list[float], float]:
    t = time.perf_counter()
    rows = await conn.fetch(sql, *args)
    return [float(r["d"]) for r in rows], (time.perf_counter() - t) * 1000


def _recall(ann: list[float], exact: list[float], k: int = 10) -> float:
    if not exact:
        return 1.0
    cut = exact[min(k, len(exact)) - 1]
    return sum(1 for d in sorted(ann)[:k] if d <= cut + 1e-9) / min(k, len(exact))


async def _drop_user_indexes(conn: asyncpg.Connection, table: str) -> None:
    """Drop the per-user indexes `pgrecall reindex` built (callers roll back)."""
    for (name,) in await conn.fetch(
        "SELECT relname FROM pg_class WHERE relkind = 'i' AND starts_with(relname, $1)",
        EMBEDDING_INDEXES[table] + "_u_",  # type: ignore[index]
    ):
        await conn.execute(f'DROP INDEX "{name}"')


async def _ann_settings(conn: asyncpg.Connection, cfg: Any) -> None:
    """The settings the service's ANN transaction makes (RetrievalRepository.set_vector_search);
    the probes are set by the caller per sweep step."""
    settings = ann_settings(
        probes=cfg.ivfflat_probes,
        max_probes=cfg.ivfflat_max_probes,
        ef_search=cfg.hnsw_ef_search,
        max_scan_tuples=cfg.hnsw_max_scan_tuples,
    )
    for name, value in settings.items():
        await conn.execute("SELECT set_config($1, $2, true)", name, value)


async def _real_questions(items: int, big_size: int, count: int) -> tuple[str, list[Any]]:
    users = make_users(load_locomo(LOCOMO), items, big_size, 42)
    big = next(u for u in users if u.big)
    qs = [q for q in questions(users, 20 * count, 1.0, 42) if q.user_id == big.user_id][:count]
    return f"bench_real_{items}", [(q.user_id, q.text) for q in qs]


async def _synthetic_questions(items: int, count: int) -> tuple[str, list[Any]]:
    memories = generate(42, min(items, 100_000))
    users = layout(items, 42)
    store = Store(database("postgresql://x/y", "x"), items, 42, users, memories, None, 0, {})
    qs = make_queries(store, count, big_share=1.0, seed=42)
    return f"bench_{items}", [(q.user_id, q.text) for q in qs if q.big][:count]


async def big_user_questions(
    items: int, big_size: int, count: int, *, synthetic: bool
) -> tuple[str, str, list[Any]]:
    """(database, table, [(user, question)]): the big users' questions of a loaded store."""
    if synthetic:
        name, qs = await _synthetic_questions(items, count)
        return name, "memory_items", qs
    name, qs = await _real_questions(items, big_size, count)
    return name, "messages", qs


async def _run(
    items: int,
    big_size: int,
    count: int,
    ef: list[int],
    probes: list[int],
    out: Path,
    *,
    synthetic: bool,
    hnsw_m: int,
    hnsw_ef_construction: int,
    own: bool = False,
    own_lists: list[int] | None = None,
    shares: list[float] | None = None,
    builds: int = 1,
) -> str:
    cfg = load_settings()
    name, table, qs = await big_user_questions(items, big_size, count, synthetic=synthetic)
    ann_sql = _SQL.format(table=table, order="t.embedding <=> CAST($2 AS halfvec)")
    exact_sql = _SQL.format(table=table, order="(t.embedding <=> CAST($2 AS halfvec)) + 0")
    embedder = LocalEmbedder(threads=1)
    vectors = [vector_literal(v) for v in embedder.embed_sync([text for _, text in qs])]
    asks = [(user, v) for (user, _), v in zip(qs, vectors, strict=True)]
    pg = EmbeddedPostgres(out / "pg")
    url = await asyncio.to_thread(pg.start)
    db = database(url, name)
    conn = await asyncpg.connect(db.dsn)
    try:
        sizes = {
            user: await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE user_id = $1 AND embedding IS NOT NULL",
                user,
            )
            for user in {u for u, _ in asks}
        }
        total = await conn.fetchval(f"SELECT count(*) FROM {table}")
        lists = await conn.fetchval(
            "SELECT split_part(o, '=', 2)::int FROM pg_class, unnest(reloptions) AS o "
            "WHERE relname = $1 AND o LIKE 'lists=%'",
            EMBEDDING_INDEXES[table],  # type: ignore[index]
        )
        lines = [
            f"{db.name}.{table}: {total} rows, ivfflat lists={lists}; big users "
            + ", ".join(f"{u} ({n} vectors)" for u, n in sorted(sizes.items()))
            + f"; {len(asks)} of their questions",
            "",
            "| index | setting | recall@10 | min | short | p50 ms | p95 ms |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        exact = [(await _timed(conn, exact_sql, u, v, 50))[0] for u, v in asks]

        def line(name: str, setting: str, runs: list[tuple[list[float], float]]) -> str:
            recalls = [_recall(a, e) for (a, _), e in zip(runs, exact, strict=True)]
            short = sum(
                1 for (a, _), (u, _) in zip(runs, asks, strict=True) if len(a) < min(50, sizes[u])
            )
            lat = percentiles([ms for _, ms in runs])
            return (
                f"| {name} | {setting} | {np.mean(recalls):.3f} | {min(recalls):.1f} | {short} "
                f"| {lat['p50']} | {lat['p95']} |"
            )

        async def sweep(sql: str) -> list[tuple[list[float], float]]:
            for u, v in asks[:5]:  # warm-up
                await conn.fetch(sql, u, v, 50)
            return [await _timed(conn, sql, u, v, 50) for u, v in asks]

        tx = conn.transaction()
        await tx.start()
        try:
            # The shared index alone: per-user indexes `pgrecall reindex` built are dropped
            # inside this transaction, which is rolled back.
            await _drop_user_indexes(conn, table)
            await _ann_settings(conn, cfg)
            for value in probes or [cfg.ivfflat_probes]:
                await conn.execute(f"SET LOCAL ivfflat.probes = {int(value)}")
                lines.append(line("ivfflat", f"probes={value}, iterative", await sweep(ann_sql)))
            plan = await conn.fetch("EXPLAIN " + ann_sql, *asks[0], 50)
            lines.append(f"|  | plan: {plan[0][0][:60]} {plan[1][0].strip()[:50]} | | | | | |")
        finally:
            await tx.rollback()
        lines.append(line("exact", "user_id index, + 0", await sweep(exact_sql)))
        if own:
            # Each asking user's own ivfflat index (what `pgrecall reindex` builds for users
            # above exact_search_max_items), built inside a transaction that is rolled back.
            # k-means differs per build: `builds` builds per lists value.
            for lists_value in own_lists or [0]:  # 0: user_lists_for(the user's rows)
                for build in range(builds):
                    tx = conn.transaction()
                    await tx.start()
                    try:
                        await conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
                        await _drop_user_indexes(conn, table)
                        t = time.perf_counter()
                        for n, (user, count) in enumerate(sorted(sizes.items())):
                            lists = lists_value or user_lists_for(count)
                            ddl = await conn.fetchval(
                                "SELECT format('CREATE INDEX %I ON %I USING ivfflat (embedding "
                                "halfvec_cosine_ops) WITH (lists = %s) WHERE user_id = %L', "
                                "$1::text, $2::text, $3::int, $4::text)",
                                f"bench_own_{n}",
                                table,
                                lists,
                                user,
                            )
                            await conn.execute(ddl)
                        own_s = time.perf_counter() - t
                        await _ann_settings(conn, cfg)
                        steps = [(f"probes={p}", p) for p in probes] if not shares else []
                        steps += [(f"share {x}", math.ceil(x * lists)) for x in shares or []]
                        for label, value in steps or [("probes", cfg.ivfflat_probes)]:
                            await conn.execute(f"SET LOCAL ivfflat.probes = {int(value)}")
                            lines.append(
                                line(
                                    f"own ivfflat, build {build + 1}",
                                    f"lists={lists}, {label} ({value} probes)",
                                    await sweep(ann_sql),
                                )
                            )
                        plan = await conn.fetch("EXPLAIN " + ann_sql, *asks[0], 50)
                        lines.append(
                            f"|  | plan: {plan[0][0][:60]} {plan[1][0].strip()[:50]}; "
                            f"built in {own_s:.1f} s | | | | | |"
                        )
                    finally:
                        await tx.rollback()  # the store is left as it was
        if ef:
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.execute("SET LOCAL maintenance_work_mem = '2GB'")
                await conn.execute("SET LOCAL statement_timeout = 0")
                t = time.perf_counter()
                await conn.execute(
                    f"CREATE INDEX bench_hnsw ON {table} USING hnsw (embedding halfvec_cosine_ops) "
                    f"WITH (m = {int(hnsw_m)}, ef_construction = {int(hnsw_ef_construction)})"
                )
                build_s = time.perf_counter() - t
                await conn.execute(f"DROP INDEX {EMBEDDING_INDEXES[table]}")  # type: ignore[index]
                await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                for value in ef:
                    await conn.execute(f"SET LOCAL hnsw.ef_search = {int(value)}")
                    lines.append(
                        line("hnsw", f"ef_search={value}, iterative", await sweep(ann_sql))
                    )
                plan = await conn.fetch("EXPLAIN " + ann_sql, *asks[0], 50)
                lines.append(f"|  | plan: {plan[0][0][:60]} | | | | | |")
                lines += [
                    "",
                    f"HNSW (m={hnsw_m}, ef_construction={hnsw_ef_construction}) build over "
                    f"{total} rows: {build_s:.1f} s",
                ]
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
    ef_search: Annotated[str, typer.Option(help="hnsw.ef_search values ('' = no HNSW)")] = "40,100",
    probes: Annotated[str, typer.Option(help="ivfflat.probes values ('' = the setting)")] = "",
    synthetic: Annotated[
        str, typer.Option(help="a synthetic store's size (bench_<items>) instead of the real one")
    ] = "",
    hnsw_m: Annotated[int, typer.Option(help="HNSW m")] = 16,
    hnsw_ef_construction: Annotated[int, typer.Option(help="HNSW ef_construction")] = 64,
    own_index: Annotated[
        bool, typer.Option(help="also measure per-user ivfflat indexes (pgrecall reindex)")
    ] = True,
    own_lists: Annotated[
        str, typer.Option(help="per-user index lists ('' = as pgrecall reindex sizes them)")
    ] = "",
    shares: Annotated[
        str, typer.Option(help="per-user index probes as shares of its lists (instead of --probes)")
    ] = "",
    builds: Annotated[int, typer.Option(help="per-user index builds per lists value")] = 1,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    configure_logging("WARNING", "text")
    ef = [int(x) for x in ef_search.split(",") if x]
    sweep = [int(x) for x in probes.split(",") if x]
    items = parse_size(synthetic or messages)
    typer.echo(
        asyncio.run(
            _run(
                items,
                big_size,
                queries,
                ef,
                sweep,
                out,
                synthetic=bool(synthetic),
                hnsw_m=hnsw_m,
                hnsw_ef_construction=hnsw_ef_construction,
                own=own_index,
                own_lists=[int(x) for x in own_lists.split(",") if x],
                shares=[float(x) for x in shares.split(",") if x],
                builds=builds,
            )
        )
    )


if __name__ == "__main__":
    cli()
