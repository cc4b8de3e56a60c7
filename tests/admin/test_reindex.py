"""ivfflat rebuilds: lists sized to the data, staleness, and a schema Alembic still accepts."""

from __future__ import annotations

import asyncio

from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.migrate import alembic_config
from app.repositories.admin import IndexState, MaintenanceRepository, _megabytes, lists_for
from app.services.embedding import EmbeddingService
from app.services.memory import MemoryInput, MemoryService
from app.services.reindex import is_stale, reindex
from tests.admin.fakes import FakeEmbedder

Sessions = async_sessionmaker[AsyncSession]


def test_lists_follow_rows_per_thousand_within_bounds() -> None:
    assert [lists_for(n) for n in (0, 4_000, 10_000, 26_400, 1_000_000, 10**9)] == [
        10,
        10,
        10,
        26,
        1000,
        4000,
    ]


def test_staleness_rule() -> None:
    migration_built = IndexState(lists=100, built_rows=None)
    assert not is_stale(migration_built, 0)
    assert is_stale(migration_built, 1)
    assert not is_stale(IndexState(10, 5000), 10_000)
    assert is_stale(IndexState(10, 5000), 10_001)
    assert is_stale(IndexState(None, None), 0)  # missing index


def test_memory_settings_parse() -> None:
    assert [_megabytes(v) for v in ("256MB", "1GB", "65536kB", "64")] == [256, 1024, 64, 0.0625]


async def _add(sessions: Sessions, user: str, n: int, start: int = 0) -> None:
    async with sessions() as session, session.begin():
        service = MemoryService(session, EmbeddingService(FakeEmbedder()))
        await service.create_many(
            [
                MemoryInput(user_id=user, content=f"memory number {i}", type="note")
                for i in range(start, start + n)
            ]
        )


async def _indexdef(sessions: Sessions, name: str) -> tuple[str, bool]:
    async with sessions() as s:
        row = (
            await s.execute(
                text(
                    "SELECT pg_get_indexdef(i.indexrelid) AS d, i.indisvalid AS valid "
                    "FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
                    "WHERE c.relname = :n"
                ),
                {"n": name},
            )
        ).one()
        return row.d, row.valid


async def test_reindex_sizes_lists_records_rows_and_keeps_alembic_check_clean(
    private_db: str, private_sessions: Sessions, user_id: str
) -> None:
    async with private_sessions() as s:
        assert await MaintenanceRepository(s).index_state("memory_items") == IndexState(100, None)
    await _add(private_sessions, user_id, 30)

    async with private_sessions() as session, session.begin():
        first = await reindex(session, "memory_items", only_if_stale=True)
    assert (first.rebuilt, first.rows, first.lists, first.previous_lists) == (True, 30, 10, 100)
    definition, valid = await _indexdef(private_sessions, "idx_memory_items_embedding")
    assert valid and "USING ivfflat (embedding vector_cosine_ops) WITH (lists='10')" in definition
    async with private_sessions() as s:
        assert await MaintenanceRepository(s).index_state("memory_items") == IndexState(10, 30)

    async with private_sessions() as session, session.begin():
        assert not (await reindex(session, "memory_items", only_if_stale=True)).rebuilt
    await _add(private_sessions, user_id, 31, start=30)  # 61 rows > 2 x 30
    async with private_sessions() as session, session.begin():
        again = await reindex(session, "memory_items", only_if_stale=True)
    assert (again.rebuilt, again.rows, again.previous_rows) == (True, 61, 30)

    async with private_sessions() as session, session.begin():
        messages = await reindex(session, "messages")
    assert messages.rebuilt and messages.rows == 0

    # The model declares lists=100; a rebuilt index with other lists must not show up as drift.
    await asyncio.to_thread(command.check, alembic_config(private_db))
