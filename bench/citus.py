"""query_memory on a Citus cluster beside a single node, in one run (docs/scaling.md).

    python -m bench.citus --single postgresql://pgrecall_app@HOST:PORT/pgrecall \\
        --citus postgresql://pgrecall_app@HOST:PORT/pgrecall [--users 40 --turns 60 --queries 200]

Both URLs are the service role's (the admin role, pgrecall_admin, logs in on the same servers
without a password), on databases already migrated (and, on the coordinator,
distributed: `pgrecall db distribute`). The bench runs the real app in-process on each (no
Redis, so no query cache), loads the same users through the HTTP routes (a conversation of
`--turns` turns each, plus one stored memory carrying a secret word of that user only), then asks
`/v1/tools/query_memory` the same questions on both, rotating which target goes first per
question so that the machine's load falls on all alike. The cluster is asked twice: as the
service runs (each user's reads on the worker that holds its shards: app/services/query/shards.py)
and with every read through the coordinator (`PGRECALL_CITUS_DIRECT_READS_TTL_S=0`, as before
that), the same data. It prints p50/p95 per target and their ratios to the single node, and counts
cross-user results: every user's secret word asked by the next user must come back 0 times
(and, as the control, each user's own word asked by that user must come back).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated

import typer

from app.adapters.embedder import LocalEmbedder
from app.config import Settings
from app.main import create_app
from app.roles import ADMIN_ROLE, with_user
from pgrecall.client import AsyncClient

PEOPLE = ("Ana", "Bruno", "Chen", "Dana", "Emil", "Fatima", "Goran", "Hana", "Ivan", "Jia")
TOPICS = (
    "the hiking trip to the Alps", "a new sourdough recipe", "the quarterly tax payment",
    "moving to Lisbon", "the Kubernetes migration", "a peanut allergy", "the piano lessons",
    "renewing the car insurance", "the kids' new school", "a broken ThinkPad",
)  # fmt: skip
SINGLE, CITUS, COORDINATOR = "single node", "citus", "citus, all through the coordinator"
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _turn(rng: random.Random) -> str:
    return f"{rng.choice(PEOPLE)} told me about {rng.choice(TOPICS)} on {rng.choice(DAYS)}."


@asynccontextmanager
async def _client(
    url: str, embedder: LocalEmbedder, direct_reads_ttl_s: float = 10.0
) -> AsyncIterator[AsyncClient]:
    settings = Settings(
        database_url=url,
        # the admin role on the same server (start-up reads the scope key as it)
        admin_database_url=with_user(url, ADMIN_ROLE),
        migrate_on_start=False,
        rate_limit_per_minute=0,
        redis_url=None,
        data_dir=Path("/tmp"),
        # 0: every read through the coordinator (the path before reads on the shard's worker)
        citus_direct_reads_ttl_s=direct_reads_ttl_s,
    )
    app = create_app(settings, embedder=embedder)
    async with app.router.lifespan_context(app), AsyncClient.for_app(app) as client:
        yield client


async def _load(client: AsyncClient, users: list[str], turns: int, seed: int) -> None:
    for n, user in enumerate(users):
        rng = random.Random(seed + n)
        pgr = client.as_user(user)
        conversation = await pgr.create_conversation()
        turns_of_user = [{"role": "user", "content": _turn(rng)} for _ in range(turns)]
        await pgr.import_messages(conversation.id, turns_of_user)
        await pgr.save_memory(f"My locker code word is {_secret(user)}", "fact")


def _secret(user: str) -> str:
    return "zq" + uuid.uuid5(uuid.NAMESPACE_URL, user).hex[:10]


async def _ask(client: AsyncClient, user: str, query: str) -> tuple[float, list[str]]:
    started = time.perf_counter()
    answer = await client.as_user(user).query_memory(query)
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, [m.content for m in answer.memories]


async def _run(single: str, citus: str, users: int, turns: int, queries: int, seed: int) -> None:
    embedder = LocalEmbedder()
    run = uuid.uuid4().hex[:8]
    names = [f"bench-{run}-{i}" for i in range(users)]
    targets = (SINGLE, CITUS, COORDINATOR)
    times: dict[str, list[float]] = {t: [] for t in targets}
    leaks = {t: 0 for t in targets}
    owned = {t: 0 for t in targets}
    async with (
        _client(single, embedder) as one,
        _client(citus, embedder) as many,
        _client(citus, embedder, direct_reads_ttl_s=0.0) as through,
    ):
        clients = {SINGLE: one, CITUS: many, COORDINATOR: through}
        for name, client in ((SINGLE, one), (CITUS, many)):  # the third reads the second's
            started = time.perf_counter()
            await _load(client, names, turns, seed)
            print(f"loaded {users} users x {turns} turns on {name} in "
                  f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        rng = random.Random(seed)
        # Warm-up: one question per user per target (connections, plans, model).
        for user in names:
            for client in clients.values():
                await _ask(client, user, _turn(rng))
        for i in range(queries):
            user = names[i % users]
            question = _turn(rng)
            order = list(clients)[i % 3 :] + list(clients)[: i % 3]  # each goes first in turn
            for name in order:
                elapsed, _ = await _ask(clients[name], user, question)
                times[name].append(elapsed)
        for n, user in enumerate(names):  # the next user's secret, asked by this one
            own, other = _secret(user), _secret(names[(n + 1) % users])
            for name, client in clients.items():
                _, found = await _ask(client, user, f"locker code word {other}")
                leaks[name] += sum(other in text for text in found)
                # The control: the same question about the user's own word finds it.
                _, found = await _ask(client, user, f"locker code word {own}")
                owned[name] += any(own in text for text in found)
    print(f"\nquery_memory, {queries} questions per target, concurrency 1 (ms)")
    print("| target | p50 | p95 | cross-user results | own word found |")
    print("|---|---:|---:|---:|---:|")
    p50, p95 = {}, {}
    for name, values in times.items():
        p50[name] = statistics.median(values)
        p95[name] = statistics.quantiles(values, n=20)[-1]
        found = f"{owned[name]}/{users}"
        print(f"| {name} | {p50[name]:.1f} | {p95[name]:.1f} | {leaks[name]} | {found} |")
    for name in (CITUS, COORDINATOR):
        print(f"\n{name} / single node p50: {p50[name] / p50[SINGLE]:.2f}x")
        print(f"{name} / single node p95: {p95[name] / p95[SINGLE]:.2f}x")


def main(
    single: Annotated[str, typer.Option(help="service-role URL of the single node")],
    citus: Annotated[str, typer.Option(help="service-role URL of the Citus coordinator")],
    users: int = 40,
    turns: int = 60,
    queries: int = 200,
    seed: int = 7,
) -> None:
    """query_memory p50/p95 on a Citus coordinator beside a single node, and cross-user hits."""
    asyncio.run(_run(single, citus, users, turns, queries, seed))


if __name__ == "__main__":
    typer.run(main)
