#!/usr/bin/env python
"""Benchmark: does one user's bulk import slow down everyone else's queries? (prints figures)

Starts `pgrecall serve` on embedded defaults (a fresh data dir, no Redis: every query is
embedded), gives a reader user some history, then times the reader's
POST /v1/tools/query_memory one request at a time:
  idle    nothing else running
  loaded  while another user imports `--messages` long messages in one messages:bulk request
A writer user's single appends are timed the same way. Target: loaded p95 <= 2x idle p95.

    .venv/bin/python scripts/bench_fairness.py [--messages 1000] [--chars 4800]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.server import Server, free_port  # noqa: E402
from eval.metrics import percentile  # noqa: E402
from pgrecall.client import NO_RETRY, AsyncClient, Client, PgrecallError  # noqa: E402

WORDS = [
    "notebook",
    "garden",
    "museum",
    "ticket",
    "coffee",
    "meeting",
    "deadline",
    "project",
    "budget",
    "review",
    "train",
    "holiday",
    "recipe",
    "concert",
    "library",
    "bicycle",
    "doctor",
    "invoice",
    "birthday",
    "weekend",
    "harbour",
]
QUESTIONS = [
    "where did I leave the blue notebook?",
    "what did we decide about the project deadline?",
    "which museum did I want to visit?",
    "what was the recipe my sister sent?",
    "when is the dentist appointment?",
    "what did I say about the bicycle repair?",
    "who is organising the birthday dinner?",
    "which concert tickets did I buy?",
    "how much was the last invoice?",
    "what did the doctor recommend?",
]


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} cores, load average {load}"


def long_text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:chars]


def start_server(data_dir: Path, log_path: Path) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
    env |= {"PGRECALL_DATA_DIR": str(data_dir), "PGRECALL_PORT": str(port)}
    log = log_path.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + 180
    with Client(server.base_url, timeout=2, retry=NO_RETRY) as probe:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                server.stop()
                raise SystemExit(f"server exited with {process.returncode}; see {log_path}")
            try:
                if probe.ready()["ready"]:
                    return server
            except PgrecallError:
                pass  # not listening yet
            time.sleep(0.3)
    server.stop()
    raise SystemExit(f"server not ready within 180 s; see {log_path}")


class Timings:
    def __init__(self) -> None:
        self.query_ms: list[float] = []
        self.append_ms: list[float] = []
        self.degraded = 0
        self.errors = 0

    def line(self, name: str) -> str:
        q, a = self.query_ms, self.append_ms
        return (
            f"{name:<7} query_memory n={len(q):4d} p50={percentile(q, 50):7.1f} ms "
            f"p95={percentile(q, 95):7.1f} ms max={max(q, default=0.0):7.1f} ms | single append "
            f"n={len(a):3d} p50={percentile(a, 50):7.1f} ms p95={percentile(a, 95):7.1f} ms | "
            f"degraded {self.degraded}, errors {self.errors}"
        )


async def conversation(client: AsyncClient, user: str) -> str:
    return str((await client.as_user(user).create_conversation("bench")).id)


async def measure(
    client: AsyncClient,
    timings: Timings,
    *,
    reader: str,
    writer_conversation: str,
    writer: str,
    rng: random.Random,
    count: int | None = None,
    until: asyncio.Task[object] | None = None,
) -> None:
    """One request at a time: a query, and a single append every 5th round."""
    i = 0
    while (count is not None and i < count) or (until is not None and not until.done()):
        question = f"{rng.choice(QUESTIONS)} ({i})"  # distinct text: nothing is cached
        started = time.perf_counter()
        try:
            answer = await client.as_user(reader).query_memory(question)
        except PgrecallError:
            answer = None
        timings.query_ms.append((time.perf_counter() - started) * 1000)
        if answer is None:
            timings.errors += 1
        elif answer.metadata.degraded:
            timings.degraded += 1
        if i % 5 == 4:
            started = time.perf_counter()
            try:
                await client.as_user(writer).append_message(
                    writer_conversation, "user", long_text(rng, 300)
                )
                failed = False
            except PgrecallError:
                failed = True
            timings.append_ms.append((time.perf_counter() - started) * 1000)
            timings.errors += failed
        i += 1


async def run(args: argparse.Namespace, base_url: str) -> None:
    rng = random.Random(7)
    reader, writer, importer = "bench-reader", "bench-writer", "bench-importer"
    async with AsyncClient(base_url, timeout=600, retry=NO_RETRY) as client:
        history = await conversation(client, reader)
        seed = [{"role": "user", "content": f"{q} {long_text(rng, 200)}"} for q in QUESTIONS * 5]
        await client.as_user(reader).import_messages(history, seed)
        writer_conversation = await conversation(client, writer)
        target = await conversation(client, importer)
        bulk = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": long_text(rng, args.chars)}
            for i in range(args.messages)
        ]
        options = {
            "reader": reader,
            "writer": writer,
            "writer_conversation": writer_conversation,
            "rng": rng,
        }
        # Warm-up (first requests load code paths), then idle.
        await measure(client, Timings(), count=10, **options)  # type: ignore[arg-type]
        idle = Timings()
        await measure(client, idle, count=args.idle_queries, **options)  # type: ignore[arg-type]
        print(idle.line("idle"), flush=True)

        async def import_all() -> tuple[int, float]:
            started = time.perf_counter()
            async with AsyncClient(
                base_url, user_id=importer, timeout=3600, retry=NO_RETRY
            ) as importer_client:
                try:
                    await importer_client.import_messages(target, bulk)
                    status = 201
                except PgrecallError as exc:
                    status = exc.status
            return status, time.perf_counter() - started

        importing = asyncio.create_task(import_all())
        await asyncio.sleep(1.0)  # let the import's embedding start
        loaded = Timings()
        await measure(client, loaded, until=importing, **options)  # type: ignore[arg-type]
        status, seconds = await importing
        print(loaded.line("loaded"), flush=True)
        print(
            f"import  {args.messages} x {args.chars} chars: HTTP {status} in {seconds:.1f} s "
            f"({seconds / args.messages * 1000:.0f} ms per message)"
        )
        ratio = percentile(loaded.query_ms, 95) / percentile(idle.query_ms, 95)
        verdict = "within" if ratio <= 2 else "NOT within"
        print(f"ratio   loaded p95 / idle p95 = {ratio:.2f} ({verdict} the 2x target)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--chars", type=int, default=4800)
    parser.add_argument("--idle-queries", type=int, default=100)
    args = parser.parse_args()
    print(f"machine {machine()}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="pgr-fair-"))
    work.chmod(0o755)  # the embedded Postgres user must be able to enter it when run as root
    server = start_server(work / "data", work / "serve.log")
    try:
        asyncio.run(run(args, server.base_url))
    finally:
        server.stop()
        print(f"machine at the end: load average {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
        problems = [
            line
            for line in (work / "serve.log").read_text(errors="replace").splitlines()
            if " ERROR " in line or "Error" in line
        ]
        if problems:
            print("server log errors:", *problems[:20], sep="\n  ")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
