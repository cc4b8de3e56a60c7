"""Schemathesis against a real `pgrecall serve`: every operation, every check, deterministic.

The server runs on its embedded defaults plus a real redis-server, exactly as a user starts it;
schemathesis reads /openapi.json and fuzzes each operation (coverage, fuzzing and stateful
phases) with `--checks all`: no 5xx, every status and body as documented, invalid input
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

import pytest

from app.embedded import EmbeddedPostgres
from tests.served import PGRECALL, Served, free_port
from tests.servers import temporary_redis

SCHEMATHESIS = PGRECALL.parent / "schemathesis"
CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_EXAMPLES = 10  # per operation and phase: about 1,300 requests, 3-5 minutes on 2 cores
TIMEOUT_S = 900


@pytest.fixture
def workdir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="pgr-st-"))
    try:
        yield directory
    finally:
        EmbeddedPostgres(directory / "data").stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(workdir: Path) -> None:
    with temporary_redis() as redis:
        served = Served(
            workdir / "data",
            free_port(),
            "serve",
            # No rate limit: one fuzzer is one user, and every answer should be a real one.
            {
                "PGRECALL_REDIS_URL": redis.url,
                "PGRECALL_RATE_LIMIT_PER_MINUTE": "0",
                "PGRECALL_WRITE_RATE_LIMIT_PER_MINUTE": "0",
            },
        )
        try:
            served.wait_ready()
            result = subprocess.run(
                [
                    str(SCHEMATHESIS),
                    f"--config-file={CONFIG}",
                    "run",
                    f"{served.base}/openapi.json",
                    "--checks=all",
                    f"--max-examples={MAX_EXAMPLES}",
                    "--generation-deterministic",
                    "--workers=1",
                    "--no-color",
                ],
                cwd=workdir,
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
            )
        finally:
            served.stop_with(signal.SIGTERM)
    summary = result.stdout[-6000:]
    print(summary)
    assert result.returncode == 0, f"schemathesis failed:\n{summary}\n{result.stderr[-2000:]}"
    selected = re.search(r"Selected: (\d+)/(\d+)", result.stdout)
    tested = re.search(r"Tested: (\d+)", result.stdout)
    assert selected and tested, summary
    assert selected.group(1) == selected.group(2) == tested.group(1), "operations left untested"
