#!/usr/bin/env python
"""Benchmark: how fast are the admin console's pages for a user with 10k memories? (prints figures)

Starts a throwaway embedded Postgres and the app (uvicorn on a loopback port, admin key set, no
Redis, so nothing is served from a cache), seeds one user with `--memories` memories through
the admin bulk API and `--conversations` conversations of 50 messages, signs in to the console
and times each page over real HTTP (`--repeat` requests after 3 warm-ups), all through the
project's client (`pgrecall.client.Client`, its `console`; retries off). Target: every page
under 100 ms at the median (pages are paginated: 50 rows). `GET /health` (no work) is timed in
the same run as the floor, and the machine's load average is printed before and after.

    .venv/bin/python scripts/bench_console.py [--memories 10000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import uvicorn
from pydantic import SecretStr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.config import Settings  # noqa: E402
from app.embedded import EmbeddedPostgres  # noqa: E402
from app.main import create_app  # noqa: E402
from app.migrate import upgrade_head  # noqa: E402
from app.roles import DEFAULT_APP_ROLE, ensure_service_role, with_user  # noqa: E402
from bench.server import free_port  # noqa: E402
from pgrecall.client import NO_RETRY, Client, ConsolePage, PgrecallError  # noqa: E402

ADMIN_KEY = "bench-console-admin-key"
USER = "bench-console-user"
TOPICS = ["garden", "train", "invoice", "museum", "recipe", "bicycle", "harbour", "concert"]
TYPES = ["fact", "preference", "decision", "note"]


def memory_text(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    detail = i * 7919 % 10007
    return f"Memory {i}: the user mentioned the {topic} on day {i % 365} with detail {detail}"


def serve(settings: Settings) -> tuple[uvicorn.Server, threading.Thread, str]:
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise SystemExit("the app did not start")
        time.sleep(0.1)
    return server, thread, f"http://127.0.0.1:{port}"


def seed(client: Client, memories: int, conversations: int) -> tuple[str, str]:
    """The user's memories (admin bulk API) and conversations; returns a memory and a
    conversation id."""
    started = time.perf_counter()
    first = ""
    for start in range(0, memories, 1000):
        items = [
            {"user_id": USER, "content": memory_text(i), "type": TYPES[i % 4]}
            for i in range(start, min(start + 1000, memories))
        ]
        first = first or str(client.create_memories(items).items[0].id)
    conversation = ""
    for c in range(conversations):
        created = client.create_conversation(f"conversation {c}")
        conversation = conversation or str(created.id)
        messages = [
            {"role": "user" if m % 2 == 0 else "assistant", "content": memory_text(c * 50 + m)}
            for m in range(50)
        ]
        client.import_messages(created.id, messages)
    print(
        f"seeded {memories} memories and {conversations} x 50 messages "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return first, conversation


def timed(name: str, request: Callable[[], object], repeat: int) -> list[float]:
    """Milliseconds per request after 3 warm-ups; anything but a 200 stops the benchmark."""
    times = []
    for n in range(repeat + 3):
        started = time.perf_counter()
        try:
            answer = request()
        except PgrecallError as exc:
            raise SystemExit(f"{name}: {str(exc)[:500]}") from exc
        elapsed = (time.perf_counter() - started) * 1000
        if isinstance(answer, ConsolePage) and answer.status != 200:
            raise SystemExit(f"{name}: {answer.status} (to {answer.location})")
        if n >= 3:
            times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the seeded database in this directory and reuse it on the next run",
    )
    args = parser.parse_args()

    work = args.keep or Path(tempfile.mkdtemp(prefix="pgr-bench-console-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)  # the embedded Postgres user must be able to enter it when run as root
    seeded = work / "seeded"
    pg = EmbeddedPostgres(work / "pg")
    try:
        url = pg.start()
        upgrade_head(url)
        asyncio.run(ensure_service_role(url, DEFAULT_APP_ROLE, create=True))
        settings = Settings(
            database_url=with_user(url, DEFAULT_APP_ROLE),
            migration_database_url=url,
            migrate_on_start=False,
            rate_limit_per_minute=0,
            data_dir=work,
            admin_api_key=SecretStr(ADMIN_KEY),
            MLFLOW_TRACKING_URI=f"sqlite:///{ROOT / 'mlruns' / 'mlflow.db'}",
        )
        server, thread, base = serve(settings)
        try:
            # One client, one connection pool, as one admin's browser; retries off (each
            # request is timed once); seeding posts 1000 memories at a time, hence the timeout.
            with Client(
                base, user_id=USER, admin_key=ADMIN_KEY, timeout=600, retry=NO_RETRY
            ) as client:
                if seeded.exists():
                    memory_id, conversation_id = seeded.read_text().split()
                    print(f"reusing the seeded database in {work}")
                else:
                    memory_id, conversation_id = seed(client, args.memories, args.conversations)
                    if args.keep:
                        seeded.write_text(f"{memory_id} {conversation_id}")
                console = client.console
                console.login()
                last_page = max(1, -(-args.memories // 50))
                user = {"user": USER}
                pages: list[tuple[str, Callable[[], object]]] = [
                    ("GET /health (floor: no work)", client.health),
                    ("users", partial(console.page, "/users")),
                    ("users, search by id", partial(console.page, "/users", {"q": "bench"})),
                    ("user: memories page 1", partial(console.page, "/user", user)),
                    (
                        f"user: memories page {last_page} (last)",
                        partial(console.page, "/user", {**user, "page": last_page}),
                    ),
                    (
                        "user: type filter",
                        partial(console.page, "/user", {**user, "type": "decision"}),
                    ),
                    ("user: text filter", partial(console.page, "/user", {**user, "q": "harbour"})),
                    (
                        "user: live and deleted",
                        partial(console.page, "/user", {**user, "deleted": "all"}),
                    ),
                    ("memory", partial(console.page, "/memory", {**user, "id": memory_id})),
                    ("conversations", partial(console.page, "/conversations", user)),
                    (
                        "conversation messages",
                        partial(console.page, "/conversation", {**user, "id": conversation_id}),
                    ),
                    ("ask as this user (form)", partial(console.page, "/ask", user)),
                    (
                        "ask as this user (query + explanation)",
                        partial(console.submit, "/ask", {"query": "what about the harbour?"}, user),
                    ),
                    ("purge (counts)", partial(console.page, "/purge", user)),
                    ("health", partial(console.page, "/health")),
                ]
                load_before = os.getloadavg()
                results = [(name, timed(name, request, args.repeat)) for name, request in pages]
                load_after = os.getloadavg()
        finally:
            server.should_exit = True
            thread.join(30)
    finally:
        pg.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    floor = statistics.median(results[0][1])
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; {args.repeat} requests a page"
    )
    print(f"{'page':44} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'p50/floor':>10}  <100 ms")
    for name, times in results:
        ordered = sorted(times)
        p50 = statistics.median(ordered)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        ok = "yes" if p50 < 100 else "NO"
        print(f"{name:44} {p50:8.1f} {p95:8.1f} {ordered[-1]:8.1f} {p50 / floor:10.1f}  {ok}")


if __name__ == "__main__":
    main()
