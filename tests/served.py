"""`pgrecall serve` as a real process for tests: start on a data dir, wait, signal, kill."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PGRECALL = ROOT / ".venv" / "bin" / "pgrecall"
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """One `pgrecall serve` process on a data dir, its output in a log file."""

    def __init__(
        self, data_dir: Path, port: int, name: str, settings: dict[str, str] | None = None
    ) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.log = data_dir.parent / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
        env["PGRECALL_DATA_DIR"] = str(data_dir)
        env.update(settings or {})
        with self.log.open("w") as out:
            self.process = subprocess.Popen(
                [str(PGRECALL), "serve", "--port", str(port)],
                env=env,
                cwd=data_dir.parent,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"serve exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.base}/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            time.sleep(0.25)
        pytest.fail(f"not ready within {READY_TIMEOUT_S} s:\n{self.output()}")

    def stop_with(self, sig: signal.Signals) -> int:
        self.process.send_signal(sig)
        try:
            return self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"serve did not exit within {STOP_TIMEOUT_S} s of {sig.name}:\n{self.output()}"
            )

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@contextmanager
def serving(prefix: str, settings: dict[str, str] | None = None) -> Iterator[Served]:
    """A ready `pgrecall serve` on its own embedded data dir, stopped and removed afterwards."""
    from app.embedded import EmbeddedPostgres

    # mkdtemp, not tmp_path: the unix socket lives in the data dir and its path must stay short.
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    served = Served(directory / "data", free_port(), "serve", settings)
    try:
        served.wait_ready()
        yield served
    finally:
        served.kill()
        EmbeddedPostgres(directory / "data").stop()
        shutil.rmtree(directory, ignore_errors=True)
