"""The checks of `pgrecall doctor` that need no database: each returns one `Check`.

A check's message is one line that names the cause and, on failure, what to do.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from app.config import Settings, SettingsError, load_settings
from app.db import one_line

MIN_PYTHON = (3, 11)
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str
    skipped: bool = False  # not run because a check it depends on failed

    def line(self) -> str:
        status = "skip" if self.skipped else "ok" if self.ok else "FAIL"
        return f"{status:<5} {self.name:<12} {self.message}"


# -- process and settings ---------------------------------------------------------------------


def check_python() -> Check:
    version = ".".join(str(p) for p in sys.version_info[:3])
    ok = sys.version_info[:2] >= MIN_PYTHON
    need = ".".join(str(p) for p in MIN_PYTHON)
    return Check("python", ok, version if ok else f"{version}: pgrecall needs Python >= {need}")


def check_cpu() -> Check:
    """The embedded server's pgvector is built for x86-64-v3 (app/embedded.py)."""
    from app.embedded import UnsupportedCpuError, refuse_unsupported_cpu

    try:
        refuse_unsupported_cpu()
    except UnsupportedCpuError as exc:
        return Check("cpu", False, str(exc))
    return Check("cpu", True, "runs the bundled pgvector (x86-64-v3: AVX2, FMA, BMI2)")


def check_settings() -> tuple[Check, Settings | None]:
    try:
        settings = load_settings()
    except SettingsError as exc:
        return Check("settings", False, str(exc)), None
    where = "external database" if settings.database_url else f"embedded, {settings.data_dir}"
    return Check("settings", True, f"PGRECALL_ settings valid ({where})"), settings


def check_exposure(settings: Settings) -> Check:
    """The same rule as Settings (a blank key is no key there): exposed without a key fails."""
    loopback = settings.host in LOOPBACK
    if settings.api_key is None:
        if not loopback:
            return Check(
                "exposure",
                False,
                f"PGRECALL_HOST={settings.host} without PGRECALL_API_KEY: set a key or bind to "
                "127.0.0.1",
            )
        return Check("exposure", True, f"no API key: auth off, listening on {settings.host} only")
    admin = "set" if settings.admin_api_key is not None else "unset (admin API disabled)"
    return Check(
        "exposure", True, f"auth on (service key set, admin key {admin}), host {settings.host}"
    )


# -- data dir ---------------------------------------------------------------------------------


def postgres_os_user() -> pwd.struct_passwd | None:
    """The OS user the embedded server runs as when pgrecall runs as root (None otherwise)."""
    if os.geteuid() != 0:
        return None
    from app.embedded import SYSTEM_USER

    try:
        return pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        return None  # not created yet: the first start creates it; judge as "other"


def _can_traverse(path: Path, user: pwd.struct_passwd | None) -> bool:
    """May `user` pass through directory `path`? None: a user that owns nothing, in no group.

    The embedded server runs with its own group only (app/embedded.py), so supplementary
    groups do not count.
    """
    info = path.stat()
    if user is not None and info.st_uid == user.pw_uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if user is not None and info.st_gid == user.pw_gid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def blocking_parents(path: Path, user: pwd.struct_passwd | None) -> list[Path]:
    """The existing directories above `path` that `user` cannot pass through, outermost first."""
    resolved = path.expanduser().resolve()
    parents = [p for p in reversed(resolved.parents) if p.exists()]
    return [p for p in parents if not _can_traverse(p, user)]


def check_writable(data_dir: Path) -> Check:
    """The data dir can be created and written."""
    data_dir = data_dir.expanduser().resolve()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".doctor-"):
            pass
    except OSError as exc:
        return Check(
            "data dir",
            False,
            f"cannot write {data_dir}: {one_line(exc)}; set PGRECALL_DATA_DIR to a writable "
            "directory",
        )
    return Check("data dir", True, f"{data_dir} writable")


