"""`python -m bench.compare --other CHECKOUT --other-out DIR`: this checkout's service beside
another checkout's, on the real workload, in one run.

Both stores must exist (`python -m bench.real --messages 10k --out DIR` in each checkout: the
same users and turns). Both servers run at once, each on its own store and embedded Postgres,
the other with its checkout's code and .venv. One load generator (this checkout's client) sends
each level in alternating bursts: a burst to this service, a burst to the other, and so on.
A VM whose speed drifts by a fifth within a minute then slows both sides alike, which two
benchmark runs one after the other do not. Per level and side: requests per second (completed
requests over the bursts' summed wall time), CPU per request (the server's processes and its
Postgres backends, from /proc) and latency p50 / p95 over all its bursts' calls, then this side
over the other.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from app.embedded import EmbeddedPostgres
from app.observability import configure_logging
from app.roles import DEFAULT_APP_ROLE, with_user
from bench.drive import run_level
from bench.options import ROOT, MessagesOption, SetOption, parse_levels, parse_settings, parse_size
from bench.real import LOCOMO, default_big_size, workload
from bench.run import measured_level
from bench.server import Server, start_server
from bench.store import database
from eval.datasets.locomo import load_locomo
from pgrecall.client import NO_RETRY, AsyncClient

log = logging.getLogger("bench")
SIDES = ("this", "other")


async def compare(
    other: Path,
    stores: dict[str, Path],
    items: int,
    levels: list[tuple[int, int]],
    rounds: int,
    settings: dict[str, str],
    seed: int = 42,
) -> dict[str, Any]:
    _, qs = workload(load_locomo(LOCOMO), items, default_big_size(items), seed)
    pgs = {side: EmbeddedPostgres(stores[side] / "pg") for side in SIDES}
    servers: dict[str, Server] = {}
    dsns: dict[str, str] = {}
    try:
        for side in SIDES:
            db = database(await asyncio.to_thread(pgs[side].start), f"bench_real_{items}")
            dsns[side] = db.dsn
            servers[side] = await start_server(
                with_user(db.url, DEFAULT_APP_ROLE),
                stores[side] / f"server-compare-{items}.log",
                settings,
                checkout=ROOT if side == "this" else other,
            )
        clients = {
            side: AsyncClient(servers[side].base_url, timeout=30.0, retry=NO_RETRY)
            for side in SIDES
        }
        result: dict[str, Any] = {"items": items, "rounds": rounds, "levels": []}
        try:
            for side in SIDES:  # warm-up: connections, plans, the sizes cache
                await run_level(clients[side], qs, concurrency=1, requests=30, time_cap_s=60)
            for concurrency, requests in levels:
                bursts: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
                for r in range(rounds):
                    for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                        bursts[side].append(
                            await measured_level(
                                clients[side], servers[side], dsns[side], qs,
                                concurrency=concurrency, requests=requests, time_cap_s=120,
                                offset=r * requests, keep_latencies=True,
                            )
                        )  # fmt: skip
                row: dict[str, Any] = {"concurrency": concurrency, "load": os.getloadavg()[0]}
                cpu = {s: [b["cpu_ms_per_request"]["total"] for b in bursts[s]] for s in SIDES}
                for side in SIDES:
                    done = [b["completed"] for b in bursts[side]]
                    latencies = [ms for b in bursts[side] for ms in b.pop("latencies_ms")]
                    row[side] = {
                        "requests": sum(done),
                        "rps": round(sum(done) / sum(b["wall_s"] for b in bursts[side]), 1),
                        "cpu_ms": round(float(np.average(cpu[side], weights=done)), 2),
                        "bursts_cpu_ms": cpu[side],
                        "p50_ms": round(float(np.percentile(latencies, 50)), 2),
                        "p95_ms": round(float(np.percentile(latencies, 95)), 2),
                    }
                row["cpu_ratio"] = round(row["this"]["cpu_ms"] / row["other"]["cpu_ms"], 3)
                row["p95_ratio"] = round(row["this"]["p95_ms"] / row["other"]["p95_ms"], 3)
                row["rps_ratio"] = round(row["this"]["rps"] / row["other"]["rps"], 3)
                row["burst_cpu_ratios"] = [
                    round(a / b, 3) for a, b in zip(cpu["this"], cpu["other"], strict=True)
                ]
                result["levels"].append(row)
                log.info("compare c=%d %s", concurrency, row)
        finally:
            for client in clients.values():
                await client.aclose()
    finally:
        for server in servers.values():
            server.stop()
        for pg in pgs.values():
            await asyncio.to_thread(pg.stop)
    return result


def report(result: dict[str, Any], other: Path) -> str:
    lines = [
        f"real workload, {result['items']:,} turns: this checkout beside {other}, "
        f"{result['rounds']} alternating bursts per side and level",
        "",
        "| conc | this req/s | other req/s | req/s ratio | this CPU ms/req | other CPU ms/req "
        "| CPU ratio | CPU ratio per burst pair | this p50 / p95 ms | other p50 / p95 ms "
        "| p95 ratio | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for row in result["levels"]:
        t, o = row["this"], row["other"]
        lines.append(
            f"| {row['concurrency']} | {t['rps']} | {o['rps']} | {row['rps_ratio']} "
            f"| {t['cpu_ms']} | {o['cpu_ms']} | {row['cpu_ratio']} "
            f"| {', '.join(str(x) for x in row['burst_cpu_ratios'])} "
            f"| {t['p50_ms']} / {t['p95_ms']} | {o['p50_ms']} / {o['p95_ms']} "
            f"| {row['p95_ratio']} | {row['load']:.2f} |"
        )
    return "\n".join(lines)


cli = typer.Typer(add_completion=False, help=__doc__)


@cli.command()
def main(
    other: Annotated[Path, typer.Option(help="the other checkout (with its .venv)")],
    other_out: Annotated[Path, typer.Option(help="the other checkout's bench store")],
    out: Annotated[Path, typer.Option(help="this checkout's bench store")] = ROOT / "bench/out",
    messages: MessagesOption = "10k",
    levels: Annotated[str, typer.Option(help="concurrency:requests per burst")] = "1:100,8:200",
    rounds: Annotated[int, typer.Option(help="bursts per side and level")] = 6,
    set_: SetOption = None,
) -> None:
    configure_logging("INFO", "text")
    result = asyncio.run(
        compare(
            other.resolve(),
            {"this": out, "other": other_out},
            parse_size(messages),
            parse_levels(levels),
            rounds,
            parse_settings(set_ or []),
        )
    )
    typer.echo(report(result, other))


if __name__ == "__main__":
    cli()
