"""`python -m bench.topics --size 10k`: what newer wins on one topic costs a query (issue 45).

The default preset links a near tie on one topic (`tie_link`, app/retrieval/topics.py) and the
pairs its revision model accepts (`revision_threshold`, app/retrieval/revision.py): the
context stage reads the stored vectors of the ranking's first `topic_depth` memories with their
rows (in the same statement), and the links compare them. This runs the same sampled questions
of bench.rls's bench_<size> store of memories (vectors computed up front, as bench.rls does)
through three QueryServices in this process, the default, the default without the revision
model and the default with neither (`tie_link` 0 too), measured as bench/modes.py measures
modes (this process's CPU is the service's). Printed: each mode's wall ms, CPU and Postgres CPU
per query, and their ratios in the one run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer

from app.adapters.cache import Cache
from app.config import load_settings
from app.retrieval.presets import DEFAULT
from app.roles import service_engine
from app.runtime import query_config
from app.services.query import QueryService
from bench.drive import BenchQuery
from bench.inprocess import prepared, timed_query
from bench.modes import echo_modes, measure, postmaster_pid, ratios
from bench.options import ROOT, parse_size

cli = typer.Typer(add_completion=False)
MODES = {
    "default": DEFAULT,
    "without the revision model": replace(DEFAULT, revision_threshold=0.0),
    "without either": replace(DEFAULT, revision_threshold=0.0, tie_link=0.0),
}


async def run(size: int, queries: int, out: Path, big_size: int) -> dict[str, Any]:
    async with prepared(size, queries, out, big_size) as bench:
        postmaster = postmaster_pid(out / "pg")
        config = query_config(load_settings(rate_limit_per_minute=0))
        engine = await service_engine(bench.store.db.url, pool_size=4)
        services = {
            mode: QueryService(
                engine, bench.embeddings, Cache.from_url(None), replace(config, preset=preset)
            )
            for mode, preset in MODES.items()
        }

        async def ask(query: BenchQuery, service: QueryService) -> int:
            await timed_query(service, query)
            return 0

        try:
            return await measure(
                bench.sample, services, ask, lambda: time.process_time() * 1000, postmaster
            )
        finally:
            await engine.dispose()


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="questions (each asked in every mode)")] = 300,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """The default with and without its topic links: wall ms, CPU, ratios."""
    result = asyncio.run(run(parse_size(size), queries, out, big_size))
    echo_modes(result)
    for other in ("without the revision model", "without either"):
        typer.echo(f"default / {other}: {ratios(result, 'default', other)}")


if __name__ == "__main__":
    cli()
