"""`pgrecall serve` as a real process on embedded defaults: kill -9, restart, clean stop."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.embedded import EmbeddedPostgres
from tests.served import PGRECALL, Served, free_port

USER = {"X-User-Id": "cli-serve-user"}


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
    port = free_port()
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
    served = Served(data_dir, free_port(), "owner")
    try:
        served.wait_ready()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
        env["PGRECALL_DATA_DIR"] = str(data_dir)
        rival = subprocess.run(
            [str(PGRECALL), "serve", "--port", str(free_port())],
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
