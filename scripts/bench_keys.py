#!/usr/bin/env python
"""Benchmark: wall time of `pgrecall keys create` with a server running (prints figures).

Starts `pgrecall serve` on a fresh embedded data dir (or uses --server URL of one already
running), then runs the console script `.venv/bin/pgrecall keys create` as a subprocess:
  service   --runs times against the running service (its admin API; the usual case)
  database  --db-runs times with --server pointing at a port where nothing listens, so the
            command takes its database path (attached to the same running embedded server)
Prints p50 and max of each and their ratio, with the machine and its load. Target: service
p50 and max under 1.5 s.

    .venv/bin/python scripts/bench_keys.py [--runs 20] [--db-runs 3] [--server URL]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pgrecall.client import NO_RETRY, Client, PgrecallError

ROOT = Path(__file__).resolve().parent.parent
PGRECALL = ROOT / ".venv" / "bin" / "pgrecall"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"serve exited with {process.returncode}")
        try:
            with Client(base, retry=NO_RETRY, timeout=2) as client:
                if client.ready().get("ready"):
                    return
        except PgrecallError:
            pass
        time.sleep(0.25)
    sys.exit(f"serve not ready within {timeout_s} s")


def time_create(server: str, env: dict[str, str], runs: int) -> list[float]:
    times = []
    for i in range(runs):
        started = time.perf_counter()
        done = subprocess.run(
            [str(PGRECALL), "keys", "create", "--user", f"bench-{i}", "--server", server],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        times.append(time.perf_counter() - started)
        if done.returncode != 0 or not done.stdout.startswith("pgr_"):
            sys.exit(f"keys create failed ({done.returncode}): {done.stderr[-500:]}")
    return times


def machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.machine()}, {os.cpu_count()} cores"


def show(label: str, times: list[float]) -> float:
    p50 = statistics.median(times)
    print(f"{label:<9} runs {len(times):>3}  p50 {p50:.3f} s  max {max(times):.3f} s")
    return p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--db-runs", type=int, default=3)
    parser.add_argument("--server", help="a running service's base URL (skips starting one)")
    args = parser.parse_args()

    env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
    directory = Path(tempfile.mkdtemp(prefix="pgr-bench-keys-"))
    env["PGRECALL_DATA_DIR"] = str(directory / "data")
    process = None
    try:
        base = args.server
        if base is None:
            base = f"http://127.0.0.1:{free_port()}"
            log = (directory / "serve.log").open("wb")
            process = subprocess.Popen(
                [str(PGRECALL), "serve", "--port", base.rsplit(":", 1)[1]],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            wait_ready(base, process)
        print(f"machine: {machine()}")
        print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
        service = show("service", time_create(base, env, args.runs))
        if args.db_runs and process is not None:
            nobody = f"http://127.0.0.1:{free_port()}"
            database = show("database", time_create(nobody, env, args.db_runs))
            print(f"ratio database/service p50: {database / service:.1f}x")
        print(f"load after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
