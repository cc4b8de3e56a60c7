"""`pgrecall doctor` and the start-up checks of `serve`, against real servers and real failures."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from pydantic import SecretStr

from app.config import Settings
from app.doctor import explain_start_failure
from app.doctor.checks import blocking_parents, check_exposure
from app.doctor.postgres import CRASH_MESSAGE, check_index_build, probe_engine
from app.embedded import EmbeddedPostgres
from tests.redis_server import RedisServer
from tests.servers import service_url

ROOT = Path(__file__).resolve().parents[2]
PGRECALL = ROOT / ".venv" / "bin" / "pgrecall"


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
    clean.update({f"PGRECALL_{k.upper()}": v for k, v in env.items()})
    return subprocess.run(
        [str(PGRECALL), *args], env=clean, cwd=cwd, capture_output=True, text=True, timeout=180
    )


def _statuses(stdout: str) -> dict[str, str]:
    """{check name: status} from doctor's `status name message` lines."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith(("ok ", "FAIL ", "skip ")):
            status, rest = line.split(None, 1)
            out[rest[:12].strip()] = status
    return out


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Short (unix socket paths) and enterable by the Postgres OS user when we run as root.
    directory = Path(tempfile.mkdtemp(prefix="pgr-doc-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        EmbeddedPostgres(directory / "data").stop()
        shutil.rmtree(directory, ignore_errors=True)


ALL_CHECKS = [
    "python",
    "settings",
    "data dir",
    "cpu",
    "postgres",
    "versions",
    "index build",
    "migrations",
    "row security",
    "redis",
    "embedder",
    "tokenizer",
    "exposure",
]


def test_healthy_install_attached_is_all_ok(
    pg: EmbeddedPostgres, redis_srv: RedisServer, tmp_path: Path
) -> None:
    """The suite's migrated embedded server (doctor attaches, and leaves it running) + Redis."""
    if getattr(pg, "data_dir", None) is None:  # PGRECALL_TEST_DATABASE_URL: no data dir
        pytest.skip("attaches to the embedded server's data directory")
    result = _run(["doctor"], tmp_path, data_dir=str(pg.data_dir), redis_url=redis_srv.url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _statuses(result.stdout) == dict.fromkeys(ALL_CHECKS, "ok"), result.stdout
    assert "migrations   at head" in result.stdout
    assert "all 13 checks ok" in result.stdout
    assert "row security service role pgrecall_app: no superuser, no BYPASSRLS" in result.stdout
    assert pg.is_running()  # not doctor's to stop


def test_fresh_embedded_install_is_all_ok_and_stopped_again(workdir: Path) -> None:
    data_dir = workdir / "data"
    result = _run(["doctor"], workdir, data_dir=str(data_dir))
    assert result.returncode == 0, result.stdout + result.stderr
    assert _statuses(result.stdout) == dict.fromkeys(ALL_CHECKS, "ok"), result.stdout
    assert not EmbeddedPostgres(data_dir).is_running()  # doctor started it, doctor stopped it


def test_postgres_stopped_names_postgres(workdir: Path) -> None:
    # A socket directory with no server behind it: what a stopped Postgres looks like.
    url = f"postgresql://postgres@/postgres?host={workdir}&port=5432"
    result = _run(["doctor"], workdir, database_url=url)
    assert result.returncode == 1
    statuses = _statuses(result.stdout)
    assert statuses["postgres"] == "FAIL"
    assert {statuses[n] for n in ("versions", "index build", "migrations", "row security")} == {
        "skip"
    }
    # Checks that do not need Postgres still run.
    assert statuses["embedder"] == statuses["tokenizer"] == "ok"
    (summary,) = result.stderr.strip().splitlines()
    assert summary.startswith("pgrecall doctor: postgres failed: cannot connect to")
    assert "Traceback" not in result.stdout + result.stderr


def test_redis_unreachable_names_redis(pg: EmbeddedPostgres, workdir: Path) -> None:
    result = _run(
        ["doctor"],
        workdir,
        database_url=service_url(pg),
        migration_database_url=pg.url,
        redis_url=f"unix://{workdir}/redis.sock",
    )
    assert result.returncode == 1
    assert _statuses(result.stdout)["redis"] == "FAIL"
    assert _statuses(result.stdout)["postgres"] == "ok"
    (summary,) = result.stderr.strip().splitlines()
    assert summary.startswith("pgrecall doctor: redis failed: PGRECALL_REDIS_URL unix://")
    assert "unreachable" in summary


def test_service_running_as_a_superuser_fails_row_security(
    pg: EmbeddedPostgres, workdir: Path
) -> None:
    """One URL naming the superuser: everything works, but RLS does not bind it."""
    result = _run(["doctor"], workdir, database_url=pg.url)
    assert result.returncode == 1
    statuses = _statuses(result.stdout)
    assert statuses["row security"] == "FAIL" and statuses["postgres"] == "ok"
    (summary,) = result.stderr.strip().splitlines()
    assert summary.startswith(
        "pgrecall doctor: row security failed: the service runs as postgres, a superuser role"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the Postgres OS user exists only under root")
def test_private_parent_directory_as_root() -> None:
    """A 0700 parent (what `mktemp -d` makes): the start grants o+x, and doctor says so."""
    parent = Path(tempfile.mkdtemp(prefix="pgr-700-"))
    try:
        assert parent.stat().st_mode & 0o777 == 0o700
        result = _run(["doctor"], Path("/"), data_dir=str(parent / "data"))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"adds o+x to {parent} (0700)" in result.stdout
        assert parent.stat().st_mode & 0o001  # granted by the embedded server's start
        assert not EmbeddedPostgres(parent / "data").is_running()
    finally:
        EmbeddedPostgres(parent / "data").stop()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="the Postgres OS user exists only under root")
def test_start_failing_under_a_private_parent_names_it() -> None:
    """When the grant was impossible, the start's failure is explained in one line."""
    parent = Path(tempfile.mkdtemp(prefix="pgr-700-"))
    try:
        settings = Settings(data_dir=parent / "data")
        error = explain_start_failure(settings, PermissionError(13, "Permission denied"))
        message = str(error)
        assert message.startswith(f"data dir: {parent} (mode 0700) cannot be entered")
        assert "Errno 13" in message and f"chmod o+x {parent}" in message
        assert "\n" not in message
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def test_serve_with_postgres_down_says_one_line(workdir: Path) -> None:
    url = f"postgresql://postgres@/postgres?host={workdir}&port=5432"
    result = _run(["serve", "--port", "1"], workdir, database_url=url)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("pgrecall: postgres: cannot connect to postgres via socket")


def test_blocking_parents(tmp_path: Path) -> None:
    private = tmp_path / "private"
    inner = private / "a" / "b"
    inner.mkdir(parents=True)
    private.chmod(0o700)
    try:
        # A user that owns nothing (None) cannot pass the 0700 directory; the rest are open.
        assert private in blocking_parents(inner / "data", None)
        private.chmod(0o711)
        assert private not in blocking_parents(inner / "data", None)
    finally:
        private.chmod(0o755)


def test_exposure_rule() -> None:
    assert check_exposure(Settings()).ok
    exposed = Settings(host="0.0.0.0", api_key=SecretStr("k"))
    assert check_exposure(exposed).ok
    # Settings refuses an exposed host without a key; a copy skips validation, the check not.
    unguarded = Settings().model_copy(update={"host": "0.0.0.0"})
    check = check_exposure(unguarded)
    assert not check.ok and "without PGRECALL_API_KEY" in check.message


async def _wait_ready(server: EmbeddedPostgres, timeout_s: float = 60.0) -> None:
    """After a backend crash the postmaster resets and recovers; wait until it accepts again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        try:
            conn = await asyncpg.connect(server.dsn, timeout=2)
        except (OSError, asyncpg.PostgresError, TimeoutError):
            await asyncio.sleep(0.1)
            continue
        await conn.close()
        return


async def test_backend_killed_by_sigill_is_named_a_pgvector_crash() -> None:
    """What a vector.so built for another CPU does: the backend dies with signal 4."""
    directory = Path(tempfile.mkdtemp(prefix="pgr-ill-"))
    server = EmbeddedPostgres(directory)
    server.start()
    engine = probe_engine(server.url)
    watcher = await asyncpg.connect(server.dsn)
    stop = asyncio.Event()

    async def kill_index_builds() -> None:
        while not stop.is_set():
            rows = await watcher.fetch(
                "SELECT pid FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE 'CREATE INDEX ON doctor_vectors%'"
            )
            for row in rows:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(row["pid"], signal.SIGILL)
            await asyncio.sleep(0.002)

    killer = asyncio.create_task(kill_index_builds())
    try:
        check = await check_index_build(engine, 384, rows=5000)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await killer
        with contextlib.suppress(Exception):
            await watcher.close()
        await engine.dispose()
        # A shutdown request during crash recovery can leave the postmaster stuck.
        await _wait_ready(server)
        try:
            server.stop(timeout_s=20)
        except Exception:
            server.kill()
        shutil.rmtree(directory, ignore_errors=True)
    assert not check.ok
    assert check.message == CRASH_MESSAGE
