"""`python -m bench` (or `python scripts/bench.py`, `make bench`): the performance benchmark.

Defaults: stores of 10k and 100k memory items, concurrency 1/8/32, results and logs under
bench/out/. Setting overrides go to the server and to the recall measurement alike.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Annotated

import typer

from app.observability import configure_logging
from bench.options import ROOT, parse_levels, parse_settings, parse_size
from bench.real import report, run, side_by_side
from bench.report import load_baselines, plot, table
from bench.run import BenchConfig, run_size

log = logging.getLogger("bench")
cli = typer.Typer(add_completion=False, help=__doc__)


async def _main(
    sizes: list[int], cfg: BenchConfig, database_url: str | None, threads: int
) -> list[dict[str, object]]:
    from app.adapters.embedder import LocalEmbedder
    from app.embedded import EmbeddedPostgres

    embedder = LocalEmbedder(threads=threads)
    pg = None
    server_url = database_url
    if server_url is None:
        pg = EmbeddedPostgres(cfg.out_dir / "pg")
        server_url = await asyncio.to_thread(pg.start)
    results = []
    try:
        for items in sizes:
            results.append(await run_size(server_url, items, embedder.embed_sync, cfg))
    finally:
        if pg is not None and pg.started_here:
            await asyncio.to_thread(pg.stop)
    return results


@cli.command()
def main(
    sizes: Annotated[str, typer.Option(help="store sizes, comma-separated")] = "10k,100k",
    levels: Annotated[
        str, typer.Option(help="concurrency:requests, comma-separated")
    ] = "1:300,8:1000,32:1000",
    time_cap: Annotated[float, typer.Option(help="seconds per concurrency level, at most")] = 120.0,
    recall_queries: Annotated[int, typer.Option(help="queries in the recall measurement")] = 300,
    timing_samples: Annotated[
        int, typer.Option(help="/v1/memory/query calls for the breakdown")
    ] = 100,
    big_share: Annotated[float, typer.Option(help="share of queries from the big users")] = 0.2,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="setting override KEY=VALUE")
    ] = None,
    workers: Annotated[int, typer.Option(help="uvicorn workers (1 = `pgrecall serve`)")] = 1,
    tag: Annotated[str | None, typer.Option(help="results-<size>-<tag>.json (tuning runs)")] = None,
    rebuild: Annotated[
        bool, typer.Option(help="reload stores even if a loaded one matches")
    ] = False,
    database_url: Annotated[
        str | None, typer.Option(help="a Postgres server to create bench_<size> databases in")
    ] = None,
    out: Annotated[Path, typer.Option(help="results, logs, caches, embedded Postgres")] = ROOT
    / "bench/out",
    seed: Annotated[int, typer.Option()] = 42,
    load_threads: Annotated[int, typer.Option(help="onnxruntime threads for corpus embedding")] = 2,
    real: Annotated[
        str, typer.Option(help="real-conversation workload sizes (stored turns), '' = none")
    ] = "10k",
    synthetic: Annotated[bool, typer.Option(help="run the synthetic workload")] = True,
) -> None:
    """Build stores, drive query_memory over HTTP, report latency, throughput, recall, RSS."""
    configure_logging("INFO", "text")
    cfg = BenchConfig(
        out_dir=out,
        levels=parse_levels(levels),
        time_cap_s=time_cap,
        recall_queries=recall_queries,
        timing_samples=timing_samples,
        big_share=big_share,
        seed=seed,
        reuse=not rebuild,
        workers=workers,
        settings=parse_settings(set_ or []),
        tag=tag,
    )
    synthetic_results: list[dict[str, object]] = []
    if synthetic:
        synthetic_results = asyncio.run(
            _main([parse_size(s) for s in sizes.split(",")], cfg, database_url, load_threads)
        )
        baselines = load_baselines(out)
        if tag is None and plot(baselines, out / "latency-vs-size.png"):
            log.info("plot written to %s", out / "latency-vs-size.png")
        # A tagged (tuning) run prints its own results; an untagged one, every baseline size.
        typer.echo(table(baselines if tag is None else synthetic_results))
    for size in filter(None, real.split(",")):
        result = asyncio.run(
            run(parse_size(size), list(cfg.levels), cfg.timing_samples, out, dict(cfg.settings))
        )
        typer.echo("")
        typer.echo(report(result))
        if synthetic_results:
            typer.echo("")
            typer.echo(side_by_side(result, synthetic_results))


if __name__ == "__main__":
    cli()
