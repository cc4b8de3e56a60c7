"""`python -m bench.topics --size 10k`: what newer-wins-a-near-tie costs a query (issue 45).

The default preset links a near tie on one topic (`tie_link`, app/retrieval/topics.py): the
context stage reads the stored vectors of the ranking's first `topic_depth` memories with their
rows (in the same statement), and the links compare them. This runs the same sampled questions
of bench.rls's bench_<size> store of memories (vectors computed up front, as bench.rls does)
through two QueryServices in this process, the default and the default with `tie_link` 0,
interleaved in a seeded random order per question, once to warm up and once measured. Printed:
wall ms (p50, p95), this process's CPU per query, the Postgres backends' CPU per query
(/proc/<pid>/schedstat), and the ratios of the one run. Indicative on a shared machine: compare
the two rows of one run, not runs.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from tqdm import tqdm

from app.adapters.cache import Cache
from app.config import load_settings
from app.retrieval.presets import DEFAULT
from app.roles import service_engine
from app.runtime import query_config
from app.services.query import QueryService
from bench.drive import percentiles
from bench.inprocess import prepared, timed_query
from bench.options import ROOT, parse_size
from bench.spaces import backends_ms

cli = typer.Typer(add_completion=False)
MODES = {"default": DEFAULT, "without near ties": replace(DEFAULT, tie_link=0.0)}


async def run(
    size: int, queries: int, out: Path, big_size: int
) -> dict[str, dict[str, list[float]]]:
    async with prepared(size, queries, out, big_size) as bench:
        postmaster = int((out / "pg" / "pg" / "postmaster.pid").read_text().split()[0])
        config = query_config(load_settings(rate_limit_per_minute=0))
        engine = await service_engine(bench.store.db.url, pool_size=4)
        services = {
            mode: QueryService(
                engine, bench.embeddings, Cache.from_url(None), replace(config, preset=preset)
            )
            for mode, preset in MODES.items()
        }
        figures: dict[str, dict[str, list[float]]] = {
            m: {"wall": [], "cpu": [], "pg": []} for m in MODES
        }
        rng = np.random.default_rng(42)
        try:
            for warm in (True, False):
                for query in tqdm(
                    bench.sample, desc="warm-up" if warm else "measured", leave=False
                ):
                    order = list(MODES)
                    rng.shuffle(order)
                    for mode in order:
                        pg0, cpu0 = backends_ms(postmaster), time.process_time()
                        wall, _ = await timed_query(services[mode], query)
                        cpu, pg1 = (time.process_time() - cpu0) * 1000, backends_ms(postmaster)
                        if not warm:
                            figures[mode]["wall"].append(wall)
                            figures[mode]["cpu"].append(cpu)
                            figures[mode]["pg"].append(
                                sum(v - pg0.get(p, 0.0) for p, v in pg1.items())
                            )
        finally:
            await engine.dispose()
        return figures


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="questions (each asked in both modes)")] = 300,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """The default with and without near-tie links: wall ms, CPU, ratios."""
    figures = asyncio.run(run(parse_size(size), queries, out, big_size))
    typer.echo(f"{'mode':18} {'n':>4} {'p50':>7} {'p95':>7} {'cpu ms':>7} {'pg ms':>7}")
    for mode, f in figures.items():
        p = percentiles(f["wall"])
        typer.echo(
            f"{mode:18} {len(f['wall']):4d} {p['p50']:7.2f} {p['p95']:7.2f} "
            f"{np.mean(f['cpu']):7.3f} {np.mean(f['pg']):7.3f}"
        )
    new, old = figures["default"], figures["without near ties"]
    pn, po = percentiles(new["wall"]), percentiles(old["wall"])
    typer.echo(
        f"default / without: p50 {pn['p50'] / po['p50']:.3f}x, p95 {pn['p95'] / po['p95']:.3f}x, "
        f"service CPU {np.mean(new['cpu']) / np.mean(old['cpu']):.3f}x, Postgres CPU "
        f"{np.mean(new['pg']) / np.mean(old['pg']):.3f}x"
    )


if __name__ == "__main__":
    cli()
