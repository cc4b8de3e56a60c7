"""The answer verifier's own cost per question (docs/retrieval.md, "The answer verifier").

`python -m bench.verifier --questions 100 --depth 8`: the corpus's validation people
(eval/corpus; nothing of the test people), each question's first `depth` items by the trained
embedder's cosine (its memories and other questions: the candidates the pipeline hands the
verifier), scored one question at a time as the `verify` stage does. Beside it, the same
questions embedded once by the trained embedder, the query's own model cost, for scale. Prints
CPU time per question (this process's user + system time) and wall p50/p95. Needs the
verifier built (`make train-verifier`).
"""

from __future__ import annotations

import os
import platform
import time
from typing import Annotated

import numpy as np
import typer

from app.adapters.embedder import LocalEmbedder
from app.adapters.verifier import VERIFIER_EMBEDDER, Verifier
from bench.drive import percentiles
from eval.datasets.curated import CORPUS_PATH, load_curated


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main(
    questions: Annotated[int, typer.Option(help="validation questions to score")] = 100,
    depth: Annotated[int, typer.Option(help="candidates per question (preset verify_depth)")] = 8,
) -> None:
    users = [
        u for path in sorted(CORPUS_PATH.glob("*.json")) for u in load_curated(path).users
        if u.split == "validation"
    ]  # fmt: skip
    embedder = LocalEmbedder(model=VERIFIER_EMBEDDER)
    verifier = Verifier()
    work: list[tuple[str, list[str], list[float]]] = []
    for user in users:
        items = [m.content for m in user.memories] + [q.query for q in user.questions]
        matrix = embedder.embed_sync(items)
        for q in user.questions:
            cosines = matrix @ embedder.embed_sync([q.query])[0]
            order = [int(i) for i in np.argsort(-cosines) if items[i] != q.query][:depth]
            work.append((q.query, [items[i] for i in order], [float(cosines[i]) for i in order]))
    work = work[:questions]
    verifier.logits_sync(*work[0])  # warm
    rows = []
    for name, run in (
        ("verifier", lambda w: verifier.logits_sync(*w)),
        ("embedder (the query)", lambda w: embedder.embed_sync([w[0]])),
    ):
        walls = []
        cpu = _cpu()
        for w in work:
            t0 = time.perf_counter()
            run(w)
            walls.append((time.perf_counter() - t0) * 1000)
        per = (_cpu() - cpu) * 1000 / len(work)
        p = percentiles(walls)
        rows.append((name, per, p["p50"], p["p95"]))
    typer.echo(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; {len(work)} validation questions, {depth} candidates each"
    )
    typer.echo(f"{'':<22} {'CPU ms/question':>16} {'wall p50':>9} {'wall p95':>9}")
    for name, per, p50, p95 in rows:
        typer.echo(f"{name:<22} {per:>16.2f} {p50:>9.2f} {p95:>9.2f}")
    typer.echo(f"ratio verifier / embedder (CPU, same run): {rows[0][1] / rows[1][1]:.1f}x")


if __name__ == "__main__":
    typer.run(main)
