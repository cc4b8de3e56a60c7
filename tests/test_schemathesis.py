"""Schemathesis against a real `pgrecall serve`: every operation, every check, deterministic.

The server runs on its embedded defaults plus a real redis-server, exactly as a user starts it;
schemathesis reads /openapi.json and fuzzes each operation (coverage, fuzzing and stateful
phases) with every check (its default; one per-operation exception in schemathesis.toml): no
5xx, every status and body as documented, invalid input
rejected, valid input accepted. Deterministic: `--generation-deterministic` (no random seed).
"""

from __future__ import annotations

import re
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
from tests.servers import temporary_redis

SCHEMATHESIS = PGRECALL.parent / "schemathesis"
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 10  # per operation and phase: about 4,150 cases, 141 s alone on 2 cores
# The per-user run checks what the other cannot: the document a per-user key reads, and every
# user operation answering that key as documented. It skips the coverage phase (the boundary
# and invalid values of every parameter, 90 % of a run's time: 174 of 193 s on 2 cores), which
# the run above already makes against the same validation code; its fuzzing and stateful
# phases send valid requests under the key.
PER_USER_PHASES = "examples,fuzzing,stateful"
TIMEOUT_S = 1200


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="pgr-st-"))
    try:
        yield directory
    finally:
        EmbeddedPostgres(directory / "data").stop()
        shutil.rmtree(directory, ignore_errors=True)


def run_schemathesis(
    served: Served, workdir: Path, *extra: str, max_examples: int = MAX_EXAMPLES
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(SCHEMATHESIS),
            f"--config-file={CONFIG}",
            "run",
            f"{served.base}/openapi.json",
            # every check (schemathesis enables all by default; a `--checks` option would
            # override the per-operation exception in the config file)
            f"--max-examples={max_examples}",
            "--generation-deterministic",
            "--workers=1",
            "--no-color",
            *extra,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def assert_passed(result: subprocess.CompletedProcess[str]) -> None:
    summary = result.stdout[-6000:]
    print(summary)
    assert result.returncode == 0, f"schemathesis failed:\n{summary}\n{result.stderr[-2000:]}"
    selected = re.search(r"Selected: (\d+)/(\d+)", result.stdout)
    tested = re.search(r"Tested: (\d+)", result.stdout)
    assert selected and tested, summary
    assert selected.group(1) == tested.group(1), "operations left untested"
    assert int(selected.group(1)) > 20, summary


# No rate limit: one fuzzer is one user, and every answer should be a real one.
NO_LIMITS = {"PGRECALL_RATE_LIMIT_PER_MINUTE": "0", "PGRECALL_WRITE_RATE_LIMIT_PER_MINUTE": "0"}


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(workdir: Path) -> None:
    with temporary_redis() as redis:
        served = Served(
            workdir / "data", free_port(), "serve", {"PGRECALL_REDIS_URL": redis.url, **NO_LIMITS}
        )
        try:
            served.wait_ready()
            result = run_schemathesis(served, workdir)
        finally:
            served.stop_with(signal.SIGTERM)
    assert_passed(result)
    selected = re.search(r"Selected: (\d+)/(\d+)", result.stdout)
    assert selected and selected.group(1) == selected.group(2)


@pytest.mark.slow
def test_schemathesis_with_a_per_user_key(workdir: Path) -> None:
    """Keys configured; schemathesis holds only a per-user key, reads the document that key
    gets (X-User-Id optional) and fuzzes every operation a user may call (not /v1/admin, not
    /metrics: those answer a per-user key 403, as documented)."""
    settings = {"PGRECALL_API_KEY": "svc-key", "PGRECALL_ADMIN_API_KEY": "adm-key", **NO_LIMITS}
    with temporary_redis() as redis:
        served = Served(
            workdir / "data", free_port(), "serve", {"PGRECALL_REDIS_URL": redis.url, **settings}
        )
        try:
            served.wait_ready()
            created = httpx.post(
                f"{served.base}/v1/admin/keys",
                json={"user_id": "fuzzed-user"},
                headers={"Authorization": "Bearer adm-key"},
            )
            assert created.status_code == 201, created.text
            token = created.json()["token"]
            result = run_schemathesis(
                served,
                workdir,
                f"--header=Authorization: Bearer {token}",
                "--exclude-path-regex=^/(v1/admin|metrics)",
                f"--phases={PER_USER_PHASES}",
            )
        finally:
            served.stop_with(signal.SIGTERM)
    assert_passed(result)
