"""`python -m bench.stages --messages 10k`: CPU per stage of the query path on the real store.

Runs the service's own retrieval pipeline (app/services/query/pipeline.py `retrieve`) on the
store `python -m bench.real --messages <size>` loaded (same --out), for the bench's questions,
and charges every repository call with
- the Postgres backend's CPU time (/proc/<pid>/schedstat: nanoseconds on a CPU, so a busy machine
  does not inflate it as it inflates wall time), and
- this process's CPU time around the call (SQLAlchemy, asyncpg, building the statement, reading
  the rows),
split by small and big users. The embedding is timed apart (LocalEmbedder.embed_sync, thread CPU
time) and the ranking stages (fuse, context's Python, rerank, calibrate) are what is left of the
process's CPU. Same machine as the database: it reads the backends' /proc entries.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from pathlib import Path
from typing import Annotated, Any

import typer
from sqlalchemy import event

from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import create_engine
from app.embedded import EmbeddedPostgres
from app.embedding_models import DEFAULT_MODEL_ID
from app.repositories.retrieval import RetrievalRepository
from app.retrieval.relevance import model_for
from app.roles import DEFAULT_APP_ROLE, service_engine
from app.runtime.query import query_config
from app.services.query import QueryRequest, QueryResult
from app.services.query.pipeline import retrieve
from app.services.query.sizes import SearchSizes
from app.services.query.state import Vectors, scope
from bench.options import ROOT, SetOption, parse_settings, parse_size
from bench.real import LOCOMO, make_users, questions
from bench.store import database
from eval.datasets.locomo import load_locomo

cli = typer.Typer(add_completion=False, help=__doc__)
STAGES = (
    "item_count",
    "search_size",
    "keyword",
    "expansion",
    "set_vector_search",
    "vector",
    "fetch_around",
)


def backend_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


class Meter:
    """Per (user class, stage): Postgres ns and Python ns, summed over the queries."""

    def __init__(self) -> None:
        self.pg: dict[tuple[str, str], int] = defaultdict(int)
        self.py: dict[tuple[str, str], int] = defaultdict(int)
        self.kind = "small"

    def wrap(self) -> None:
        for name in STAGES:
            original = getattr(RetrievalRepository, name, None)
            if original is None:  # a stage an older checkout does not have
                continue

            @functools.wraps(original)
            async def timed(
                repo: Any, *a: Any, _f: Any = original, _n: str = name, **kw: Any
            ) -> Any:
                pid = getattr(repo, "bench_pid", None)
                if pid is None:  # one repository per transaction: one connection
                    (row,) = await repo._rows("SELECT pg_backend_pid() AS pid", {})
                    pid = repo.bench_pid = row["pid"]
                pg0, py0 = backend_ns(pid), time.thread_time_ns()
                try:
                    return await _f(repo, *a, **kw)
                finally:
                    self.py[(self.kind, _n)] += time.thread_time_ns() - py0
                    self.pg[(self.kind, _n)] += backend_ns(pid) - pg0

            setattr(RetrievalRepository, name, timed)


def explain_plans(engine: Any) -> None:
    """Every statement of this engine's connections goes to the Postgres log with its plan
    (auto_explain, ANALYZE and BUFFERS), run as the service role: the owner loads the module
    and then takes the role, so row-level security applies as in the service."""

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for sql in (
            "LOAD 'auto_explain'",
            "SET auto_explain.log_min_duration = 0",
            "SET auto_explain.log_analyze = on",
            "SET auto_explain.log_buffers = on",
            "SET auto_explain.log_timing = on",
            f"SET ROLE {DEFAULT_APP_ROLE}",
        ):
            cursor.execute(sql)
        cursor.close()


async def run(
    items: int, out: Path, count: int, settings: dict[str, str], explain: bool = False
) -> str:
    cfg = load_settings(**settings)
    config = query_config(cfg)
    pg = EmbeddedPostgres(out / "pg")
    server_url = await asyncio.to_thread(pg.start)
    db = database(server_url, f"bench_real_{items}")
    users = make_users(load_locomo(LOCOMO), items, 5_000 if items <= 10_000 else 50_000, 42)
    qs = questions(users, 2000, 0.2, 42)[:count]
    embedder = LocalEmbedder(threads=cfg.embedding_threads)
    if explain:  # one small and one big user's question, plans in <out>/pg/postgres.log
        qs = [next(q for q in qs if not q.big), next(q for q in qs if q.big)]
        engine = create_engine(db.url, pool_size=4)
        explain_plans(engine)
    else:
        engine = await service_engine(db.url, pool_size=4)
    meter = Meter()
    meter.wrap()
    embed_ns: dict[str, int] = defaultdict(int)
    total_ns: dict[str, int] = defaultdict(int)
    n: dict[str, int] = defaultdict(int)
    # The service's memo of users' sizes (app/services/query/sizes.py), shared by the rounds.
    sizes = SearchSizes(config.search_size_ttl_s)
    try:
        for rnd in range(2):  # the first round warms the caches and the connections
            for q in qs:
                kind = "big" if q.big else "small"
                meter.kind = kind
                t0 = time.thread_time_ns()
                vector = embedder.embed_sync([q.text])[0]
                t1 = time.thread_time_ns()
                done: asyncio.Future[tuple[Any, str | None, int]] = asyncio.Future()
                done.set_result((vector, None, 0))
                request = QueryRequest(
                    user_id=q.user_id,
                    query=q.text,
                    limit=cfg.max_results,
                    min_score=cfg.min_relevance,
                )
                s = scope(request, q.text, config.preset, model_for(DEFAULT_MODEL_ID))
                await retrieve(
                    s,
                    done,  # type: ignore[arg-type]
                    Vectors(engine, config, DEFAULT_MODEL_ID, sizes),
                    asyncio.Semaphore(1),
                    QueryResult(),
                )
                t2 = time.thread_time_ns()
                if rnd == 1:
                    embed_ns[kind] += t1 - t0
                    total_ns[kind] += t2 - t1
                    n[kind] += 1
            if rnd == 0:
                meter.pg.clear()
                meter.py.clear()
    finally:
        await engine.dispose()
        if pg.started_here:
            await asyncio.to_thread(pg.stop)
    lines = [
        f"real {items:,}: {n['small']} small-user and {n['big']} big-user questions (CPU ms per "
        "query, second pass)",
        "",
        "| stage | small: Postgres | small: Python | big: Postgres | big: Python |",
        "|---|---:|---:|---:|---:|",
    ]

    def ms(ns: int, kind: str) -> str:
        return f"{ns / 1e6 / max(n[kind], 1):.2f}"

    lines.append(
        f"| embedding (1 thread) | - | {ms(embed_ns['small'], 'small')} | - "
        f"| {ms(embed_ns['big'], 'big')} |"
    )
    for stage in STAGES:
        cells = []
        for kind in ("small", "big"):
            cells += [ms(meter.pg[(kind, stage)], kind), ms(meter.py[(kind, stage)], kind)]
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    cells = []
    for kind in ("small", "big"):
        pg_sum = sum(v for (k, _), v in meter.pg.items() if k == kind)
        py_sum = sum(v for (k, _), v in meter.py.items() if k == kind)
        cells += [ms(pg_sum, kind), ms(total_ns[kind] - py_sum, kind)]
    lines.append(
        "| Postgres: all of the above; Python: the rest of retrieve (transaction, "
        "ranking) | " + " | ".join(cells) + " |"
    )
    mean = {
        k: (sum(v for (kk, _), v in meter.pg.items() if kk == k) + total_ns[k] + embed_ns[k])
        / 1e6
        / max(n[k], 1)
        for k in ("small", "big")
    }
    lines.append("")
    lines.append(
        f"sum per query: small {mean['small']:.2f} ms, big {mean['big']:.2f} ms; "
        f"at the bench's 20 % big: {0.8 * mean['small'] + 0.2 * mean['big']:.2f} ms "
        "(without HTTP, FastAPI and JSON)"
    )
    return "\n".join(lines)


@cli.command()
def main(
    messages: Annotated[str, typer.Option(help="the bench.real store: 10k, 100k")] = "10k",
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
    queries: Annotated[int, typer.Option(help="questions per pass")] = 200,
    set_: SetOption = None,
    explain: Annotated[
        bool, typer.Option(help="log the plans of one small and one big user's query instead")
    ] = False,
) -> None:
    settings = parse_settings(set_ or [])
    typer.echo(asyncio.run(run(parse_size(messages), out, queries, settings, explain)))


if __name__ == "__main__":
    cli()
