"""The embedded Postgres lifecycle in its own data dir: start, attach, stop, restart, stale pids."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from app.embedded import EmbeddedPostgres
from app.supervisor import PostgresSupervisor


@pytest.fixture(scope="module")
def shared_dir() -> Iterator[Path]:
    """One data dir for the module (initdb once); each test finds its server stopped."""
    # mkdtemp, not tmp_path: a short path keeps the unix socket inside the data dir.
    directory = Path(tempfile.mkdtemp(prefix="pgr-emb-"))
    try:
        yield directory
    finally:
        EmbeddedPostgres(directory).stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def data_dir(shared_dir: Path) -> Iterator[Path]:
    """The module's data dir with no server running before or after the test, whatever order
    the tests run in (a test that leaves it running would make the next one attach)."""
    EmbeddedPostgres(shared_dir).stop()
    yield shared_dir
    EmbeddedPostgres(shared_dir).stop()


async def _execute(server: EmbeddedPostgres, sql: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(server.dsn)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


def _dead_pid() -> int:
    """A pid that certainly belongs to no process: a child that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def test_start_attach_stop_restart_keeps_data(data_dir: Path) -> None:
    first = EmbeddedPostgres(data_dir)
    url = first.start()
    assert first.started_here and first.is_running()
    assert url.startswith("postgresql+asyncpg://") and str(first.socket_dir) in url
    assert (first.pgdata / "PG_VERSION").exists()
    await _execute(first, "CREATE TABLE kept (v text)")
    await _execute(first, "INSERT INTO kept VALUES ('one')")
    pid = first.postmaster().pid  # type: ignore[union-attr]

    # A second object (a second process, in real life) attaches instead of starting another.
    second = EmbeddedPostgres(data_dir)
    assert second.start() == url
    assert not second.started_here
    assert second.postmaster().pid == pid  # type: ignore[union-attr]
    assert [r["v"] for r in await _execute(second, "SELECT v FROM kept")] == ["one"]

    second.stop()
    assert not first.is_running() and not second.is_running()
    second.stop()  # stopping a stopped server is a no-op

    third = EmbeddedPostgres(data_dir)
    third.start()
    assert third.started_here
    assert [r["v"] for r in await _execute(third, "SELECT v FROM kept")] == ["one"]


async def test_restart_after_kill_9_keeps_data(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir)
    server.start()
    await _execute(server, "CREATE TABLE IF NOT EXISTS crash (v int)")
    await _execute(server, "INSERT INTO crash VALUES (42)")
    server.kill()
    assert not server.is_running()
    assert (server.pgdata / "postmaster.pid").exists()  # stale, left by the crash
    again = EmbeddedPostgres(data_dir)
    again.start()
    assert again.started_here
    assert [r["v"] for r in await _execute(again, "SELECT v FROM crash")] == [42]


def test_the_server_runs_in_its_own_session(data_dir: Path) -> None:
    """A Ctrl-C or SIGTERM to pgrecall's process group must not reach Postgres: pgrecall
    drains its requests first and then stops the server itself."""
    server = EmbeddedPostgres(data_dir)
    server.start()
    pid = server.postmaster().pid  # type: ignore[union-attr]
    assert os.getsid(pid) != os.getsid(0)
    assert os.getpgid(pid) != os.getpgid(0)


def test_crashed_tells_a_kill_from_a_clean_stop(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir)
    server.start()
    assert not server.crashed()  # running
    server.stop()
    assert not server.crashed()  # shut down cleanly: no pid file
    server.start()
    server.kill()
    assert server.crashed()  # the pid file of a dead postmaster
    server.start()
    assert not server.crashed()


async def test_the_supervisor_heals_a_crash_and_leaves_a_clean_stop(
    data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedPostgres(data_dir)
    server.start()
    supervisor = PostgresSupervisor(server)
    assert await supervisor.check() and supervisor.restarts == 0

    server.kill()
    assert await supervisor.check()
    assert server.is_running() and supervisor.restarts == 1
    assert await _execute(server, "SELECT 1 AS one")

    server.stop()  # on purpose (pg_ctl stop, a service manager stopping the service)
    with caplog.at_level(logging.WARNING, logger="app.supervisor"):
        assert not await supervisor.check()
        assert not await supervisor.check()
    assert not server.is_running() and supervisor.restarts == 1
    stopped = [r for r in caplog.records if "shut down cleanly" in r.getMessage()]
    assert len(stopped) == 1  # said once, not every second
    server.start()


async def test_stale_handle_pids_are_pruned(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir)
    server.start()
    server.stop()
    dead = [_dead_pid(), _dead_pid()]
    handles = server.pgdata / ".handle_pids.json"
    handles.write_text(json.dumps(dead))
    server.start()
    assert server.is_running()
    remaining = json.loads(handles.read_text()) if handles.exists() else []
    assert not set(dead) & set(remaining)
    assert await _execute(server, "SELECT 1 AS one")


def test_a_long_temp_directory_too_puts_the_socket_in_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TMPDIR longer than a socket path allows (a test runner's per-worker directory, a deep
    CI workspace): the socket goes to /tmp, and the server starts and answers there."""
    long_temp = tmp_path / ("t" * 80)
    long_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_temp))
    server = EmbeddedPostgres(long_temp / "data")
    assert len(str(server.pgdata)) > 90
    assert server.socket_dir.parent == Path("/tmp")
    assert len(str(server.socket_dir / ".s.PGSQL.5432")) < 107
    try:
        server.start()
        assert server.is_running()
    finally:
        server.stop()


def test_long_data_dir_puts_socket_in_tmp() -> None:
    base = Path(tempfile.mkdtemp(prefix="pgr-long-"))
    try:
        deep = base / ("d" * 100)
        server = EmbeddedPostgres(deep)
        assert len(str(server.pgdata)) > 90
        assert server.socket_dir.parent == Path(tempfile.gettempdir())
        assert len(str(server.socket_dir / ".s.PGSQL.5432")) < 107
        assert f"host={server.socket_dir}" in server.url
    finally:
        shutil.rmtree(base, ignore_errors=True)


class _FailingFirstStart:
    """The states a real crash goes through when the first restart fails: the failed start
    removes the crashed server's pid file, so `crashed()` turns false before anything runs."""

    def __init__(self) -> None:
        self.running = False
        self.pid_file_left = True
        self.starts = 0

    def postmaster(self) -> object | None:
        return object() if self.running else None

    def crashed(self) -> bool:
        return self.pid_file_left

    def start(self) -> str:
        self.starts += 1
        self.pid_file_left = False
        if self.starts == 1:
            raise RuntimeError("pre-existing shared memory block is still in use")
        self.running = True
        return "url"


async def test_the_supervisor_keeps_healing_after_a_failed_start() -> None:
    embedded = _FailingFirstStart()
    supervisor = PostgresSupervisor(embedded)  # type: ignore[arg-type]
    assert not await supervisor.check()  # the first start failed
    assert await supervisor.check()  # still healing although the pid file is gone
    assert embedded.starts == 2 and supervisor.restarts == 1
