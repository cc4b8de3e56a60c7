"""Which plan the service's vector statement gets for the big users, by probes and page cost.

`python -m bench.plans --synthetic 1m --probes 20,25,30 --page-costs 4,1.1` (after
`python -m bench --sizes 1m` built `bench_<items>`), or `--messages 1m` for the real store
(after `python -m bench.real --messages 1m`): each big user's question runs as the service
runs it (the service role under row-level security, the user's session, custom plans,
RetrievalRepository.set_vector_search with the given probes and random_page_cost, the
statement of RetrievalRepository.vector with passages) on the store's per-user indexes, and
the tool counts the statements that scanned the user's own index (the rest took the exact
plan: the user_id index and a sort) and prints the statement's p50 / p95. Postgres's default
random_page_cost is 4; the service sets 1.1 on its ANN transactions.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Annotated

import typer

from app.adapters.embedder import LocalEmbedder
from app.config import load_settings
from app.db import create_sessionmaker, user_session
from app.embedded import EmbeddedPostgres
from app.observability import configure_logging
from app.repositories.maintenance import user_index_name
from app.repositories.retrieval import RetrievalRepository, vector_search_settings
from app.retrieval.presets import get_preset
from app.roles import service_engine
from bench.ann import big_user_questions
from bench.drive import percentiles
from bench.options import ROOT, parse_size
from bench.recall import OWN_INDEX_SCANS
from bench.store import database


async def _run(
    items: int, queries: int, probes: list[int], costs: list[float], out: Path, synthetic: bool
) -> str:
    cfg = load_settings()
    name, table, qs = await big_user_questions(items, 50_000, queries, synthetic=synthetic)
    vectors = LocalEmbedder(threads=1).embed_sync([q for _, q in qs])
    pg = EmbeddedPostgres(out / "pg")
    url = await asyncio.to_thread(pg.start)
    engine = await service_engine(database(url, name).url, pool_size=2)
    sessionmaker = create_sessionmaker(engine)
    lines = [
        f"{name}.{table}: {len(qs)} big-user questions, as the service role",
        "",
        "| random_page_cost | probes | own index | p50 ms | p95 ms |",
        "|---:|---:|---:|---:|---:|",
    ]
    try:
        for cost in costs:
            for value in probes:
                own, ms = 0, []
                for (user, _), vector in zip(qs, vectors, strict=True):
                    async with (
                        user_session(sessionmaker, user, custom_plans=True) as session,
                        session.begin(),
                    ):
                        repo = RetrievalRepository(session)
                        await repo.set_vector_search(
                            vector_search_settings(
                                exact=False,
                                probes=value,
                                max_probes=cfg.ivfflat_max_probes,
                                random_page_cost=cost,
                            )
                        )
                        index = {"name": user_index_name(table, user)}
                        before = int((await session.execute(OWN_INDEX_SCANS, index)).scalar_one())
                        started = time.perf_counter()
                        await repo.vector(
                            user,
                            vector,
                            limit=50,
                            memories=True,
                            messages=True,
                            types=None,
                            exact=False,
                            model=cfg.embedding_model,
                            passage_weight=get_preset("default").passage_weight,
                        )
                        ms.append((time.perf_counter() - started) * 1000)
                        after = (await session.execute(OWN_INDEX_SCANS, index)).scalar_one()
                        own += int(after) > before
                lat = percentiles(ms)
                lines.append(
                    f"| {cost} | {value} | {own} / {len(qs)} | {lat['p50']} | {lat['p95']} |"
                )
    finally:
        await engine.dispose()
        if pg.started_here:
            await asyncio.to_thread(pg.stop)
    lines.append(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return "\n".join(lines)


cli = typer.Typer(add_completion=False, help=__doc__)


@cli.command()
def main(
    messages: Annotated[str, typer.Option(help="the real store's size (stored turns)")] = "1m",
    synthetic: Annotated[str, typer.Option(help="a synthetic store's size instead")] = "",
    queries: Annotated[int, typer.Option(help="big-user questions")] = 40,
    probes: Annotated[str, typer.Option(help="ivfflat.probes values")] = "20,25,30",
    page_costs: Annotated[str, typer.Option(help="random_page_cost values")] = "4,1.1",
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    configure_logging("WARNING", "text")
    typer.echo(
        asyncio.run(
            _run(
                parse_size(synthetic or messages),
                queries,
                [int(x) for x in probes.split(",") if x],
                [float(x) for x in page_costs.split(",") if x],
                out,
                bool(synthetic),
            )
        )
    )


if __name__ == "__main__":
    cli()
