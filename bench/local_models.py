"""The local embedders side by side: both MiniLM graphs and the optional models installed by
`make model-mpnet` (docs/retrieval.md, "A stronger embedder").

`python -m bench.local_models --queries 200`: LoCoMo questions embedded one at a time (as
`query_memory` does), the embedders taking turns query by query (rotating who goes first) so
all see the same machine load; then 256 dialogue turns per call, as bulk imports do. Each runs
with the service's session (PGRECALL_EMBEDDING_THREADS threads, default 1). Prints wall
p50/p95 and CPU time per query (this process's user + system time: every onnxruntime thread),
and bulk ms per turn. Models that are not installed are listed and skipped.
"""

from __future__ import annotations

import os
import time
from typing import Annotated

import typer

from app.adapters.embedder import LOCAL_MODELS, LocalEmbedder
from app.adapters.local_models import OPTIONAL_LOCAL_MODELS, OnnxSentenceEmbedder
from app.config import load_settings
from app.errors import LocalModelMissingError
from bench.drive import percentiles
from bench.real import LOCOMO
from eval.datasets.locomo import load_locomo


def main(
    queries: Annotated[int, typer.Option(help="questions per embedder")] = 200,
    turns: Annotated[int, typer.Option(help="dialogue turns per bulk call")] = 256,
) -> None:
    settings = load_settings()
    embedders: dict[str, LocalEmbedder | OnnxSentenceEmbedder] = {
        name: LocalEmbedder(threads=settings.embedding_threads, model=name) for name in LOCAL_MODELS
    }
    for name, spec in OPTIONAL_LOCAL_MODELS.items():
        try:
            embedders[name] = OnnxSentenceEmbedder(spec, threads=settings.embedding_threads)
        except LocalModelMissingError as exc:
            typer.echo(f"skipped {name}: {exc.message}")
    conversations = load_locomo(LOCOMO)
    texts = [q.question for c in conversations for q in c.questions][:queries]
    wall: dict[str, list[float]] = {n: [] for n in embedders}
    cpu: dict[str, float] = dict.fromkeys(embedders, 0.0)
    names = list(embedders)
    for name in names:  # warm-up
        embedders[name].embed_sync(texts[:3])
    for i, text in enumerate(texts):
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
    typer.echo(
        f"{len(texts)} queries each, {settings.embedding_threads} threads, "
        f"load {os.getloadavg()[0]:.2f}\n"
    )
    typer.echo(
        "| model | query p50 ms | query p95 ms | CPU ms/query | bulk ms/turn (best of 3) |\n"
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
