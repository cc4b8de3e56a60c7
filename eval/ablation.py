"""Ablation on LoCoMo: what each retrieval choice is worth (the figures in docs/retrieval.md).

    .venv/bin/python -m eval.ablation --path ../shared/datasets/locomo/locomo-dev.json
    .venv/bin/python -m eval.ablation --plan ranking \
        --path ../shared/datasets/locomo/locomo-dev.json

`--plan index` (the default) varies the keyword index and fusion; `--plan ranking` loads the
default index once and varies the re-ranking stages (time preference, diversification,
pseudo-relevance feedback), also asking every question through the agent tool; `--plan latency`
times POST /v1/tools/query_memory under the default and the `baseline` preset in one run.

Loads the dialogues once per keyword-index configuration (the presets' `context_weights`: the
postings are rebuilt with them after the load, app/services/keywords.py), then asks all
questions with each ranking preset through POST /v1/memory/query (min_score 0: the ranking
itself is measured). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from app.config import Settings
from app.domain import ContextWeights
from app.retrieval.presets import DEFAULT, PRESETS, RetrievalPreset
from app.services.keywords import rebuild_keywords
from eval.harness import running_service
from eval.locomo_run import ask_all, load, load_into
from eval.metrics import CaseResult, percentile, summarise

# (label, the keyword index's context weights, presets to run on that index)
PLAN: list[tuple[str, ContextWeights, list[RetrievalPreset]]] = [
    (
        "turn text only",
        ContextWeights(previous=0.0, next=0.0),
        [PRESETS["keyword_only"].with_(next_turn_weight=0.0), DEFAULT.with_(next_turn_weight=0.0)],
    ),
    (
        "turn + previous turn (weight 1)",
        ContextWeights(previous=1.0, next=0.0),
        [PRESETS["keyword_only"].with_(next_turn_weight=0.0), DEFAULT.with_(next_turn_weight=0.0)],
    ),
    (
        "turn + both neighbours (weight 1)",
        ContextWeights(previous=1.0, next=1.0),
        [PRESETS["keyword_only"].with_(next_turn_weight=0.0), DEFAULT.with_(next_turn_weight=0.0)],
    ),
    (
        "turn + both neighbours (weight 0.5), the default",
        DEFAULT.context_weights,
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


# The ranking as it was before the re-ranking stages (all of them off), each stage alone on
# top of it, and the default. Stages that lost stay available (off) and are listed here.
# (the `baseline` preset: every re-ranking stage is off in it or in the default).
BEFORE = PRESETS["baseline"].with_(name="before: no re-ranking stages")
PLAN_RANKING: list[RetrievalPreset] = [
    BEFORE,
    BEFORE.with_(name="time boost 0.3", time_boost=0.3),
    BEFORE.with_(name="time boost 0.6", time_boost=0.6),
    BEFORE.with_(name="time boost 1.0, slack 14 d", time_boost=1.0, time_mention_slack_days=14),
    BEFORE.with_(name="conversation cap 2 in top 5", conversation_cap=2),
    BEFORE.with_(name="conversation cap 3 in top 10", conversation_cap=3, diversify_depth=10),
    BEFORE.with_(name="session vote 0.5", session_vote_weight=0.5),
    BEFORE.with_(name="PRF 3 docs, 10 terms, weight 0.3", prf_docs=3),
    BEFORE.with_(name="PRF 5 docs, 20 terms, weight 0.3", prf_docs=5, prf_terms=20),
    BEFORE.with_(name="relevance weight 0.3", relevance_weight=0.3),
    BEFORE.with_(name="relative cut exempts ranks 1-2", cutoff_exempt_ranks=2),
    BEFORE.with_(name="relative cut exempts ranks 1-5", cutoff_exempt_ranks=5),
    BEFORE.with_(name="when-question boost 1.0", when_boost=1.0),
    BEFORE.with_(name="when-question boost 2.0", when_boost=2.0),
    BEFORE.with_(name="answers inherit relevance 1.0", answer_relevance=1.0),
    BEFORE.with_(name="answers inherit 0.9 of the fused score", answer_weight=0.9),
    BEFORE.with_(name="answers inherit 1.0 of the fused score", answer_weight=1.0),
    BEFORE.with_(name="named speakers x1.5", speaker_boost=0.5),
    BEFORE.with_(name="named speakers x2", speaker_boost=1.0),
    BEFORE.with_(name="named speakers x3", speaker_boost=2.0),
    DEFAULT.with_(name="default without named speakers", speaker_boost=0.0),
    BEFORE.with_(name="passages 0.5", passage_weight=0.5),
    BEFORE.with_(name="passages 0.7", passage_weight=0.7),
    BEFORE.with_(name="passages 1.0 (best sentence only)", passage_weight=1.0),
    DEFAULT.with_(name="default without passages", passage_weight=0.0),
    DEFAULT,
]


def _describe(p: RetrievalPreset) -> str:
    arms = "keyword" if not p.use_vector else "vector" if not p.use_keyword else p.fusion
    return f"{p.name} ({arms}, next-turn {p.next_turn_weight:g})"


async def run_ranking(path: Path, names: Sequence[str] | None) -> list[str]:
    """PLAN_RANKING on one load: ranking and agent-tool figures per preset."""
    conversations = load(path)
    rows = [
        "| preset | Recall@5 | Hit@5 | Recall@10 | MRR@10 | multi-hop R@5 | temporal R@5 "
        "| tool Recall@5 | tool Precision@5 | p95 ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    presets = [p for p in PLAN_RANKING if not names or p.name in names]
    async with running_service(Settings(rate_limit_per_minute=0)) as harness:
        logging.getLogger().setLevel(logging.WARNING)
        mapping = await load_into(harness, conversations)
        for preset in presets:
            harness.resources.query_config = dataclasses.replace(
                harness.resources.query_config, preset=preset
            )
            started = time.perf_counter()
            tool: list[CaseResult] = []
            ranking = await ask_all(
                harness, conversations, mapping, progress=False, tool_results=tool
            )
            o, t = summarise(ranking), summarise(tool)
            cat = o.by_category
            rows.append(
                f"| {preset.name} | {o.overall['recall@5']:.3f} | {o.overall['hit@5']:.3f} | "
                f"{o.overall['recall@10']:.3f} | {o.overall['mrr@10']:.3f} | "
                f"{cat['multi-hop']['recall@5']:.3f} | {cat['temporal']['recall@5']:.3f} | "
                f"{t.overall['recall@5']:.3f} | {t.overall['precision@5']:.3f} | "
                f"{o.overall['latency_p95_ms']:.1f} |"
            )
            print(rows[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
    return rows


async def run_latency(path: Path, rounds: int) -> list[str]:
    """query_memory latency of the default preset against `baseline` (issue 13's stages off) in
    one run: every question through POST /v1/tools/query_memory under both presets, the order
    alternating per question so that load from other jobs falls on both alike. Each round asks
    under a new preset name, so the query cache never answers."""
    conversations = load(path)
    presets = (PRESETS["baseline"], DEFAULT)
    times: dict[str, list[float]] = {p.name: [] for p in presets}
    async with running_service(Settings(rate_limit_per_minute=0)) as harness:
        logging.getLogger().setLevel(logging.WARNING)
        await load_into(harness, conversations)
        config = harness.resources.query_config
        for round_ in range(rounds):
            n = 0
            for conv in conversations:
                for q in conv.questions:
                    order = presets if n % 2 == 0 else presets[::-1]
                    n += 1
                    for preset in order:
                        harness.resources.query_config = dataclasses.replace(
                            config, preset=preset.with_(name=f"{preset.name}#{round_}")
                        )
                        started = time.perf_counter()
                        await harness.tool_query(conv.user_id, q.question)
                        times[preset.name].append((time.perf_counter() - started) * 1000)
    rows = ["| preset | queries | p50 ms | p95 ms | p95 / baseline p95 |", "|---|---|---|---|---|"]
    base = percentile(times["baseline"], 95)
    for name, values in times.items():
        p95 = percentile(values, 95)
        rows.append(
            f"| {name} | {len(values)} | {percentile(values, 50):.1f} | {p95:.1f} | "
            f"{p95 / base:.3f} |"
        )
    return rows


async def run(path: Path) -> list[str]:
    conversations = load(path)
    rows = [
        "| keyword index | preset | Recall@5 | Hit@5 | Recall@10 | MRR@10 | p95 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, weights, presets in PLAN:
        async with running_service(Settings(rate_limit_per_minute=0)) as harness:
            logging.getLogger().setLevel(logging.WARNING)
            mapping = await load_into(harness, conversations)
            await rebuild_keywords(harness.resources.sessionmaker, weights=weights)
            for preset in (p.with_(context_weights=weights) for p in presets):
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
    parser.add_argument("--plan", choices=("index", "ranking", "latency"), default="index")
    parser.add_argument("--rounds", type=int, default=1, help="latency plan: passes over all")
    parser.add_argument("--only", nargs="*", help="ranking plan: only these preset names")
    args = parser.parse_args(argv)
    if args.plan == "ranking":
        rows = asyncio.run(run_ranking(args.path, args.only))
    elif args.plan == "latency":
        rows = asyncio.run(run_latency(args.path, args.rounds))
    else:
        rows = asyncio.run(run(args.path))
    print("\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
