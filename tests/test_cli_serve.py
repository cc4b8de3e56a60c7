"""`pgrecall serve` as a real process on embedded defaults: kill -9, restart, clean stop."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parent.parent
PGRECALL = ROOT / ".venv" / "bin" / "pgrecall"
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 20
USER = {"X-User-Id": "cli-serve-user"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """One `pgrecall serve` process on a data dir, its output in a log file."""

    def __init__(self, data_dir: Path, port: int, name: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.log = data_dir.parent / f"{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
        env["PGRECALL_DATA_DIR"] = str(data_dir)
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


@pytest.fixture
def workdir() -> Iterator[Path]:
    # mkdtemp, not tmp_path: the unix socket lives in the data dir and its path must stay short.
    directory = Path(tempfile.mkdtemp(prefix="pgr-cli-"))
    try:
        yield directory
    finally:
        EmbeddedPostgres(directory / "data").stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_serve_survives_kill_9_and_stops_cleanly_on_sigterm(workdir: Path) -> None:
    data_dir = workdir / "data"
    port = _free_port()
    servers: list[Served] = []
    try:
        first = Served(data_dir, port, "first")
        servers.append(first)
        first.wait_ready()
        assert httpx.get(f"{first.base}/health").json() == {"status": "ok"}
        conversation = httpx.post(
            f"{first.base}/v1/conversations", json={"title": "kept"}, headers=USER
        )
        assert conversation.status_code == 201, conversation.text
        cid = conversation.json()["id"]
        message = httpx.post(
            f"{first.base}/v1/conversations/{cid}/messages",
            json={"role": "user", "content": "remember the blue notebook"},
            headers=USER,
        )
        assert message.status_code == 201, message.text

        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
        # The embedded server outlives its killed owner; the next serve attaches to it.
        assert EmbeddedPostgres(data_dir).is_running()

        second = Served(data_dir, port, "second")
        servers.append(second)
        second.wait_ready()
        fetched = httpx.get(f"{second.base}/v1/conversations/{cid}", headers=USER)
        assert fetched.status_code == 200 and fetched.json()["title"] == "kept"
        messages = httpx.get(f"{second.base}/v1/conversations/{cid}/messages", headers=USER)
        assert [m["content"] for m in messages.json()["items"]] == ["remember the blue notebook"]

        assert second.stop_with(signal.SIGTERM) == 0, second.output()
        assert not EmbeddedPostgres(data_dir).is_running(), second.output()
        assert "Traceback" not in second.output()
    finally:
        for server in servers:
            server.kill()


def test_second_serve_refused_and_sigint_stops_cleanly(workdir: Path) -> None:
    data_dir = workdir / "data"
    served = Served(data_dir, _free_port(), "owner")
    try:
        served.wait_ready()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
        env["PGRECALL_DATA_DIR"] = str(data_dir)
        rival = subprocess.run(
            [str(PGRECALL), "serve", "--port", str(_free_port())],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert rival.returncode == 1
        assert "another `pgrecall serve`" in rival.stderr
        # The owner is unaffected.
        assert httpx.get(f"{served.base}/ready").status_code == 200

        assert served.stop_with(signal.SIGINT) == 0, served.output()
        assert not EmbeddedPostgres(data_dir).is_running(), served.output()
        assert "Traceback" not in served.output()
        assert "Aborted" not in served.output()
    finally:
        served.kill()
