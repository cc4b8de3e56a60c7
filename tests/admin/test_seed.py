"""Seeding on the shared database, per user: idempotency, validation, near-duplicates, dry run.

These runs pass reindex=False: index rebuilds are tested in a private database.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.adapters.cache import Cache
from app.adapters.embedder import LocalEmbedder
from app.services.embedding import EmbeddingService
from app.services.seed import SeedOptions, SeedReport, seed_file
from tests.helpers import as_stored

TEA = "Alice prefers tea over coffee in the morning"
TEA_2 = "Alice prefers tea rather than coffee in the morning"
CAT = "Alice's cat is called Miso and sleeps on the keyboard"
BILLING = "The team decided to move the billing service to Postgres in March"

Sessions = async_sessionmaker[AsyncSession]


def _jsonl(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / f"{uuid.uuid4().hex}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _row(user: str, content: str, type_: str = "fact", **extra: Any) -> dict[str, Any]:
    return {"user_id": user, "content": content, "type": type_, **extra}


async def _seed(
    path: Path,
    sessions: Sessions,
    embedder: LocalEmbedder,
    cache: Cache | None = None,
    **options: Any,
) -> SeedReport:
    opts = SeedOptions(reindex=False, **options)
    return await seed_file(path, sessions, EmbeddingService(embedder), options=opts, cache=cache)


async def _memories(sessions: Sessions, user: str) -> list[Any]:
    async with sessions() as s:
        rows = await s.execute(
            text(
                "SELECT id, content, type, importance, embedding_model, embedding::text AS vec "
                "FROM memory_items WHERE user_id = :u ORDER BY created_at, content"
            ),
            {"u": user},
        )
        return list(rows)


async def _lexemes(sessions: Sessions, user: str, item_id: uuid.UUID) -> set[str]:
    async with sessions() as s:
        rows = await s.execute(
            text("SELECT lexeme FROM search_postings WHERE user_id = :u AND item_id = :i"),
            {"u": user, "i": item_id},
        )
        return {r.lexeme for r in rows}


async def test_seed_adds_with_vectors_and_postings_then_skips_on_rerun(
    tmp_path: Path, shared_sessions: Sessions, embedder: LocalEmbedder, user_id: str
) -> None:
    path = _jsonl(
        tmp_path,
        [
            _row(user_id, TEA, "preference", importance=0.8, source="crm"),
            _row(
                user_id, CAT, created_at="2024-05-01T10:00:00Z", expires_at="2030-01-01T00:00:00Z"
            ),
            _row(user_id, BILLING, "decision"),
        ],
    )
    report = await _seed(path, shared_sessions, embedder)
    assert (report.added, report.updated, report.skipped, report.invalid) == (3, 0, 0, 0)
    assert report.written and report.near_duplicates == []
    stored = await _memories(shared_sessions, user_id)
    assert {r.content for r in stored} == {TEA, CAT, BILLING}
    assert {r.embedding_model for r in stored} == {embedder.model}
    tea = next(r for r in stored if r.content == TEA)
    assert (tea.type, tea.importance) == ("preference", 0.8)
    expected = embedder.embed_sync([TEA])[0]
    np.testing.assert_array_equal(
        np.array(json.loads(tea.vec), dtype=np.float32), as_stored(expected)
    )
    assert {"tea", "coffe", "morn"} <= await _lexemes(shared_sessions, user_id, tea.id)
    async with shared_sessions() as s:
        docs = await s.scalar(
            text("SELECT doc_count FROM search_stats WHERE user_id = :u"), {"u": user_id}
        )
    assert docs == 3

    again = await _seed(path, shared_sessions, embedder)
    assert (again.added, again.updated, again.skipped) == (0, 0, 3)
    assert len(await _memories(shared_sessions, user_id)) == 3


async def test_invalid_row_blocks_the_load_unless_skip_invalid(
    tmp_path: Path, shared_sessions: Sessions, embedder: LocalEmbedder, user_id: str
) -> None:
    path = _jsonl(
        tmp_path,
        [
            _row(user_id, TEA),
            _row(user_id, CAT, "opinion"),
            _row(user_id, BILLING),
        ],
    )
    report = await _seed(path, shared_sessions, embedder)
    assert not report.written and report.added == 0
    assert [str(e)[:14] for e in report.errors] == ["line 2: type: "]
    assert await _memories(shared_sessions, user_id) == []

    report = await _seed(path, shared_sessions, embedder, skip_invalid=True)
    assert (report.added, report.invalid, report.rows) == (2, 1, 3)
    assert {r.content for r in await _memories(shared_sessions, user_id)} == {TEA, BILLING}


async def test_near_duplicate_is_reported_and_added_by_default(
    tmp_path: Path,
    shared_sessions: Sessions,
    embedder: LocalEmbedder,
    user_id: str,
    other_user_id: str,
) -> None:
    await _seed(
        _jsonl(tmp_path, [_row(user_id, TEA), _row(user_id, BILLING)]), shared_sessions, embedder
    )
    first = {r.content: r.id for r in await _memories(shared_sessions, user_id)}
    report = await _seed(
        _jsonl(tmp_path, [_row(user_id, CAT), _row(user_id, TEA_2), _row(other_user_id, TEA_2)]),
        shared_sessions,
        embedder,
    )
    assert report.added == 3
    # Only the same user's memory counts: the other user has no tea memory yet.
    (near,) = report.near_duplicates
    assert (near.line, near.existing_id, near.updated) == (2, first[TEA], False)
    assert near.cosine >= 0.9
    assert "line 2: near-duplicate of memory" in str(near)
    assert len(await _memories(shared_sessions, user_id)) == 4


async def test_update_near_duplicates_rewrites_the_stored_memory(
    tmp_path: Path, shared_sessions: Sessions, embedder: LocalEmbedder, user_id: str
) -> None:
    await _seed(
        _jsonl(tmp_path, [_row(user_id, TEA, "fact", importance=0.3)]), shared_sessions, embedder
    )
    (before,) = await _memories(shared_sessions, user_id)
    report = await _seed(
        _jsonl(tmp_path, [_row(user_id, TEA_2, "preference")]),
        shared_sessions,
        embedder,
        update_near_duplicates=True,
    )
    assert (report.added, report.updated) == (0, 1)
    (after,) = await _memories(shared_sessions, user_id)
    assert after.id == before.id
    assert (after.content, after.type) == (TEA_2, "preference")
    assert after.importance == 0.3  # not given in the row: kept
    np.testing.assert_array_equal(
        np.array(json.loads(after.vec), dtype=np.float32),
        as_stored(embedder.embed_sync([TEA_2])[0]),
    )
    lexemes = await _lexemes(shared_sessions, user_id, after.id)
    assert "rather" in lexemes and "alic" in lexemes
    async with shared_sessions() as s:
        docs = await s.scalar(
            text("SELECT doc_count FROM search_stats WHERE user_id = :u"), {"u": user_id}
        )
    assert docs == 1
    # Re-running the file changes nothing: its text is now stored.
    rerun = await _seed(
        _jsonl(tmp_path, [_row(user_id, TEA_2, "preference")]),
        shared_sessions,
        embedder,
        update_near_duplicates=True,
    )
    assert (rerun.added, rerun.updated, rerun.skipped) == (0, 0, 1)


async def test_near_duplicates_inside_one_file(
    tmp_path: Path,
    shared_sessions: Sessions,
    embedder: LocalEmbedder,
    user_id: str,
    other_user_id: str,
) -> None:
    rows = [_row(user_id, TEA), _row(user_id, CAT), _row(user_id, TEA_2)]
    report = await _seed(_jsonl(tmp_path, rows), shared_sessions, embedder)
    assert report.added == 3
    (near,) = report.near_duplicates
    assert (near.line, near.existing_line, near.existing_id) == (3, 1, None)

    rows = [_row(other_user_id, TEA), _row(other_user_id, CAT), _row(other_user_id, TEA_2)]
    report = await _seed(
        _jsonl(tmp_path, rows), shared_sessions, embedder, update_near_duplicates=True
    )
    assert (report.added, report.updated) == (2, 1)
    assert {r.content for r in await _memories(shared_sessions, other_user_id)} == {CAT, TEA_2}


async def test_dry_run_counts_exactly_and_writes_nothing(
    tmp_path: Path, shared_sessions: Sessions, embedder: LocalEmbedder, user_id: str
) -> None:
    # batch_size=2 puts the repeat and the near-duplicate in later batches than their originals.
    rows = [_row(user_id, TEA), _row(user_id, CAT), _row(user_id, TEA), _row(user_id, TEA_2)]
    report = await _seed(
        _jsonl(tmp_path, rows),
        shared_sessions,
        embedder,
        dry_run=True,
        batch_size=2,
        update_near_duplicates=True,
    )
    assert (report.added, report.updated, report.skipped) == (2, 1, 1)
    assert report.dry_run and not report.written
    assert report.summary().startswith("dry run, would have: added 2, updated 1, skipped 1")
    assert await _memories(shared_sessions, user_id) == []


async def test_seed_invalidates_cached_queries_of_written_users(
    tmp_path: Path, shared_sessions: Sessions, embedder: LocalEmbedder, cache: Cache, user_id: str
) -> None:
    key = f"query_gen:{user_id}"
    assert cache._redis is not None
    before = int(await cache._redis.get(key) or 0)
    await _seed(_jsonl(tmp_path, [_row(user_id, TEA)]), shared_sessions, embedder, cache=cache)
    assert int(await cache._redis.get(key) or 0) == before + 1
