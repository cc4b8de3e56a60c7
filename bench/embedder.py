"""The local embedders' own cost, measured in one run: every local graph side by side.

`python -m bench.embedder --queries 200`: LoCoMo questions embedded one at a time (as
`query_memory` does), the variants taking turns query by query (rotating who goes first) so all
see the same machine load; then 256 dialogue turns per call, as bulk imports do. The variants:
both MiniLM graphs (the default int8 arithmetic and the float graph) at one and two onnxruntime
threads, and each optional model `make model-mpnet` installed (one thread; the ones not
installed are listed and skipped). Prints wall p50/p95 and CPU time per query (this process's
user + system time: every onnxruntime thread), bulk ms per turn, and how close each MiniLM
variant's vectors are to the default's. The service's embedder is the first row
(PGRECALL_EMBEDDING_THREADS defaults to 1).
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import numpy as np
import typer

from app.adapters.embedder import InProcessEmbedder, LocalEmbedder
from app.adapters.local_models import OnnxSentenceEmbedder
from app.embedding_models import (
    FLOAT_MODEL_ID,
    LOCAL_MODEL_ID,
    OPTIONAL_LOCAL_MODELS,
    TRAINED_MODEL_ID,
)
from app.errors import LocalModelMissingError
from bench.drive import percentiles
from bench.real import LOCOMO
from eval.datasets.locomo import load_locomo

# (model, intra-op threads); more than one thread never spins (LocalEmbedder).
MINILM_VARIANTS: list[tuple[str, int]] = [
    (TRAINED_MODEL_ID, 1),  # the default (issue 45)
    (TRAINED_MODEL_ID, 2),
    (LOCAL_MODEL_ID, 1),
    (LOCAL_MODEL_ID, 2),
    (FLOAT_MODEL_ID, 2),
    (FLOAT_MODEL_ID, 1),
]


def _embedders() -> dict[str, InProcessEmbedder]:
    embedders: dict[str, InProcessEmbedder] = {
        f"{model}, {threads} thread{'s' if threads > 1 else ''}": LocalEmbedder(threads, model)
        for model, threads in MINILM_VARIANTS
    }
    for name, spec in OPTIONAL_LOCAL_MODELS.items():
        try:
            embedders[f"{name}, 1 thread"] = OnnxSentenceEmbedder(spec, threads=1)
        except LocalModelMissingError as exc:
            typer.echo(f"skipped {name}: {exc.message}")
    return embedders


def main(
    queries: Annotated[int, typer.Option(help="questions per variant")] = 200,
    turns: Annotated[int, typer.Option(help="dialogue turns per bulk call")] = 256,
) -> None:
    conversations = load_locomo(LOCOMO)
    texts = [q.question for c in conversations for q in c.questions][:queries]
    embedders = _embedders()
    reference = next(iter(embedders.values())).embed_sync(texts)
    closeness = {
        name: f"{float(np.min(np.sum(e.embed_sync(texts) * reference, axis=1))):.4f}"
        for name, e in embedders.items()
        if e.dimension == reference.shape[1]
    }
    wall: dict[str, list[float]] = {n: [] for n in embedders}
    cpu: dict[str, float] = dict.fromkeys(embedders, 0.0)
    names = list(embedders)
    for i, text in enumerate(texts):
        # Rotate who goes first: the first call after another session pays its cache misses.
        for name in names[i % len(names) :] + names[: i % len(names)]:
            c0, t0 = time.process_time(), time.perf_counter()
            embedders[name].embed_sync([text])
            wall[name].append((time.perf_counter() - t0) * 1000)
            cpu[name] += time.process_time() - c0
    bulk_texts = [t.content for c in conversations for t in c.turns][:turns]
    bulk: dict[str, list[float]] = {n: [] for n in embedders}
    for i in range(3):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            embedders[name].embed_sync(bulk_texts)
            bulk[name].append((time.perf_counter() - t0) * 1000 / len(bulk_texts))
    typer.echo(f"{len(texts)} queries each, load {os.getloadavg()[0]:.2f}\n")
    typer.echo(
        "| variant | query p50 ms | query p95 ms | CPU ms/query | bulk ms/turn (best of 3) "
        "| lowest cosine to the first row's vector |\n|---|---:|---:|---:|---:|---:|"
    )
    for name in embedders:
        lat = percentiles(wall[name])
        typer.echo(
            f"| {name} | {lat['p50']} | {lat['p95']} | {cpu[name] * 1000 / len(texts):.2f} "
            f"| {min(bulk[name]):.2f} | {closeness.get(name, '-')} |"
        )


if __name__ == "__main__":
    typer.run(main)
