"""Benchmark: the write-side cost of sentence passages (not a test; prints figures).

For a sample of LoCoMo dialogue turns, embeds each turn alone and the turn plus its passages
(two calls, as ConversationService.append does), interleaved turn by turn in one run on the
local embedder, and prints p50/p95 of both and their ratio, with how many passages the turns
have. Loading the dialogues through the API (`make eval-locomo`) shows the same cost end to
end in its "loading conversations" time.

    .venv/bin/python scripts/bench_passages.py [--turns 300] [--seed 1]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.adapters.embedder import LocalEmbedder
from app.retrieval.passages import passages
from eval.datasets.locomo import load_locomo
from eval.metrics import percentile

DEFAULT_PATH = (
    Path(__file__).resolve().parent.parent.parent / "shared/datasets/locomo/locomo-dev.json"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", type=Path, default=DEFAULT_PATH, help="LoCoMo JSON file")
    parser.add_argument("--turns", type=int, default=300, help="turns sampled")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    turns = [t for c in load_locomo(args.path) for t in c.turns]
    split = [passages(t.content, t.speaker) for t in turns]
    print(
        f"LoCoMo: {len(turns)} turns, {sum(map(len, split))} passages, "
        f"{sum(1 for p in split if p)} turns with passages"
    )
    sample = random.Random(args.seed).sample(range(len(turns)), min(args.turns, len(turns)))
    embedder = LocalEmbedder()
    embedder.embed_sync([turns[i].content for i in sample[:8]])  # warm-up
    alone: list[float] = []
    with_passages: list[float] = []
    for i in sample:
        text, extra = turns[i].content, split[i]
        t0 = time.perf_counter()
        embedder.embed_sync([text])
        t1 = time.perf_counter()
        embedder.embed_sync([text])
        if extra:
            embedder.embed_sync(extra)
        t2 = time.perf_counter()
        alone.append((t1 - t0) * 1000)
        with_passages.append((t2 - t1) * 1000)
    load = os.getloadavg()[0]
    print(f"{len(sample)} sampled turns, load {load:.2f} ({os.cpu_count()} CPUs)")
    print(f"{'embedding':<22}{'p50 ms':>8}{'p95 ms':>8}")
    for name, xs in (("turn alone", alone), ("turn + its passages", with_passages)):
        print(f"{name:<22}{statistics.median(xs):>8.2f}{percentile(xs, 95):>8.2f}")
    print(
        f"ratio p50 {statistics.median(with_passages) / statistics.median(alone):.2f}, "
        f"p95 {percentile(with_passages, 95) / percentile(alone, 95):.2f}"
    )


if __name__ == "__main__":
    main()
