"""Benchmark: what the Redis caches do to query latency (not a test; prints figures).

Runs the service in-process on a throwaway embedded Postgres, with and without a real
redis-server, and times POST /v1/memory/query:
  no-redis     no cache at all
  cold         Redis on, first time each query is seen (embedding + result cache misses)
  embed-warm   query vectors cached, result cache bypassed (a different `limit`)
  result-warm  the same requests again: answered from the query result cache

    .venv/bin/python scripts/bench_cache.py [--memories 2000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.config import Settings
from app.services.memory import MemoryInput
from eval.harness import running_service
from eval.metrics import percentile

SUBJECTS = [
    "hiking",
    "pottery",
    "running",
    "chess",
    "sourdough",
    "kayaking",
    "python",
    "rust",
    "gardening",
    "jazz",
    "photography",
    "climbing",
    "yoga",
    "painting",
    "cycling",
]
PLACES = ["Lisbon", "Kyoto", "Denver", "Oslo", "Austin", "Porto", "Seoul", "Lyon"]
TEMPLATES = [
    "User has been into {s} since moving to {p} and practises it on weekends.",
    "Decided to spend more time on {s}; a friend in {p} recommended a class.",
    "User prefers {s} over {t} when they have a free evening.",
    "Note: asked about {s} gear shops near {p}.",
]


def texts(n: int, rng: random.Random) -> list[str]:
    out = {
        rng.choice(TEMPLATES).format(
            s=rng.choice(SUBJECTS), t=rng.choice(SUBJECTS), p=rng.choice(PLACES)
        )
        + f" (#{i})"
        for i in range(n)
    }
    return sorted(out)


def start_redis(directory: Path) -> subprocess.Popen[bytes]:
    sock = directory / "redis.sock"
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        if sock.exists():
            break
        time.sleep(0.05)
    return proc


async def timed(harness, user: str, queries: list[str], limit: int) -> list[float]:  # type: ignore[no-untyped-def]
    latencies = []
    for q in queries:
        t0 = time.perf_counter()
        await harness.query(user, q, limit=limit)
        latencies.append((time.perf_counter() - t0) * 1000)
    return latencies


def row(name: str, values: list[float]) -> str:
    return f"{name:12s} p50 {percentile(values, 50):7.2f} ms   p95 {percentile(values, 95):7.2f} ms"


async def run(memories: int, queries: int, redis_url: str | None) -> dict[str, list[float]]:
    rng = random.Random(7)
    settings = Settings(redis_url=redis_url, rate_limit_per_minute=0)
    user = "bench-cache-user"
    asks = [
        f"what does the user think about {rng.choice(SUBJECTS)} in {rng.choice(PLACES)}? ({i})"
        for i in range(queries)
    ]
    async with running_service(settings) as harness:
        await harness.add_memories(
            [MemoryInput(user_id=user, content=t, type="note") for t in texts(memories, rng)]
        )
        await timed(
            harness, user, asks[:5], limit=9
        )  # warm the process (JIT-free, but pools, plans)
        if redis_url is None:
            return {"no-redis": await timed(harness, user, asks, limit=10)}
        cold = await timed(harness, user, asks, limit=10)
        embed_warm = await timed(harness, user, asks, limit=11)
        result_warm = await timed(harness, user, asks, limit=11)
        stats = harness.resources.cache.stats
        print(
            f"embedding cache hit ratio {stats.embedding_hit_ratio():.3f}, "
            f"query cache hits {stats.query_hits} misses {stats.query_misses}"
        )
        return {"cold": cold, "embed-warm": embed_warm, "result-warm": result_warm}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    results = asyncio.run(run(args.memories, args.queries, None))
    directory = Path(tempfile.mkdtemp(prefix="pgr-bc-"))
    proc = start_redis(directory)
    try:
        results.update(
            asyncio.run(run(args.memories, args.queries, f"unix://{directory}/redis.sock"))
        )
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\n/v1/memory/query in-process, {args.memories} memories, {args.queries} queries each")
    for name, values in results.items():
        print(row(name, values))


if __name__ == "__main__":
    main()
