"""A real, throwaway redis-server on a unix socket, for tests (no pytest dependency)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

READY_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
# sun_path is 108 bytes on Linux (104 on macOS); stay well below both.
MAX_SOCKET_PATH = 100
_LOG_TAIL_CHARS = 2000


class RedisServer:
    """One redis-server process without persistence, listening only on `<tmp_dir>/redis.sock`.

    Pass a short directory, e.g. `Path(tempfile.mkdtemp(prefix="pgr-redis-"))`: pytest's
    tmp_path is often too long for a unix socket path.
    """

    def __init__(self, tmp_dir: Path) -> None:
        self.dir = Path(tmp_dir)
        self.socket_path = self.dir / "redis.sock"
        self.log_path = self.dir / "redis.log"
        if len(os.fsencode(self.socket_path)) >= MAX_SOCKET_PATH:
            raise ValueError(
                f"socket path {self.socket_path} is too long for a unix socket; "
                'use tempfile.mkdtemp(prefix="pgr-redis-")'
            )
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """URL for redis-py, e.g. unix:///tmp/pgr-redis-x/redis.sock."""
        return f"unix://{self.socket_path}"

    def is_running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server and wait until it answers PING."""
        if self.is_running():
            return
        executable = shutil.which("redis-server")
        if executable is None:
            raise RuntimeError(
                "redis-server not found on PATH; install the Debian package redis-server "
                "(apt-get install redis-server)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        command = [
            executable,
            "--port", "0",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--dir", str(self.dir),
        ]  # fmt: skip
        # The child keeps its own copy of the log descriptor; ours closes with the block.
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_ready()

    def stop(self) -> None:
        """Stop gracefully (SIGTERM) and wait; SIGKILL if it does not exit in time."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused server cannot handle SIGTERM
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._process = None

    def kill(self) -> None:
        """Kill abruptly (SIGKILL), as a crash would; the socket file stays behind."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        self._process = None

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections are accepted but never answered."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server continue (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop if running, then start again with an empty dataset."""
        self.stop()
        self.start()

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _signal(self, signum: signal.Signals) -> None:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError("redis-server is not running")
        self._process.send_signal(signum)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                self._process = None
                raise RuntimeError(f"redis-server exited during start:\n{self._log_tail()}")
            if self._answers_ping():
                return
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(
            f"redis-server did not answer PING within {READY_TIMEOUT_S:.0f}s:\n{self._log_tail()}"
        )

    def _answers_ping(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(0.5)
                sock.connect(str(self.socket_path))
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False  # not listening yet, or a stale socket file from a killed server

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError as exc:
            return f"(no log: {exc})"
