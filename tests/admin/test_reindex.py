"""ivfflat rebuilds: lists sized to the data, staleness, and a schema Alembic still accepts."""

from __future__ import annotations

import asyncio

import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.migrate import alembic_config
from app.repositories.maintenance import (
    IndexState,
    MaintenanceRepository,
    _megabytes,
    lists_for,
    user_index_name,
    user_lists_for,
)
from app.services.embedding import EmbeddingService
from app.services.memory import MemoryInput, MemoryService
from app.services.reindex import OwnIndexBands, is_stale, reindex, reindex_users
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


def test_a_users_own_index_has_a_list_per_500_rows_within_bounds() -> None:
    assert [user_lists_for(n) for n in (0, 5_000, 10_001, 50_000, 50_099, 10**9)] == [
        10,
        10,
        20,
        100,
        100,
        4000,
    ]


def test_staleness_rule() -> None:
    migration_built = IndexState(lists=100, built_rows=None)
    assert not is_stale(migration_built, 0)
    assert is_stale(migration_built, 1)
    assert not is_stale(IndexState(10, 5000), 10_000)
    assert is_stale(IndexState(10, 5000), 10_001)
    assert is_stale(IndexState(None, None), 0)  # missing index
    assert is_stale(IndexState(None, None, None), 0, "hnsw")  # missing index
    hnsw = IndexState(None, 5000, "hnsw")
    assert not is_stale(hnsw, 10**9)  # a graph takes every insert: never stale by growth
    assert not is_stale(hnsw, 0, "hnsw")
    assert is_stale(hnsw, 0, "ivfflat")  # the other method than the one asked for
    assert is_stale(IndexState(10, 5000), 0, "hnsw")
    assert not is_stale(IndexState(10, 5000), 10_000, "ivfflat")


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
    assert valid and "USING ivfflat (embedding halfvec_cosine_ops) WITH (lists='10')" in definition
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


async def test_reindex_switches_between_ivfflat_and_hnsw_and_keeps_the_current_method(
    private_db: str, private_sessions: Sessions, user_id: str
) -> None:
    await _add(private_sessions, user_id, 30)
    async with private_sessions() as session, session.begin():
        to_hnsw = await reindex(session, "memory_items", only_if_stale=True, method="hnsw")
    assert (to_hnsw.rebuilt, to_hnsw.method, to_hnsw.previous_method) == (True, "hnsw", "ivfflat")
    definition, valid = await _indexdef(private_sessions, "idx_memory_items_embedding")
    assert valid and "USING hnsw (embedding halfvec_cosine_ops)" in definition
    assert "m='16'" in definition and "ef_construction='64'" in definition
    async with private_sessions() as s:
        state = await MaintenanceRepository(s).index_state("memory_items")
    assert state == IndexState(None, to_hnsw.rows, "hnsw")

    # More than doubled: HNSW stays fresh.
    await _add(private_sessions, user_id, 2 * to_hnsw.rows, start=30)
    async with private_sessions() as session, session.begin():
        assert not (await reindex(session, "memory_items", only_if_stale=True)).rebuilt
    # Callers without a method (re-embed, seed) rebuild what is there: still HNSW.
    async with private_sessions() as session, session.begin():
        kept = await reindex(session, "memory_items")
    assert (kept.rebuilt, kept.method, kept.rows) == (True, "hnsw", 3 * to_hnsw.rows)
    definition, _ = await _indexdef(private_sessions, "idx_memory_items_embedding")
    assert "USING hnsw" in definition

    async with private_sessions() as session, session.begin():
        back = await reindex(session, "memory_items", only_if_stale=True, method="ivfflat")
    assert (back.rebuilt, back.method, back.previous_method) == (True, "ivfflat", "hnsw")
    definition, valid = await _indexdef(private_sessions, "idx_memory_items_embedding")
    assert valid and "USING ivfflat (embedding halfvec_cosine_ops) WITH (lists='10')" in definition
    # An HNSW index under the model's name is not schema drift either.
    async with private_sessions() as session, session.begin():
        await reindex(session, "messages", method="hnsw")
    await asyncio.to_thread(command.check, alembic_config(private_db))


