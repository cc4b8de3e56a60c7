"""The embedded Postgres lifecycle in its own data dir: start, attach, stop, restart, stale pids."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from app.embedded import EmbeddedPostgres


@pytest.fixture(scope="module")
def data_dir() -> Iterator[Path]:
    # mkdtemp, not tmp_path: a short path keeps the unix socket inside the data dir.
    directory = Path(tempfile.mkdtemp(prefix="pgr-emb-"))
    try:
        yield directory
    finally:
        EmbeddedPostgres(directory).stop()
        shutil.rmtree(directory, ignore_errors=True)


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
