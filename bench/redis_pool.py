"""The Redis client's connections: the bounded pool against one connection per concurrent call.

`python -m bench.redis_pool`: a redis-server on a unix socket in a temp dir (the tests' own,
tests/redis_server.py), and two caches on it:

- `bounded`: `Cache.from_url`, what the service runs (at most MAX_CONNECTIONS calls at once,
  connect timeout CONNECT_TIMEOUT_S; app/adapters/redis/breaker.py);
- `unbounded`: the client before it, a connection per concurrent call and a 0.25 s connect
  timeout (the same Cache, its slots made unlimited).

Two measurements, each variant in turn:

1. A burst of 50 rate-limit hits (limit 10) from a cold client while two Python threads hold
   the CPU: how many were admitted (10 is right; more means connects timed out and the limit
   failed open). CI once admitted 24.
2. Round trips (a rate-limit hit and a query-cache lookup per request) at 1, 8 and 64
   concurrent callers: requests per second, latency and the connections Redis saw.

Prints two tables; nothing is written.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from app.adapters.cache import Cache
from app.adapters.redis.breaker import OP_TIMEOUT_S
from bench.drive import percentiles
from tests.redis_server import RedisServer  # no pytest dependency

OLD_CONNECT_TIMEOUT_S = 0.25


def bounded(url: str) -> Cache:
    return Cache.from_url(url)


def unbounded(url: str) -> Cache:
    client = Redis.from_url(
        url,
        socket_connect_timeout=OLD_CONNECT_TIMEOUT_S,
        socket_timeout=OP_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
    )
    cache = Cache(client)
    cache._slots = asyncio.Semaphore(1_000_000)  # the bench's "before": no bound
    return cache


VARIANTS: dict[str, Callable[[str], Cache]] = {"bounded": bounded, "unbounded": unbounded}


@contextmanager
def cpu_bound_threads(count: int = 2) -> Iterator[None]:
    """`count` Python threads that hold the GIL and a core until the block ends."""
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            total += sum(i * i for i in range(1000))

    spinners = [threading.Thread(target=spin, daemon=True) for _ in range(count)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()


async def burst_admitted(url: str, make: Callable[[str], Cache], user: str) -> int:
    """Admitted of 50 hits (limit 10) from a cold cache while two threads spin."""
    cache = make(url)
    try:
        with cpu_bound_threads():
            decisions = await asyncio.gather(*(cache.hit_rate_limit(user, 10) for _ in range(50)))
    finally:
        await cache.aclose()
    return sum(d.allowed for d in decisions)


async def round_trips(
    url: str, make: Callable[[str], Cache], concurrency: int, requests: int
) -> dict[str, float]:
    cache = make(url)
    latencies: list[float] = []
    slots = asyncio.Semaphore(concurrency)

    async def one(n: int) -> None:
        async with slots:
            started = time.perf_counter()
            await cache.hit_rate_limit(f"rt-{n % 50}", 1_000_000_000)
            await cache.get_query_result(f"rt-{n % 50}", "question")
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(one(n) for n in range(requests)))
    wall = time.perf_counter() - started
    inspector = Redis.from_url(url)
    try:
        connections = len(await inspector.client_list()) - 1
    finally:
        await inspector.aclose()
    errors = cache.stats.errors
    await cache.aclose()
    return {
        "rps": requests / wall,
        **percentiles(latencies),
        "connections": connections,
        "errors": errors,
    }


async def run(bursts: int, requests: int) -> None:
    logging.getLogger("app.adapters.cache").setLevel(logging.ERROR)  # the failing-open warnings
    with (
        tempfile.TemporaryDirectory(prefix="pgr-bench-redis-") as directory,
        RedisServer(Path(directory)) as server,
    ):
        typer.echo(f"1. {bursts} cold bursts of 50 hits, limit 10, two CPU-bound threads beside")
        typer.echo("| variant | admitted per burst | bursts admitting exactly 10 |")
        typer.echo("|---|---|---:|")
        for name, make in VARIANTS.items():
            admitted = [
                await burst_admitted(server.url, make, f"{name}-{n}") for n in range(bursts)
            ]
            exact = sum(a == 10 for a in admitted)
            typer.echo(f"| {name} | {', '.join(map(str, admitted))} | {exact} of {bursts} |")
        typer.echo(f"\n2. {requests} requests (a rate-limit hit and a query-cache lookup each)")
        typer.echo(
            "| concurrency | variant | requests/s | p50 ms | p99 ms | connections | errors |"
        )
        typer.echo("|---:|---|---:|---:|---:|---:|---:|")
        for concurrency in (1, 8, 64):
            for name, make in VARIANTS.items():
                r = await round_trips(server.url, make, concurrency, requests)
                typer.echo(
                    f"| {concurrency} | {name} | {r['rps']:.0f} | {r['p50']:.3f} | {r['p99']:.3f}"
                    f" | {r['connections']:.0f} | {r['errors']:.0f} |"
                )


def main(
    bursts: Annotated[int, typer.Option(help="cold bursts per variant")] = 10,
    requests: Annotated[int, typer.Option(help="requests per concurrency level")] = 6000,
) -> None:
    asyncio.run(run(bursts, requests))


if __name__ == "__main__":
    typer.run(main)