async def test_per_user_indexes_follow_the_users_above_the_threshold(
    private_db: str, private_sessions: Sessions
) -> None:
    big, odd, small = "idx-big", "o'brien; DROP TABLE x --", "idx-small"
    # Larger than any other test's user in this database (those stay under 300 rows).
    await _add(private_sessions, big, 400)
    await _add(private_sessions, odd, 350)
    await _add(private_sessions, small, 5)

    async with private_sessions() as session, session.begin():
        first = await reindex_users(session, "memory_items", more_than=300)
    assert (first.users, first.built, first.fresh, first.dropped) == (2, 2, 0, 0)
    for user in (big, odd):
        definition, valid = await _indexdef(private_sessions, user_index_name("memory_items", user))
        assert (
            valid and "USING ivfflat (embedding halfvec_cosine_ops) WITH (lists='10')" in definition
        )
    definition, _ = await _indexdef(private_sessions, user_index_name("memory_items", odd))
    assert "WHERE ((user_id)::text = 'o''brien; DROP TABLE x --'::text)" in definition
    async with private_sessions() as s:
        states = await MaintenanceRepository(s).user_index_states("memory_items")
    assert states[user_index_name("memory_items", big)] == IndexState(10, 400, "ivfflat")

    # An index built under another lists rule (an older pgrecall's) is stale.
    async with private_sessions() as session, session.begin():
        await MaintenanceRepository(session).build_user_index("memory_items", odd, 20, 350)
    async with private_sessions() as session, session.begin():
        relisted = await reindex_users(session, "memory_items", more_than=300, only_if_stale=True)
    assert (relisted.users, relisted.built, relisted.fresh) == (2, 1, 1)
    definition, _ = await _indexdef(private_sessions, user_index_name("memory_items", odd))
    assert "WITH (lists='10')" in definition

    await _add(private_sessions, big, 401, start=400)  # 801 rows > 2 x 400: stale
    async with private_sessions() as session, session.begin():
        again = await reindex_users(session, "memory_items", more_than=300, only_if_stale=True)
    assert (again.users, again.built, again.fresh, again.dropped) == (2, 1, 1, 0)
    # A re-embed rebuilds the existing set (more_than None): nothing added or dropped.
    async with private_sessions() as session, session.begin():
        kept = await reindex_users(session, "memory_items", more_than=None)
    assert (kept.users, kept.built, kept.dropped) == (2, 2, 0)
    # A higher threshold drops the users no longer above it.
    async with private_sessions() as session, session.begin():
        fewer = await reindex_users(session, "memory_items", more_than=380, only_if_stale=True)
    assert (fewer.users, fewer.built, fewer.fresh, fewer.dropped) == (1, 0, 1, 1)
    async with private_sessions() as s:
        names = set(await MaintenanceRepository(s).user_index_states("memory_items"))
    assert names == {user_index_name("memory_items", big)}
    with pytest.raises(ValueError):
        async with private_sessions() as s:
            await MaintenanceRepository(s).drop_user_index("memory_items", "idx_memory_items_pk")
    await asyncio.to_thread(command.check, alembic_config(private_db))


async def test_users_under_the_exact_threshold_get_an_hnsw_index_above_its_floor(
    private_sessions: Sessions,
) -> None:
    """OwnIndexBands (PGRECALL_USER_HNSW_MIN_ITEMS, the exact threshold): HNSW
    for a user between the two, ivfflat above the threshold, none under the floor; a user who
    crosses the threshold gets the other method at the next --if-stale run."""
    band, above, under = "hnsw-band", "hnsw-above", "hnsw-under"
    await _add(private_sessions, band, 320)
    await _add(private_sessions, above, 370)
    await _add(private_sessions, under, 20)
    assert OwnIndexBands.of(enabled=True, exact_max_items=360, hnsw_min_items=300) == (300, 360)
    # A floor at or over the threshold: only the users above it (no HNSW band).
    assert OwnIndexBands.of(enabled=True, exact_max_items=360, hnsw_min_items=400) == (360, 360)
    off = OwnIndexBands.of(enabled=False, exact_max_items=360, hnsw_min_items=300)
    assert off.more_than == 2**62

    async def states() -> dict[str, IndexState | None]:
        async with private_sessions() as s:
            found = await MaintenanceRepository(s).user_index_states("memory_items")
        return {u: found.get(user_index_name("memory_items", u)) for u in (band, above, under)}

    async with private_sessions() as session, session.begin():
        await reindex_users(session, "memory_items", more_than=300, hnsw_up_to=360)
    assert await states() == {
        band: IndexState(None, 320, "hnsw"),
        above: IndexState(10, 370, "ivfflat"),
        under: None,
    }
    definition, valid = await _indexdef(private_sessions, user_index_name("memory_items", band))
    assert valid and "USING hnsw (embedding halfvec_cosine_ops) WITH (m='16'" in definition
    assert "WHERE ((user_id)::text = 'hnsw-band'::text)" in definition

    # Nothing changed: both are fresh. The band user grows past the threshold: ivfflat.
    async with private_sessions() as session, session.begin():
        same = await reindex_users(
            session, "memory_items", more_than=300, hnsw_up_to=360, only_if_stale=True
        )
    assert same.built == 0
    await _add(private_sessions, band, 60, start=320)
    async with private_sessions() as session, session.begin():
        grown = await reindex_users(
            session, "memory_items", more_than=300, hnsw_up_to=360, only_if_stale=True
        )
    assert grown.built == 1
    assert (await states())[band] == IndexState(10, 380, "ivfflat")
    # A re-embed (more_than None) keeps each index's method.
    async with private_sessions() as session, session.begin():
        await reindex_users(session, "memory_items", more_than=None, hnsw_up_to=400)
    assert (await states())[band] == IndexState(10, 380, "ivfflat")
