#!/usr/bin/env python
"""Benchmark: does PGRECALL_EXTRACTION=llm slow appending down? (prints figures)

Starts an embedded Postgres in a temp dir and two copies of the app in this process (ASGI, no
sockets, no Redis, the real local embedder), each driven by the project's client
(`AsyncClient.for_app`, retries off): one with extraction off, one with it on (jobs
queued, no worker tasks: only the append path is measured). The two are timed interleaved, in
random order per round, so machine load hits both alike:
  single  POST /v1/conversations/{id}/messages (one user turn)
  bulk    POST .../messages:bulk with `--bulk` turns, half of them user turns
It prints p50/p95/mean per path and the on/off ratio, and checks that the on path queued one
job per user turn and the off path none. Last, the queueing statement alone (1 and 25 turns,
in a transaction rolled back), which is all that the on path adds.

    .venv/bin/python scripts/bench_extraction_append.py [--rounds 300] [--bulk 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import create_async_engine  # noqa: E402

from app.adapters.embedder import LocalEmbedder  # noqa: E402
from app.config import ExtractionMode, Settings  # noqa: E402
from app.embedded import EmbeddedPostgres  # noqa: E402
from app.main import create_app  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user  # noqa: E402
from pgrecall.client import NO_RETRY, AsyncClient, PgrecallError  # noqa: E402

WORDS = [
    "garden",
    "museum",
    "ticket",
    "coffee",
    "meeting",
    "deadline",
    "project",
    "budget",
    "train",
    "holiday",
    "recipe",
]


def sentence(rng: random.Random) -> str:
    return "I " + " ".join(rng.choice(WORDS) for _ in range(12))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@asynccontextmanager
async def client(
    settings: Settings, embedder: LocalEmbedder, user: str
) -> AsyncIterator[AsyncClient]:
    """The project's client on an app in this process (ASGI: no socket), acting for `user`."""
    app = create_app(settings, embedder=embedder)
    async with (
        app.router.lifespan_context(app),
        AsyncClient.for_app(app, user_id=user, retry=NO_RETRY) as c,
    ):
        yield c


async def conversation(c: AsyncClient) -> str:
    return str((await c.create_conversation("bench")).id)


async def timed(append: Awaitable[object]) -> float:
    """Milliseconds until the append is stored (201); a refused one stops the benchmark."""
    start = time.perf_counter()
    try:
        await append
    except PgrecallError as exc:
        raise SystemExit(f"append failed: {exc}") from exc
    return (time.perf_counter() - start) * 1000


def report(name: str, off: list[float], on: list[float]) -> None:
    rows = [("off", off), ("llm", on)]
    for label, values in rows:
        print(
            f"{name:6} {label:4} n={len(values):4}  p50 {pct(values, 0.5):7.2f} ms  "
            f"p95 {pct(values, 0.95):7.2f} ms  mean {statistics.fmean(values):7.2f} ms"
        )
    print(
        f"{name:6} ratio llm/off  p50 {pct(on, 0.5) / pct(off, 0.5):.3f}  "
        f"p95 {pct(on, 0.95) / pct(off, 0.95):.3f}  "
        f"mean {statistics.fmean(on) / statistics.fmean(off):.3f}  "
        f"(mean difference {statistics.fmean(on) - statistics.fmean(off):+.2f} ms)"
    )


