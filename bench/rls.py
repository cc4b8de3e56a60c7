"""`python -m bench.rls --size 10k`: what row-level security costs the query path.

The same queries go through the service's QueryService (keyword and vector arms on two
connections, fusion, packing) twice, interleaved in a seeded random order per query:

- rls on: as the service role, which the policies bind (how the service runs);
- rls off: as the server's superuser, which bypasses them (how the service ran before).

Both run the same code, so both send the one scope statement per transaction (app/db.py: the
SET LOCALs of pgrecall_set_local); its round trip is timed on its own and printed too. Query
vectors are computed once up front (the model is the same in both modes and would only add
noise). Wall times on whatever else the machine
runs: indicative, not a benchmark result; compare the two columns of one run, not runs.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from sqlalchemy import text

from app.adapters.cache import Cache
from app.config import load_settings
from app.db import (
    SET_LOCAL,
    UserScope,
    create_engine,
    create_sessionmaker,
    engine_scope_key,
    scope_settings,
    set_local_params,
    user_session,
)
from app.roles import service_engine
from app.runtime import query_config
from app.services.query import QueryService
from bench.inprocess import echo_table, interleaved, prepared
from bench.options import ROOT, parse_size

cli = typer.Typer(add_completion=False)


async def run(size: int, queries: int, out: Path, big_size: int) -> dict[str, list[float]]:
    async with prepared(size, queries, out, big_size) as bench:
        settings = load_settings(rate_limit_per_minute=0)
        cache = Cache.from_url(None)
        url = bench.store.db.url
        engines = {
            "rls on": await service_engine(url, pool_size=4),
            "rls off": create_engine(url, pool_size=4),
        }
        services = {
            mode: QueryService(e, bench.embeddings, cache, query_config(settings))
            for mode, e in engines.items()
        }
        times: dict[str, list[float]] = {mode: [] for mode in services}
        times["scope statement round trip"] = []
        answers: dict[tuple[str, str], list[str]] = {}
        try:
            async for query, mode, elapsed, result in interleaved(services, bench.sample):
                times[mode].append(elapsed)
                # Both modes must answer alike: a service role that saw no rows (an unsigned
                # scope, say) would look fast and be wrong.
                ids = sorted(str(item.id) for item in result.items)
                other = answers.setdefault((query.user_id, query.text), ids)
                if other != ids:
                    raise RuntimeError(f"rls on and off answered {query.text!r} differently")
                if mode == "rls on":
                    times["scope statement round trip"].append(
                        await _scope_statement_ms(services["rls on"], query.user_id)
                    )
        finally:
            for engine in engines.values():
                await engine.dispose()
        return times


async def _scope_statement_ms(service: QueryService, user_id: str) -> float:
    """One extra round trip of the statement that names the user (already in both modes)."""
    async with (
        user_session(create_sessionmaker(service.engine), user_id) as session,
        session.begin(),
    ):
        await session.execute(text("SELECT 1"))  # the transaction's scope statement runs first
        started = time.perf_counter()
        signed = scope_settings(UserScope(user_id), engine_scope_key(service.engine))
        await session.execute(SET_LOCAL, set_local_params(signed))
        return (time.perf_counter() - started) * 1000


@cli.command()
def main(
    size: Annotated[str, typer.Option(help="store size (a bench_<size> database)")] = "10k",
    queries: Annotated[int, typer.Option(help="queries per mode")] = 200,
    big_size: Annotated[int, typer.Option(help="items of the one big user")] = 5000,
    out: Annotated[Path, typer.Option()] = ROOT / "bench/out",
) -> None:
    """query_memory latency (ms) as the service role (RLS on) and as a superuser (RLS off)."""
    times = asyncio.run(run(parse_size(size), queries, out, big_size))
    echo_table(times)
    on, off = np.median(times["rls on"]), np.median(times["rls off"])
    typer.echo(f"median cost of RLS: {on - off:+.2f} ms ({(on / off - 1) * 100:+.1f}%); indicative")


if __name__ == "__main__":
    cli()
