"""The local models' own cost, measured in one run: the default beside the float graph.

`python -m bench.embedder --queries 200`: LoCoMo questions embedded one at a time (as
`query_memory` does), each variant taking turns query by query (rotating who goes first) so all
see the same machine load, then 256 dialogue turns per call (a bulk import). Prints wall p50/p95
and CPU time per query (this process's user + system time, so spinning threads show up) per
variant, and how close each variant's vectors are to the default's. The service's embedder is
the `all-MiniLM-L6-v2-onnx-dq8, 1 thread` row (PGRECALL_EMBEDDING_THREADS defaults to 1).
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import numpy as np
import typer

from app.adapters.embedder import FLOAT_MODEL_ID, LOCAL_MODEL_ID, LocalEmbedder
from bench.drive import percentiles
from bench.real import LOCOMO
from eval.datasets.locomo import load_locomo

# (model, intra-op threads); more than one thread never spins (LocalEmbedder).
VARIANTS: list[tuple[str, int]] = [
    (LOCAL_MODEL_ID, 1),
    (LOCAL_MODEL_ID, 2),
    (FLOAT_MODEL_ID, 2),
    (FLOAT_MODEL_ID, 1),
]


def main(queries: Annotated[int, typer.Option(help="questions per variant")] = 200) -> None:
    texts = [q.question for c in load_locomo(LOCOMO) for q in c.questions][:queries]
    embedders = {
        f"{model}, {threads} thread{'s' if threads > 1 else ''}": LocalEmbedder(threads, model)
        for model, threads in VARIANTS
    }
    reference = next(iter(embedders.values())).embed_sync(texts)
    closeness = {
        name: float(np.min(np.sum(e.embed_sync(texts) * reference, axis=1)))
        for name, e in embedders.items()
    }
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
        "| variant | query p50 ms | query p95 ms | CPU ms/query | bulk ms/turn (best of 3) "
        "| lowest cosine to the first row's vector |\n|---|---:|---:|---:|---:|---:|"
    )
    for name in embedders:
        lat = percentiles(wall[name])
        typer.echo(
            f"| {name} | {lat['p50']} | {lat['p95']} | {cpu[name] * 1000 / len(texts):.2f} "
            f"| {min(bulk[name]):.2f} | {closeness[name]:.4f} |"
        )


if __name__ == "__main__":
    typer.run(main)
