"""bench.redis_pool end to end on a tiny run: both tables, and the service's bounded client
admitting exactly the limit of a cold burst beside CPU-bound threads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_redis_pool_bench_prints_both_tables() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "bench.redis_pool", "--bursts", "1", "--requests", "64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = run.stdout.splitlines()
    assert "| bounded | 10 | 1 of 1 |" in lines
    assert any(line.startswith("| unbounded | ") for line in lines)
    rows = [line for line in lines if line.startswith(("| 1 |", "| 8 |", "| 64 |"))]
    assert [row.split(" | ")[1] for row in rows] == ["bounded", "unbounded"] * 3
    # the bounded client never holds more than MAX_CONNECTIONS (8) connections
    assert all(int(row.split(" | ")[5]) <= 8 for row in rows if " bounded " in row)
    assert all(row.split(" | ")[6].strip(" |") == "0" for row in rows)