def check_reachable_by_postgres(data_dir: Path) -> Check:
    """As root, the Postgres OS user must pass through every directory above the data dir."""
    from app.embedded import SYSTEM_USER

    data_dir = data_dir.expanduser().resolve()
    blocked = blocking_parents(data_dir, postgres_os_user()) if os.geteuid() == 0 else []
    if blocked:
        first = blocked[0]
        mode = stat.S_IMODE(first.stat().st_mode)
        return Check(
            "data dir",
            False,
            f"{first} (mode {mode:04o}) cannot be entered by the Postgres OS user "
            f"'{SYSTEM_USER}', so the embedded server fails with Errno 13 (Permission "
            f"denied): run `chmod o+x {first}` or use a PGRECALL_DATA_DIR outside it",
        )
    return Check("data dir", True, f"{data_dir}: '{SYSTEM_USER}' can enter every parent")


def check_data_dir(settings: Settings) -> Check:
    """Writable, and (as root) reachable by the Postgres OS user; unused with an external DB."""
    if not settings.embedded_database:
        return Check("data dir", True, "not used (PGRECALL_DATABASE_URL is set)")
    writable = check_writable(settings.data_dir)
    if not writable.ok or os.geteuid() != 0:
        return writable
    blocked = blocking_parents(settings.data_dir, postgres_os_user())
    if not blocked:
        return writable
    # The embedded server's start adds o+x to them (app/embedded.py); if it cannot, the start
    # fails and explain_start_failure names the directory (check_reachable_by_postgres).
    listed = ", ".join(f"{p} ({stat.S_IMODE(p.stat().st_mode):04o})" for p in blocked)
    return Check(
        "data dir",
        True,
        f"{writable.message}; the embedded server's start adds o+x to {listed} so its OS user "
        "can enter",
    )


# -- Redis, embedder, tokenizer ---------------------------------------------------------------


async def check_redis(url: str | None) -> Check:
    if url is None:
        return Check("redis", True, "not configured: caches and rate limits are off")
    from redis.asyncio import Redis

    client = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        await client.ping()
    except Exception as exc:
        return Check("redis", False, f"PGRECALL_REDIS_URL {url} unreachable: {one_line(exc)}")
    finally:
        await client.aclose()
    return Check("redis", True, f"answers PING at {url}")


def check_local_model_installed(settings: Settings) -> Check:
    """An optional local model (`make model-mpnet`) is installed: `serve` says so in one line
    before it starts, instead of a traceback from the lifespan."""
    from app.adapters.local_models import not_installed
    from app.adapters.quantized_model import default_cache_dir
    from app.embedding_models import OPTIONAL_LOCAL_MODELS

    spec = OPTIONAL_LOCAL_MODELS.get(settings.embedding_model)
    if settings.embedding_provider.value != "local" or spec is None:
        return Check("embedder", True, f"{settings.embedding_model} needs no install")
    missing = not_installed(spec, default_cache_dir())
    if missing is not None:
        return Check("embedder", False, missing)
    return Check("embedder", True, f"{spec.name} installed in {default_cache_dir()}")


async def check_embedder(settings: Settings) -> Check:
    import numpy as np

    from app.runtime import embedder_from_settings

    try:
        embedder = await asyncio.to_thread(embedder_from_settings, settings)
        try:
            vectors = await embedder.embed(["pgrecall doctor checks the embedder."])
        finally:
            close = getattr(embedder, "aclose", None)
            if close is not None:
                await close()
    except Exception as exc:
        return Check("embedder", False, f"{settings.embedding_model}: {one_line(exc)}")
    norm = float(np.linalg.norm(vectors[0])) if len(vectors) else 0.0
    if vectors.shape != (1, embedder.dimension) or abs(norm - 1.0) > 1e-3:
        return Check(
            "embedder",
            False,
            f"{embedder.model}: bad output (shape {vectors.shape}, norm {norm:.3f})",
        )
    return Check("embedder", True, f"{embedder.model} loads and embeds ({embedder.dimension} dims)")


def check_tokenizer() -> Check:
    from app.retrieval.budget import cl100k

    sample = "pgrecall doctor counts tokens."
    try:
        encoding = cl100k()
        tokens = encoding.encode(sample)
        ok = bool(tokens) and encoding.decode(tokens) == sample
    except Exception as exc:
        return Check("tokenizer", False, f"cl100k_base (offline): {one_line(exc)}")
    if not ok:
        return Check("tokenizer", False, "cl100k_base (offline) does not round-trip text")
    return Check("tokenizer", True, "cl100k_base loads offline")