async def time_enqueue(owner: str, user: str, cid: str, rounds: int) -> dict[int, list[float]]:
    """The job INSERT alone, on the off user's real messages, rolled back each time."""
    from app.db import create_sessionmaker, user_session
    from app.repositories.extraction import ExtractionRepository

    engine = create_async_engine(owner)
    sessions = create_sessionmaker(engine)
    async with engine.connect() as conn:
        ids = list(
            (
                await conn.execute(
                    text("SELECT id FROM messages WHERE conversation_id = :c AND role = 'user'"),
                    {"c": cid},
                )
            ).scalars()
        )
    out: dict[int, list[float]] = {1: [], 25: []}
    try:
        for n in range(rounds):
            for size in out:
                async with user_session(sessions, user) as session:
                    await session.begin()
                    await session.execute(text("SELECT 1"))  # the scope's set_config is not timed
                    batch = ids[(n * size) % (len(ids) - size) :][:size]
                    start = time.perf_counter()
                    await ExtractionRepository(session).enqueue(user, uuid.UUID(cid), batch)
                    out[size].append((time.perf_counter() - start) * 1000)
                    await session.rollback()
    finally:
        await engine.dispose()
    return out


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    directory = Path(tempfile.mkdtemp(prefix="pgr-bench-x-"))
    os.chmod(directory, 0o755)
    server = EmbeddedPostgres(directory)
    owner = server.start()
    try:
        await asyncio.to_thread(upgrade_head, owner)
        await ensure_service_role(owner, DEFAULT_APP_ROLE, create=True)
        base = Settings(
            database_url=with_user(owner, DEFAULT_APP_ROLE),
            migration_database_url=owner,
            migrate_on_start=False,
            rate_limit_per_minute=0,
            write_rate_limit_per_minute=0,
            data_dir=directory,
        )
        on_settings = base.model_copy(
            update={
                "extraction": ExtractionMode.LLM,
                "extraction_base_url": "http://127.0.0.1:9/v1",  # never called: no workers
                "extraction_workers": 0,
            }
        )
        embedder = LocalEmbedder()
        users = {
            "off": f"bench-off-{uuid.uuid4().hex[:8]}",
            "on": f"bench-on-{uuid.uuid4().hex[:8]}",
        }
        async with AsyncExitStack() as stack:
            off = await stack.enter_async_context(client(base, embedder, users["off"]))
            on = await stack.enter_async_context(client(on_settings, embedder, users["on"]))
            clients = {"off": off, "on": on}
            cids = {k: await conversation(clients[k]) for k in clients}
            single: dict[str, list[float]] = {"off": [], "on": []}
            bulk: dict[str, list[float]] = {"off": [], "on": []}
            for n in range(args.warmup + args.rounds):
                order = ["off", "on"]
                rng.shuffle(order)
                content = sentence(rng)
                for k in order:
                    ms = await timed(clients[k].append_message(cids[k], "user", content))
                    if n >= args.warmup:
                        single[k].append(ms)
            for n in range(args.bulk_rounds):
                order = ["off", "on"]
                rng.shuffle(order)
                turns = [
                    {"role": "user" if i % 2 == 0 else "assistant", "content": sentence(rng)}
                    for i in range(args.bulk)
                ]
                for k in order:
                    ms = await timed(clients[k].import_messages(cids[k], turns))
                    if n > 0:  # the first round warms up
                        bulk[k].append(ms)
        enqueue = await time_enqueue(owner, users["off"], cids["off"], args.rounds)
        engine = create_async_engine(owner)
        async with engine.connect() as conn:
            jobs = {
                k: int(
                    await conn.scalar(
                        text("SELECT count(*) FROM extraction_jobs WHERE user_id = :u"),
                        {"u": users[k]},
                    )
                    or 0
                )
                for k in users
            }
        await engine.dispose()
        user_turns = args.warmup + args.rounds + args.bulk_rounds * ((args.bulk + 1) // 2)
        print(f"load average before/after: {args.load_before} / {os.getloadavg()}")
        print(f"jobs queued: off {jobs['off']}, llm {jobs['on']} (user turns sent: {user_turns})")
        report("single", single["off"], single["on"])
        report("bulk", bulk["off"], bulk["on"])
        for n, values in enqueue.items():
            print(
                f"queue statement alone, {n:2} turn(s): p50 {pct(values, 0.5):.3f} ms  "
                f"p95 {pct(values, 0.95):.3f} ms"
            )
        if jobs["off"] != 0 or jobs["on"] != user_turns:
            raise SystemExit("job counts are wrong")
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--bulk", type=int, default=50)
    parser.add_argument("--bulk-rounds", type=int, default=41)
    parser.add_argument("--seed", type=int, default=7)
    ns = parser.parse_args()
    ns.load_before = os.getloadavg()
    asyncio.run(main(ns))
