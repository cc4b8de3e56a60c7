"""`pgrecall keys` against a running service: answered over its admin API, quietly, without
importing the database stack; the database path when nothing answers is tests/admin's."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.served import Served, free_port, serving

ROOT = Path(__file__).resolve().parents[2]
# Never reachable: if the command fell back to the database it would fail on this URL, so a
# success proves the running service answered.
DEAD_DATABASE = "postgresql+asyncpg://nobody:nothing@127.0.0.1:1/none"


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with serving("pgr-keys-") as running:
        yield running


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGRECALL_")}
    env.update(PGRECALL_DATABASE_URL=DEAD_DATABASE, PGRECALL_LOG_LEVEL="INFO", **extra)
    return env


def _keys(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _query(served: Served, token: str) -> httpx.Response:
    return httpx.post(
        f"{served.base}/v1/memory/query",
        json={"query": "anything"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


def test_create_list_revoke_through_the_service(served: Served) -> None:
    env = _env()
    user = f"svc-{uuid.uuid4()}"
    created = _keys("create", "--user", user, "--scope", "read", "--server", served.base, env=env)
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("pgr_") and created.stdout.count("\n") == 1
    # Quiet: the one summary line on stderr, no log lines.
    (summary,) = created.stderr.splitlines()
    assert f"for user {user}, scope read, expires never" in summary
    # The token works against the service that made it.
    assert _query(served, token).status_code == 200

    listed = _keys("list", "--user", user, "--server", served.base, env=env)
    assert listed.returncode == 0, listed.stderr
    (line,) = listed.stdout.splitlines()
    assert f"{token[:12]}..." in line and " read " in line and " active " in line
    assert token not in listed.stdout
    key_id = line.split()[0]

    revoked = _keys("revoke", key_id, "--server", served.base, env=env)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith(f"revoked {key_id} (user {user})")
    relisted = _keys("list", "--user", user, "--server", served.base, env=env)
    assert " revoked " in relisted.stdout
    assert _query(served, token).status_code == 401  # the service that revoked it refuses it


def test_address_from_host_and_port(served: Served) -> None:
    port = served.base.rsplit(":", 1)[1]
    env = _env(PGRECALL_HOST="127.0.0.1", PGRECALL_PORT=port)
    created = _keys("create", "--user", f"env-{uuid.uuid4()}", env=env)
    assert created.returncode == 0, created.stderr
    assert created.stdout.startswith("pgr_")


def test_service_errors_are_one_line(served: Served) -> None:
    env = _env()
    missing = _keys("revoke", str(uuid.uuid4()), "--server", served.base, env=env)
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"pgrecall: {served.base}: 404 ")
    bad = _keys("create", "--user", "u1", "--expires", "soon", "--server", served.base, env=env)
    assert bad.returncode == 1 and "422" in bad.stderr and "expires_in" in bad.stderr


def test_no_service_falls_back_to_the_database() -> None:
    """Nothing listens: the database path runs (and fails here on the dead URL, naming it)."""
    env = _env()
    nobody = f"http://127.0.0.1:{free_port()}"
    created = _keys("create", "--user", "u1", "--server", nobody, env=env)
    assert created.returncode != 0
    assert "pgr_" not in created.stdout
    assert "('127.0.0.1', 1)" in created.stderr  # it went for the database's address


@pytest.mark.parametrize("command", ["keys", "spaces"])
def test_http_path_imports_no_server_stack(served: Served, command: str) -> None:
    """`pgrecall keys` and `pgrecall spaces` through a running service load no server code."""
    probe = (
        "import sys\n"
        f"sys.argv = ['pgrecall', {command!r}, 'list', '--server', {served.base!r}]\n"
        "from app.cli import main\n"
        "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
        "heavy = [m for m in ('sqlalchemy', 'asyncpg', 'onnxruntime', 'fastapi', 'uvicorn',\n"
        "         'app.main', 'app.models', 'app.services') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_scopes_agree_with_the_service() -> None:
    """app/cli/keys.py names the scopes itself (importing the service would load SQLAlchemy)."""
    from app.cli import keys
    from app.services import api_keys

    assert (keys.READ, keys.WRITE) == (api_keys.READ, api_keys.WRITE)
