"""Ablation on LoCoMo: what each retrieval choice is worth (the figures in docs/retrieval.md).

    .venv/bin/python -m eval.ablation --path ../shared/datasets/locomo/locomo-dev.json

Loads the dialogues once per keyword-index configuration (neighbour context weights are applied
when postings are written), then asks all questions with each ranking preset through
POST /v1/memory/query (min_score 0: the ranking itself is measured). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import app.repositories.search_index as search_index
from app.config import Settings
from app.retrieval.presets import DEFAULT, PRESETS, RetrievalPreset
from eval.harness import running_service
from eval.locomo_run import ask_all, load, load_into
from eval.metrics import summarise

# (label, previous-turn weight, next-turn weight, presets to run on that index)
PLAN: list[tuple[str, float, float, list[RetrievalPreset]]] = [
    (
        "turn text only",
        0.0,
        0.0,
        [PRESETS["keyword_only"].with_(next_turn_weight=0.0), DEFAULT.with_(next_turn_weight=0.0)],
    ),
    (
        "turn + previous turn (weight 1)",
        1.0,
        0.0,
        [PRESETS["keyword_only"].with_(next_turn_weight=0.0), DEFAULT.with_(next_turn_weight=0.0)],
    ),
    (
        "turn + both neighbours (weight 1)",
        1.0,
        1.0,
        [PRESETS["keyword_only"].with_(next_turn_weight=0.0), DEFAULT.with_(next_turn_weight=0.0)],
    ),
    (
        "turn + both neighbours (weight 0.5), the default",
        search_index.CONTEXT_WEIGHT_PREVIOUS,
        search_index.CONTEXT_WEIGHT_NEXT,
        [
            PRESETS["keyword_only"].with_(next_turn_weight=0.0),
            PRESETS["keyword_only"],
            PRESETS["vector_only"].with_(next_turn_weight=0.0),
            PRESETS["rrf_equal"].with_(next_turn_weight=0.0),
            PRESETS["rrf_equal"],
            DEFAULT.with_(
                name="rrf keyword 1 / vector 0.3",
                fusion="rrf",
                keyword_weight=1.0,
                vector_weight=0.3,
            ),
            DEFAULT.with_(name="convex 0.5 / 0.5", keyword_weight=0.5, vector_weight=0.5),
            DEFAULT.with_(name="convex, BM25 b=0.75", bm25_b=0.75),
            DEFAULT.with_(name="convex, max-scaled", normalisation="max"),
            DEFAULT.with_(name="convex, z-scored", normalisation="zscore"),
            DEFAULT.with_(name="default without next-turn propagation", next_turn_weight=0.0),
            DEFAULT.with_(name="default, next-turn propagation 0.85", next_turn_weight=0.85),
            DEFAULT,
        ],
    ),
]


def _describe(p: RetrievalPreset) -> str:
    arms = "keyword" if not p.use_vector else "vector" if not p.use_keyword else p.fusion
    return f"{p.name} ({arms}, next-turn {p.next_turn_weight:g})"


async def run(path: Path) -> list[str]:
    conversations = load(path)
    rows = [
        "| keyword index | preset | Recall@5 | Hit@5 | Recall@10 | MRR@10 | p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, previous, following, presets in PLAN:
        search_index.CONTEXT_WEIGHT_PREVIOUS, search_index.CONTEXT_WEIGHT_NEXT = previous, following
        async with running_service(Settings(rate_limit_per_minute=0)) as harness:
            logging.getLogger().setLevel(logging.WARNING)
            mapping = await load_into(harness, conversations)
            for preset in presets:
                harness.resources.query_config = dataclasses.replace(
                    harness.resources.query_config, preset=preset
                )
                started = time.perf_counter()
                summary = summarise(await ask_all(harness, conversations, mapping, progress=False))
                o = summary.overall
                rows.append(
                    f"| {label} | {_describe(preset)} | {o['recall@5']:.3f} | {o['hit@5']:.3f} | "
                    f"{o['recall@10']:.3f} | {o['mrr@10']:.3f} | {o['latency_p95_ms']:.1f} |"
                )
                print(rows[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--path", type=Path, required=True, help="LoCoMo JSON file")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(args.path))
    print("\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
