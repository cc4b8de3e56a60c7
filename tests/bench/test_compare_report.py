"""bench.compare's table: per level, both sides' CPU per request, requests per second and latency
percentiles over all their bursts, and this side over the other."""

from __future__ import annotations

from pathlib import Path

from bench.compare import report


def side(rps: float, cpu: float, p50: float, p95: float) -> dict[str, object]:
    return {"requests": 600, "rps": rps, "cpu_ms": cpu, "bursts_cpu_ms": [cpu], "p50_ms": p50,
            "p95_ms": p95}  # fmt: skip


def test_the_table_gives_each_sides_p50_and_p95_and_the_p95_ratio() -> None:
    row = {
        "concurrency": 8,
        "load": 1.25,
        "this": side(90.0, 10.5, 12.0, 30.0),
        "other": side(100.0, 9.5, 11.0, 24.0),
        "cpu_ratio": 1.105,
        "rps_ratio": 0.9,
        "p95_ratio": 1.25,
        "burst_cpu_ratios": [1.1, 1.11],
    }
    table = report({"items": 10_000, "rounds": 2, "levels": [row]}, Path("/old"))
    header, _, line = table.splitlines()[-3:]
    assert "p95 ratio" in header
    assert line == (
        "| 8 | 90.0 | 100.0 | 0.9 | 10.5 | 9.5 | 1.105 | 1.1, 1.11 | 12.0 / 30.0 | 11.0 / 24.0 "
        "| 1.25 | 1.25 |"
    )
