"""Keyword postings are written in statements of bounded size, with the same result as one.

A 1,000-message import of long texts once ran into the statement timeout in a single INSERT
and answered 500; now it is split, and a timeout that still happens is a 503 like any other.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.domain import ContextWeights
from app.errors import DatabaseUnavailableError
from app.repositories import search_index
from app.repositories.search_index import Document, SearchIndexRepository, Source, _batches
from app.runtime.failures import database_error

TEXTS = [
    "hiking in the alps with my sister",
    "the blue notebook lives in the kitchen drawer",
    "we booked the ferry to Naxos for June",
    "my dentist appointment moved to Tuesday",
    "tomatoes need watering twice a week in summer",
]


def _docs() -> list[Document]:
    return [Document(uuid.uuid4(), Source.MESSAGE, t, "before " + t, "") for t in TEXTS]


def test_batches_keep_order_and_bound_size() -> None:
    docs = _docs()
    for limit in (1, 40, 80, 10_000):
        batches = _batches(docs, limit)
        assert [d for b in batches for d in b] == docs
        for batch in batches:
            size = sum(len(d.text) + len(d.previous) + len(d.following) for d in batch)
            assert len(batch) == 1 or size <= limit
    assert len(_batches(docs, 10_000)) == 1
    assert _batches([], 10) == []


async def _index(
    engine: AsyncEngine,
    user: str,
    docs: list[Document],
    weights: ContextWeights = ContextWeights(),
) -> tuple[int, int, int]:
    async with AsyncSession(engine) as session, session.begin():
        await SearchIndexRepository(session, weights).index(user, docs)
    async with engine.connect() as conn:
        postings = await conn.scalar(
            text("SELECT count(*) FROM search_postings WHERE user_id = :u"), {"u": user}
        )
        stats = (
            await conn.execute(
                text("SELECT doc_count, total_length FROM search_stats WHERE user_id = :u"),
                {"u": user},
            )
        ).one()
    return int(postings or 0), int(stats.doc_count), int(stats.total_length)


async def test_many_statements_index_exactly_what_one_does(
    db_engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = await _index(db_engine, f"batch-one-{uuid.uuid4()}", _docs())
    monkeypatch.setattr(search_index, "INDEX_BATCH_CHARS", 60)  # one or two documents each
    split = await _index(db_engine, f"batch-many-{uuid.uuid4()}", _docs())
    assert split == whole
    assert whole[1] == len(TEXTS)


async def test_the_context_counts_with_the_weights_the_writer_is_given(
    db_engine: AsyncEngine,
) -> None:
    default = await _index(db_engine, f"weights-default-{uuid.uuid4()}", _docs())
    explicit = await _index(
        db_engine, f"weights-half-{uuid.uuid4()}", _docs(), ContextWeights(0.5, 0.5)
    )
    alone = await _index(db_engine, f"weights-off-{uuid.uuid4()}", _docs(), ContextWeights(0, 0))
    assert explicit == default
    assert alone[2] < default[2]  # the context's lexemes no longer lengthen the documents


async def test_a_statement_timeout_is_reported_as_unavailable(db_engine: AsyncEngine) -> None:
    async with db_engine.connect() as conn:
        await conn.execute(text("SET statement_timeout = 50"))
        with pytest.raises(DBAPIError) as caught:
            await conn.execute(text("SELECT pg_sleep(1)"))
    mapped = database_error(caught.value)
    assert isinstance(mapped, DatabaseUnavailableError)
    assert mapped.status_code == 503
    assert "timed out" in mapped.message
