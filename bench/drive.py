"""Load: realistic questions for a mix of users, sent over HTTP at fixed concurrency.

Requests go through the project's client (`pgrecall.client.AsyncClient`), built by the caller
with retries off (`NO_RETRY`): each sample is one request, as the service answered it.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.store import Store
from pgrecall.client import AsyncClient, PgrecallError


@dataclass(frozen=True)
class BenchQuery:
    user_id: str
    text: str
    big: bool


def make_queries(store: Store, count: int, *, big_share: float, seed: int) -> list[BenchQuery]:
    """Questions about one of the user's own memories (90%) or about anything (10%).

    Big users get `big_share` of the queries (they are few but must be measured); the rest
    are spread uniformly over the users with hundreds of items.
    """
    rng = random.Random(seed + 13)
    big = [u for u in store.users if u.big]
    small = [u for u in store.users if not u.big] or big
    queries = []
    for _ in range(count):
        user = rng.choice(big) if big and rng.random() < big_share else rng.choice(small)
        if rng.random() < 0.9:
            position = user.start + rng.randrange(user.size)
        else:
            position = rng.randrange(store.items)
        queries.append(BenchQuery(user.user_id, store.memory_at(position).question, user.big))
    return queries


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p95/p99/mean/max in ms, rounded for the report."""
    if not values:
        return {"n": 0}
    arr = np.asarray(values)
    return {
        "n": len(values),
        "p50": round(float(np.percentile(arr, 50)), 2),
        "p95": round(float(np.percentile(arr, 95)), 2),
        "p99": round(float(np.percentile(arr, 99)), 2),
        "mean": round(float(arr.mean()), 2),
        "max": round(float(arr.max()), 2),
    }


@dataclass
class _Sample:
    latency_ms: float
    big: bool
    ok: bool
    returned: int


async def _one(client: AsyncClient, query: BenchQuery) -> _Sample:
    """One query_memory call; an error answer is a failed sample, a broken connection stops."""
    started = time.perf_counter()
    try:
        body = await client.as_user(query.user_id).query_memory(query.text)
    except PgrecallError as exc:
        if exc.status == 0:  # no answer at all (connection or timeout): the run is broken
            raise
        return _Sample((time.perf_counter() - started) * 1000, query.big, False, 0)
    latency = (time.perf_counter() - started) * 1000
    ok = body.metadata.error is None and body.metadata.degraded is None
    return _Sample(latency, query.big, ok, len(body.memories))


async def run_level(
    client: AsyncClient,
    queries: list[BenchQuery],
    *,
    concurrency: int,
    requests: int,
    time_cap_s: float,
    offset: int = 0,
    keep_latencies: bool = False,
) -> dict[str, Any]:
    """`requests` tool calls from `concurrency` workers (stopping early at the time cap); with
    `keep_latencies`, every call's latency too (`latencies_ms`, for percentiles over bursts)."""
    samples: list[_Sample] = []
    next_index = 0
    started = time.perf_counter()
    deadline = started + time_cap_s

    async def worker() -> None:
        nonlocal next_index
        while next_index < requests and time.perf_counter() < deadline:
            query = queries[(offset + next_index) % len(queries)]
            next_index += 1
            samples.append(await _one(client, query))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    good = [s for s in samples if s.ok]
    kept = {"latencies_ms": [s.latency_ms for s in samples]} if keep_latencies else {}
    return kept | {
        "concurrency": concurrency,
        "requested": requests,
        "completed": len(samples),
        "errors": len(samples) - len(good),
        "capped": len(samples) < requests,
        "wall_s": round(wall, 2),
        "throughput_rps": round(len(samples) / wall, 1) if wall else 0.0,
        "latency_ms": percentiles([s.latency_ms for s in samples]),
        "big_user_latency_ms": percentiles([s.latency_ms for s in samples if s.big]),
        "small_user_latency_ms": percentiles([s.latency_ms for s in samples if not s.big]),
        "mean_memories_returned": round(float(np.mean([s.returned for s in good])), 2)
        if good
        else 0.0,
    }


async def run_alternately(
    client: AsyncClient, first: list[BenchQuery], second: list[BenchQuery], *, requests: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`requests` calls of each list at concurrency 1, one of `first` then one of `second` in
    turn: both see the same machine and the same background work (an import's autovacuum),
    which two levels run one after the other do not. Latency percentiles of each list."""
    latencies: tuple[list[float], list[float]] = ([], [])
    for i in range(requests):
        for queries, out in zip((first, second), latencies, strict=True):
            out.append((await _one(client, queries[i % len(queries)])).latency_ms)
    return percentiles(latencies[0]), percentiles(latencies[1])


async def timing_breakdown(
    client: AsyncClient,
    queries: list[BenchQuery],
    samples: int,
    *,
    limit: int = 10,
    min_score: float = 0.3,
) -> dict[str, Any]:
    """Where the time goes, from /v1/memory/query's own timings at concurrency 1.

    The service reports query_embedding_ms and retrieval_ms as whole (floored) milliseconds;
    0.5 ms is added to each mean to undo the floor on average. retrieval = candidate SQL
    (keyword, vector, fetch) plus ranking; other = HTTP, validation, packing, JSON.
    """
    total: list[float] = []
    embedding: list[float] = []
    retrieval: list[float] = []
    for query in queries[:samples]:
        started = time.perf_counter()
        body = await client.as_user(query.user_id).memory_query(
            query.text, limit=limit, min_score=min_score
        )
        total.append((time.perf_counter() - started) * 1000)
        embedding.append(body.query_embedding_ms)
        retrieval.append(body.retrieval_ms)
    mean_total = float(np.mean(total))
    mean_embedding = float(np.mean(embedding)) + 0.5
    mean_retrieval = float(np.mean(retrieval)) + 0.5
    other = max(0.0, mean_total - mean_embedding - mean_retrieval)
    return {
        "samples": len(total),
        "mean_total_ms": round(mean_total, 2),
        "mean_embedding_ms": round(mean_embedding, 2),
        "mean_retrieval_ms": round(mean_retrieval, 2),
        "mean_other_ms": round(other, 2),
        "share": {
            "embedding": round(mean_embedding / mean_total, 3),
            "database": round(mean_retrieval / mean_total, 3),
            "packing_and_other": round(other / mean_total, 3),
        },
    }
