"""SessionBound._rows: the query path's reads through asyncpg itself, in the session's
transaction (app/repositories/retrieval/common.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.db import create_sessionmaker, positional, user_session
from app.repositories.retrieval import RetrievalRepository, Source
from app.repositories.retrieval.common import SessionBound
from app.repositories.retrieval.keyword import _EXPANSION_CTE, BM25_SQL
from tests.helpers import add_messages

STATEMENTS = [
    "SELECT :a, CAST(:b AS vector), x::int, NULL::timestamptz, :a + 1, y = ANY(CAST(:c AS uuid[]))",
    BM25_SQL.format(source_filter="s.source = 1", expansion="", terms="idf"),
    BM25_SQL.format(source_filter="s.source = 1", expansion=_EXPANSION_CTE, terms="expansion"),
]


@pytest.mark.parametrize("sql", STATEMENTS)
def test_binds_are_the_ones_sqlalchemy_finds_numbered_in_order(sql: str) -> None:
    query, names = positional(sql)
    assert list(names) == list(text(sql)._bindparams)  # SQLAlchemy's own reading of the binds
    for i, name in enumerate(names, start=1):
        assert f"${i}" in query and f":{name}" not in query.replace("::", "")
    assert query.count("::") == sql.count("::")  # casts untouched


async def test_rows_read_in_the_sessions_transaction_and_scope(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        items = await add_messages(client, user_id, ["the harbour at dawn"])
        key = (Source.MESSAGE, uuid.UUID(items[0]["id"]))
        async with (
            user_session(app.state.resources.sessionmaker, user_id) as session,
            session.begin(),
        ):
            repo = RetrievalRepository(session)
            # the scope's SET LOCAL ran first: row-level security and the predicate agree
            rows = await repo._rows(
                "SELECT current_setting('pgrecall.user_id') AS u, count(*) AS n "
                "FROM messages WHERE user_id = :user_id",
                {"user_id": user_id},
            )
            assert (rows[0]["u"], rows[0]["n"]) == (user_id, 1)
            # a write earlier in the transaction is seen: the same connection and transaction
            await session.execute(
                text("UPDATE messages SET content = 'changed' WHERE user_id = :u AND id = :i"),
                {"u": user_id, "i": key[1]},
            )
            fetched = await repo.fetch(user_id, [key])
            assert fetched[key].content == "changed"
            await session.rollback()


async def test_a_transaction_not_started_yet_is_left_to_sqlalchemy(
    make_client: Callable[..., Any],
) -> None:
    async with make_client() as (_, app):
        engine = app.state.resources.engine
        async with create_sessionmaker(engine)() as session, session.begin():
            bound = SessionBound(session)
            rows = await bound._rows("SELECT CAST(:x AS int) AS x, now() AS t", {"x": 7})
            again = await bound._rows("SELECT now() AS t", {})
            assert rows[0]["x"] == 7
            assert rows[0]["t"] == again[0]["t"]  # one transaction: now() is its start


async def test_a_postgres_error_is_a_sqlalchemy_error(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with (
        make_client() as (_, app),
        user_session(app.state.resources.sessionmaker, user_id) as session,
        session.begin(),
    ):
        repo = RetrievalRepository(session)
        with pytest.raises(DBAPIError) as caught:
            await repo._rows("SELECT 1 / CAST(:zero AS int) AS x", {"zero": 0})
        assert "division by zero" in str(caught.value)
