"""The query embedder's own cost under ONNX Runtime session options, measured in one run.

`python -m bench.embedder --queries 200`: LoCoMo questions embedded one at a time (as
`query_memory` does), each variant's session taking turns query by query (rotating who goes
first) so all see the same machine load. Prints wall p50/p95 and CPU time per query (this
process's user + system time, so spinning threads show up) per variant. The service's
session is the `default` row (LocalEmbedder: intra_op 1, inter_op 1).
"""

from __future__ import annotations

import os
import time
from typing import Annotated, Any

import numpy as np
import typer

from app.adapters.embedder import LocalEmbedder
from bench.drive import percentiles
from bench.real import LOCOMO
from eval.datasets.locomo import load_locomo

VARIANTS: dict[str, dict[str, Any]] = {
    "default (1 thread)": {},
    "2 threads, spinning": {"threads": 2},
    "2 threads, no spinning": {"threads": 2, "spin": False},
    "1 thread, no memory arena": {"arena": False},
}


def _variant(threads: int = 1, spin: bool = True, arena: bool = True) -> LocalEmbedder:
    import onnxruntime

    embedder = LocalEmbedder(threads=threads)
    if spin and arena:
        return embedder
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = arena
    if not spin:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    from app.adapters.embedder import local_model_files

    model_path, _ = local_model_files()
    embedder._session = onnxruntime.InferenceSession(
        str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return embedder


def main(queries: Annotated[int, typer.Option(help="questions per variant")] = 200) -> None:
    texts = [q.question for c in load_locomo(LOCOMO) for q in c.questions][:queries]
    embedders = {name: _variant(**kw) for name, kw in VARIANTS.items()}
    reference = embedders["default (1 thread)"].embed_sync(texts[:20])
    for name, e in embedders.items():  # same vectors whatever the options
        assert np.allclose(e.embed_sync(texts[:20]), reference, atol=1e-4), name
    wall: dict[str, list[float]] = {n: [] for n in embedders}
    cpu: dict[str, float] = dict.fromkeys(embedders, 0.0)
    names = list(embedders)
    for i, text in enumerate(texts):
        # Rotate who goes first: the first call after another session pays its cache misses.
        for name in names[i % len(names) :] + names[: i % len(names)]:
            e = embedders[name]
            c0, t0 = time.process_time(), time.perf_counter()
            e.embed_sync([text])
            wall[name].append((time.perf_counter() - t0) * 1000)
            cpu[name] += time.process_time() - c0
    # Bulk imports share the session: 256 dialogue turns per call, 3 rounds, rotating.
    turns = [t.content for c in load_locomo(LOCOMO) for t in c.turns][:256]
    bulk: dict[str, list[float]] = {n: [] for n in embedders}
    for i in range(3):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            embedders[name].embed_sync(turns)
            bulk[name].append((time.perf_counter() - t0) * 1000 / len(turns))
    typer.echo(f"{len(texts)} queries each, load {os.getloadavg()[0]:.2f}\n")
    typer.echo(
        "| session | query p50 ms | query p95 ms | CPU ms/query | bulk ms/turn (best of 3) |\n"
        "|---|---:|---:|---:|---:|"
    )
    for name in embedders:
        lat = percentiles(wall[name])
        typer.echo(
            f"| {name} | {lat['p50']} | {lat['p95']} | {cpu[name] * 1000 / len(texts):.2f} "
            f"| {min(bulk[name]):.2f} |"
        )


if __name__ == "__main__":
    typer.run(main)
