"""The service under test: `pgrecall serve` (or uvicorn with N workers) in a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from app.roles import ADMIN_ROLE, DEFAULT_APP_ROLE, user_of, with_user
from pgrecall.client import NO_RETRY, AsyncClient, PgrecallError

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU time of each live process (Postgres backends run as another user)."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            times = psutil.Process(pid).cpu_times()
            out[pid] = times.user + times.system
    return out


def server_env(database_url: str, port: int, settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of the server: the bench database, no Redis, no rate limit, overrides."""
    env = dict(os.environ)
    env.pop("PGRECALL_REDIS_URL", None)  # uncached path: every query embeds and searches
    if user_of(database_url) == DEFAULT_APP_ROLE:  # admin work as the admin role (app/roles.py)
        env["PGRECALL_ADMIN_DATABASE_URL"] = with_user(database_url, ADMIN_ROLE)
    env.update(
        {
            "PGRECALL_DATABASE_URL": database_url,
            "PGRECALL_PORT": str(port),
            "PGRECALL_RATE_LIMIT_PER_MINUTE": "0",
            "PGRECALL_MIGRATE_ON_START": "false",
        }
    )
    env.update({f"PGRECALL_{k.upper()}": v for k, v in settings.items()})
    return env


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    base_url: str
    log: IO[bytes]
    startup_s: float = 0.0
    peak_rss: int = 0
    _samples: list[int] = field(default_factory=list)

    def rss(self) -> int:
        """Resident memory of the server and its worker processes, in bytes."""
        try:
            proc = psutil.Process(self.process.pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        self.peak_rss = max(self.peak_rss, total)
        return total

    def pids(self) -> list[int]:
        """The server process and its workers."""
        try:
            proc = psutil.Process(self.process.pid)
            return [proc.pid, *(c.pid for c in proc.children(recursive=True))]
        except psutil.NoSuchProcess:
            return []

    async def sample_rss(self, interval_s: float = 0.25) -> None:
        """Track peak RSS until cancelled."""
        while True:
            self.rss()
            await asyncio.sleep(interval_s)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the server's process group (it is ours: started in a new session)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout_s)
        self.log.close()


async def start_server(
    database_url: str,
    log_path: Path,
    settings: Mapping[str, str],
    *,
    workers: int = 1,
    timeout_s: float = 120.0,
    checkout: Path = ROOT,
) -> Server:
    """Start the service on a free port and wait until /health answers. `checkout`: the
    working tree whose code serves, with its own .venv (bench.compare's other side)."""
    port = free_port()
    python = sys.executable if checkout == ROOT else str(checkout / ".venv/bin/python")
    if workers == 1:
        command = [python, "-m", "app.cli", "serve", "--port", str(port)]
    else:
        command = [
            python,
            "-m",
            "uvicorn",
            "--factory",
            "bench.asgi:create",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    started = time.perf_counter()
    # Popen returns at once; the server outlives this coroutine and is stopped synchronously.
    process = subprocess.Popen(  # noqa: ASYNC220
        command,
        cwd=checkout,
        env=server_env(database_url, port, settings),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Server(process, f"http://127.0.0.1:{port}", log)
    # This loop is the retry: each probe is one request (not listening yet = PgrecallError).
    probe = AsyncClient(server.base_url, timeout=2.0, retry=NO_RETRY)
    async with probe:
        while True:
            if process.poll() is not None:
                server.stop()
                raise RuntimeError(f"server exited with {process.returncode}; see {log_path}")
            with contextlib.suppress(PgrecallError):
                await probe.health()
                break
            if time.perf_counter() - started > timeout_s:
                server.stop()
                raise RuntimeError(f"server not healthy after {timeout_s:.0f}s; see {log_path}")
            await asyncio.sleep(0.2)
    server.startup_s = time.perf_counter() - started
    return server
