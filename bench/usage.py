"""`python -m bench.usage --size 10k`: what writing usage data costs query_memory.

The same queries go through the service's QueryService twice, interleaved in a seeded random
order per query: with the UsageRecorder (how the service runs: the memories an answer returned
are stamped by a background flush after it) and without. The latency of each answer is timed as
the caller sees it, so a flush running meanwhile shows up in the next answers' times. The
flush's own statements are timed too (mean and p95 per flush). Query vectors are computed once
up front. Wall times on a shared machine: compare the two columns of one run, not runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from app.adapters.cache import Cache
from app.config import load_settings
from app.db import create_sessionmaker
from app.roles import service_engine
from app.runtime import query_config
from app.services.query import QueryService
from app.services.usage import UsageRecorder
from bench.drive import percentiles
from bench.inprocess import echo_table, interleaved, prepared
from bench.options import ROOT, parse_size

cli = typer.Typer(add_completion=False)


class _TimedRecorder(UsageRecorder):
    """The service's recorder, timing each flush (all users pending at once)."""

    flushes: list[float]

    async def _flush(self) -> None:
        started = time.perf_counter()
        await super()._flush()
        self.flushes.append((time.perf_counter() - started) * 1000)


async def run(
    size: int, queries: int, out: Path, big_size: int
) -> tuple[dict[str, list[float]], list[float], int]:
    async with prepared(size, queries, out, big_size) as bench:
        config = query_config(load_settings(rate_limit_per_minute=0))
        cache = Cache.from_url(None)
        engine = await service_engine(bench.store.db.url, pool_size=4)
        sessionmaker = create_sessionmaker(engine)
        recorder = _TimedRecorder(sessionmaker)
        recorder.flushes = []
        services = {
            "usage on": QueryService(engine, bench.embeddings, cache, config, usage=recorder),
            "usage off": QueryService(engine, bench.embeddings, cache, config),
        }
        times: dict[str, list[float]] = {mode: [] for mode in services}
        stamped = 0

        async def settle() -> None:  # the warm pass's flushes are not measured
            await recorder.drain()
            recorder.flushes = []

        try:
            async for _, mode, elapsed, result in interleaved(
                services, bench.sample, after_warm=settle
            ):
                times[mode].append(elapsed)
                if mode == "usage on":
                    stamped += sum(1 for i in result.items if i.source_kind == "memory")
            await recorder.drain()
        finally:
            await engine.dispose()
        return times, recorder.flushes, stamped


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="queries per mode")] = 200,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """query_memory latency (ms) with and without the usage write after each answer."""
    times, flushes, stamped = asyncio.run(run(parse_size(size), queries, out, big_size))
    echo_table(times)
    f = percentiles(flushes) if flushes else {"mean": 0.0, "p95": 0.0}
    typer.echo(
        f"flushes: {len(flushes)} for {len(times['usage on'])} answers ({stamped} memories "
        f"stamped), {f['mean']:.2f} ms mean, {f['p95']:.2f} ms p95 each (off the answer's path)"
    )
    on, off = np.median(times["usage on"]), np.median(times["usage off"])
    typer.echo(f"median cost of usage data: {on - off:+.2f} ms ({(on / off - 1) * 100:+.1f}%)")


if __name__ == "__main__":
    cli()
