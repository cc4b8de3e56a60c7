"""Two or more ways of answering the same questions, measured in one run (bench.spaces,
bench.topics): each question in every mode, in a seeded random order per question, once to warm
up and then `rounds` times measured (1 unless asked). Per mode: wall ms, the service's CPU ms
(what `cpu_ms` reads: this process, or a server's processes) and the Postgres backends' CPU ms
(/proc/<pid>/schedstat of every backend of the server, read before and after each question).
Compare the rows of one run, not runs: the machine's speed moves from minute to minute.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psutil
import typer
from tqdm import tqdm

from app.embedded import EmbeddedPostgres
from bench.drive import BenchQuery, percentiles
from bench.stages import backend_ns

M = TypeVar("M")
# One question in one mode (the mode's value): a count the caller sums (bench.spaces: the
# shared items in the answer).
Ask = Callable[[BenchQuery, M], Awaitable[int]]


async def measure(
    sample: list[BenchQuery],
    modes: Mapping[str, M],
    ask: Ask[M],
    cpu_ms: Callable[[], float],
    postmaster: int,
    rounds: int = 1,
) -> dict[str, Any]:
    """Every question in every mode (see the module), `rounds` times after the warm-up:
    {"wall", "cpu", "pg"}: mode -> ms per question asked; "counted": the sum of what `ask`
    returned."""
    wall: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    pg: dict[str, list[float]] = {m: [] for m in modes}
    counted = 0
    rng = np.random.default_rng(42)
    for warm in (True, *([False] * rounds)):
        for query in tqdm(sample, desc="warm-up" if warm else "measured", leave=False):
            order = list(modes)
            rng.shuffle(order)
            for mode in order:
                pg0, cpu0 = backends_ms(postmaster), cpu_ms()
                started = time.perf_counter()
                count = await ask(query, modes[mode])
                elapsed = (time.perf_counter() - started) * 1000
                used, pg1 = cpu_ms() - cpu0, backends_ms(postmaster)
                if warm:
                    continue
                wall[mode].append(elapsed)
                cpu[mode].append(used)
                pg[mode].append(sum(v - pg0.get(p, 0.0) for p, v in pg1.items()))
                counted += count
    return {"wall": wall, "cpu": cpu, "pg": pg, "counted": counted}


def postmaster_pid(data_dir: Path) -> int:
    """The pid of the embedded server running in `data_dir` (the benches' `out / "pg"`)."""
    info = EmbeddedPostgres(data_dir).postmaster()
    if info is None:
        raise RuntimeError(f"no Postgres server is running in {data_dir}")
    return info.pid


def backends_ms(postmaster: int) -> dict[int, float]:
    """CPU ms so far of each process under the postmaster (its backends), from schedstat."""
    out: dict[int, float] = {}
    for child in psutil.Process(postmaster).children():
        with contextlib.suppress(OSError):  # a backend that ended meanwhile
            out[child.pid] = backend_ns(child.pid) / 1e6
    return out


def echo_modes(result: dict[str, Any]) -> None:
    """A row per mode: questions, wall p50 and p95, service and Postgres CPU ms per question."""
    width = max(18, *(len(mode) for mode in result["wall"]))
    typer.echo(f"{'mode':{width}} {'n':>4} {'p50':>7} {'p95':>7} {'cpu ms':>7} {'pg ms':>7}")
    for mode, values in result["wall"].items():
        p = percentiles(values)
        typer.echo(
            f"{mode:{width}} {len(values):4d} {p['p50']:7.2f} {p['p95']:7.2f} "
            f"{np.mean(result['cpu'][mode]):7.3f} {np.mean(result['pg'][mode]):7.3f}"
        )


def ratios(result: dict[str, Any], new: str, old: str) -> str:
    """Mode `new` over mode `old`: wall p50 and p95, service CPU, Postgres CPU and both."""
    pn, po = percentiles(result["wall"][new]), percentiles(result["wall"][old])
    cpu = {m: float(np.mean(result["cpu"][m])) for m in (new, old)}
    pg = {m: float(np.mean(result["pg"][m])) for m in (new, old)}
    return (
        f"p50 {pn['p50'] / po['p50']:.3f}x, p95 {pn['p95'] / po['p95']:.3f}x, "
        f"service CPU {cpu[new] / cpu[old]:.3f}x, Postgres CPU {pg[new] / pg[old]:.3f}x, "
        f"both {(cpu[new] + pg[new]) / (cpu[old] + pg[old]):.3f}x"
    )
