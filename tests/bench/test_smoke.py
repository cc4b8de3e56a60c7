"""The benchmark's code path on a tiny store (shape of the report, not timings), and the bulk
loader's keyword postings against the service's own indexing path."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import numpy as np

from app.adapters.embedder import LocalEmbedder
from app.db import create_engine, create_sessionmaker
from app.embedded import EmbeddedPostgres
from app.embedding_models import DEFAULT_MODEL_ID
from app.repositories.bulk import BulkMemory, BulkRepository
from app.repositories.search_index import Document, SearchIndexRepository, Source
from app.services.memory import content_hash
from bench.corpus import generate, layout
from bench.report import load_baselines, plot, result_path, table
from bench.run import BenchConfig, run_size
from bench.store import database, drop_database

LATENCY_KEYS = {"n", "p50", "p95", "p99", "mean", "max"}


async def test_bench_smoke_run_writes_the_report(
    pg: EmbeddedPostgres, embedder: LocalEmbedder, tmp_path: Path
) -> None:
    cfg = BenchConfig(
        out_dir=tmp_path,
        levels=((2, 12),),
        time_cap_s=60,
        warmup=2,
        queries=40,
        recall_queries=12,
        timing_samples=4,
        distinct=200,
        big_size=100,
    )
    try:
        result = await run_size(pg.url, 200, embedder.embed_sync, cfg)
    finally:
        await drop_database(database(pg.url, "postgres").dsn, "bench_200")

    assert json.loads(result_path(tmp_path, 200).read_text()) == json.loads(json.dumps(result))
    store = result["store"]
    assert store["items"] == 200 and store["big_users"] == [
        {"user_id": "bench-big-0", "items": 100}
    ]
    assert store["ivfflat_lists"] == 10 and store["users"] >= 2
    (level,) = result["levels"]
    assert level["concurrency"] == 2 and level["completed"] == 12 and level["errors"] == 0
    assert set(level["latency_ms"]) == LATENCY_KEYS and level["latency_ms"]["p50"] > 0
    assert level["big_user_latency_ms"]["n"] + level["small_user_latency_ms"]["n"] == 12
    assert level["throughput_rps"] > 0 and level["rss_mb_peak"] > 50
    cpu = level["cpu_ms_per_request"]
    assert cpu["service"] > 0 and cpu["postgres"] > 0  # both process sets were found
    assert level["mean_memories_returned"] > 0  # questions about the user's own memories match
    share = result["breakdown_c1"]["share"]
    assert set(share) == {"embedding", "database", "packing_and_other"}
    assert result["breakdown_c1"]["samples"] == 4
    recall = result["recall"]
    assert recall["queries"] == 12 and recall["exact_path_queries"] == 12
    assert recall["recall_at_10"] == 1.0 and recall["short_result_sets"] == 0  # exact path
    assert set(result["targets"]) >= {"p95_c1_met", "recall_at_10_met", "zero_short_result_sets"}

    assert load_baselines(tmp_path)[0]["store"]["items"] == 200
    png = plot(load_baselines(tmp_path), tmp_path / "plot.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"
    assert "| 200 | 2 |" in table(load_baselines(tmp_path))


async def test_bulk_postings_match_the_service_index(pg: EmbeddedPostgres) -> None:
    """Items loaded with COPY get the postings and statistics SearchIndexRepository writes."""
    texts = [m.text for m in generate(7, 25)] + ["", "the and of"]  # stop words only: no lexeme
    bulk_user, service_user = f"bulk-{uuid.uuid4()}", f"svc-{uuid.uuid4()}"
    vector = np.ones(384, dtype=np.float32) / np.sqrt(384)
    rows = [
        BulkMemory(
            uuid.uuid4(),
            bulk_user,
            t,
            content_hash(t),
            "note",
            vector,
            DEFAULT_MODEL_ID,
            0.5,
            datetime.now(UTC),
        )
        for t in texts
    ]
    conn = await asyncpg.connect(database(pg.url, "postgres").dsn)
    try:
        repo = BulkRepository(conn)
        await repo.register_codecs()
        async with conn.transaction():
            assert await repo.copy_memories(rows) == len(rows)
            await repo.index_memories([r.id for r in rows], batch=10)
        engine = create_engine(pg.url, pool_size=1)
        try:
            async with create_sessionmaker(engine)() as session, session.begin():
                await SearchIndexRepository(session).index(
                    service_user, [Document(uuid.uuid4(), Source.MEMORY, t) for t in texts]
                )
        finally:
            await engine.dispose()

        async def postings(user: str) -> list[tuple[str, int, int]]:
            found = await conn.fetch(
                "SELECT lexeme, tf, dl FROM search_postings WHERE user_id = $1 AND source = 0", user
            )
            return sorted((r["lexeme"], r["tf"], r["dl"]) for r in found)

        bulk_postings = await postings(bulk_user)
        assert len(bulk_postings) > 100 and bulk_postings == await postings(service_user)
        stats = "SELECT doc_count, total_length FROM search_stats WHERE user_id = $1"
        bulk_stats = tuple(await conn.fetchrow(stats, bulk_user))
        assert bulk_stats == tuple(await conn.fetchrow(stats, service_user))
        assert bulk_stats[0] == len(texts)
    finally:
        await conn.execute(
            "DELETE FROM search_postings WHERE user_id = ANY($1)", [bulk_user, service_user]
        )
        await conn.execute(
            "DELETE FROM search_stats WHERE user_id = ANY($1)", [bulk_user, service_user]
        )
        await conn.execute("DELETE FROM memory_items WHERE user_id = $1", bulk_user)
        await conn.close()


def test_layout_is_skewed() -> None:
    users = layout(100_000, 42)
    assert sum(u.size for u in users) == 100_000
    assert [u.size for u in users if u.big] == [50_000]
    assert all(50 <= u.size <= 2000 for u in users if not u.big)
    starts = [u.start for u in users]
    assert starts == sorted(starts) and starts[0] == 0


def test_corpus_is_unique_and_prefix_stable() -> None:
    """Stores of different sizes share embeddings only if text i never depends on the count."""
    many = generate(42, 5000)
    assert len({m.text for m in many}) == 5000
    assert generate(42, 100) == many[:100]
    assert {m.type for m in many} == {"fact", "preference", "decision", "note"}
