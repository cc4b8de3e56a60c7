"""read_transaction: the query path's transaction through asyncpg on the engine's pool
(app/db.py). Its scope must be the session's, and a failed or cancelled one must never leave
a connection in the pool inside a transaction or carrying a user."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import create_engine, create_sessionmaker, read_transaction, user_session
from app.repositories.retrieval import RetrievalRepository
from tests.helpers import add_messages

_SCOPE = (
    "SELECT current_setting('pgrecall.user_id', true) AS u, "
    "current_setting('plan_cache_mode') AS plans, "
    "current_setting('max_parallel_workers_per_gather') AS workers, "
    "current_setting('random_page_cost') AS page_cost, pg_backend_pid() AS pid"
)


@asynccontextmanager
async def one_connection(app: Any) -> AsyncIterator[AsyncEngine]:
    """An engine of the service role with one pooled connection: used one transaction at a
    time, what one transaction leaves on it, the next one gets."""
    url = app.state.resources.engine.url.render_as_string(hide_password=False)
    engine = create_engine(url, pool_size=1)
    try:
        yield engine
    finally:
        await engine.dispose()


async def test_reads_see_only_the_user_and_run_with_the_read_path_settings(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (client, app):
        await add_messages(client, user_id, ["the harbour at dawn"])
        await add_messages(client, user_id + "-other", ["the harbour at dusk"])
        engine = app.state.resources.engine
        async with read_transaction(engine, user_id, {"random_page_cost": "1.1"}) as reads:
            (scope,) = await reads.fetch(_SCOPE, {})
            assert (scope["u"], scope["plans"], scope["workers"], scope["page_cost"]) == (
                user_id,
                "force_custom_plan",
                "0",
                "1.1",
            )
            # Row-level security, not only the predicate: no user_id filter in the statement.
            rows = await reads.fetch("SELECT user_id, content FROM messages", {})
            assert [(r["user_id"], r["content"]) for r in rows] == [
                (user_id, "the harbour at dawn")
            ]
            repo = RetrievalRepository(reads)
            size = await repo.search_size(user_id, up_to=100)
            assert size.items == 1


async def test_the_connection_goes_back_without_the_user_or_a_transaction(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app), one_connection(app) as engine:
        async with read_transaction(engine, user_id) as reads:
            (inside,) = await reads.fetch(_SCOPE, {})
        # The same pooled connection, through SQLAlchemy's own session: no user, no open
        # transaction (a session's BEGIN would otherwise become a savepoint).
        async with create_sessionmaker(engine)() as session, session.begin():
            row = (await session.execute(text(_SCOPE))).mappings().one()
            assert row["pid"] == inside["pid"]
            assert row["u"] in (None, "")
            assert row["plans"] == "auto"
        async with user_session(create_sessionmaker(engine), user_id) as session:
            async with session.begin():
                await session.execute(text("SELECT 1"))
            assert not session.in_transaction()


async def test_a_failed_statement_is_rolled_back_and_the_connection_kept(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app), one_connection(app) as engine:
        with pytest.raises(DBAPIError, match="division by zero"):
            async with read_transaction(engine, user_id) as reads:
                (before,) = await reads.fetch(_SCOPE, {})
                await reads.fetch("SELECT 1 / CAST(:zero AS int) AS x", {"zero": 0})
        async with read_transaction(engine, user_id + "-next") as reads:
            (after,) = await reads.fetch(_SCOPE, {})
        assert after["pid"] == before["pid"]  # rolled back and reused, not replaced
        assert after["u"] == user_id + "-next"


async def test_an_error_in_the_callers_code_rolls_back_too(
    make_client: Callable[..., Any], user_id: str
) -> None:
    async with make_client() as (_, app), one_connection(app) as engine:
        with pytest.raises(KeyError):
            async with read_transaction(engine, user_id) as reads:
                await reads.fetch("SELECT 1 AS x", {})
                raise KeyError("ranking bug")
        async with create_sessionmaker(engine)() as session, session.begin():
            row = (await session.execute(text(_SCOPE))).mappings().one()
            assert row["u"] in (None, "")


async def test_a_cancelled_statement_closes_its_connection(
    make_client: Callable[..., Any], user_id: str
) -> None:
    """A query's time limit cancels the task mid-statement: the statement may still run on the
    server, so the connection is not given to the next query."""
    async with make_client() as (_, app), one_connection(app) as engine:

        async def slow() -> None:
            async with read_transaction(engine, user_id) as reads:
                (inside,) = await reads.fetch(_SCOPE, {})
                pids.append(inside["pid"])
                await reads.fetch("SELECT pg_sleep(5)", {})

        pids: list[int] = []
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow(), timeout=0.5)
        async with read_transaction(engine, user_id) as reads:
            (after,) = await reads.fetch(_SCOPE, {})
        assert after["pid"] != pids[0]
        assert after["u"] == user_id


async def test_a_user_is_required(make_client: Callable[..., Any]) -> None:
    async with make_client() as (_, app):
        with pytest.raises(ValueError, match="user id"):
            async with read_transaction(app.state.resources.engine, ""):
                pass


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_any_user_id_reaches_row_security_exactly(
    make_client: Callable[..., Any], conforming: str
) -> None:
    """BEGIN and the SET LOCALs go as one message with the values as literals: quotes and
    backslashes must come through as they are, whatever standard_conforming_strings says."""
    hostile = [
        "o'brien",
        "back\\slash",
        "x');SELECT pgrecall_set_local(ARRAY['pgrecall.admin'],ARRAY['on']);--",
        "\\'; SET LOCAL pgrecall.admin = on; --",
        "$$dollar$$",
        "ünïcode-ユーザー",
    ]
    async with make_client() as (_, app), one_connection(app) as engine:
        async with engine.connect() as connection:  # a session-level setting on the one connection
            await connection.exec_driver_sql(f"SET standard_conforming_strings = {conforming}")
            await connection.commit()
        for user in hostile:
            async with read_transaction(engine, user) as reads:
                (row,) = await reads.fetch(
                    "SELECT current_setting('pgrecall.user_id', true) AS u, "
                    "current_setting('pgrecall.admin', true) AS admin, "
                    "current_setting('standard_conforming_strings') AS conforming",
                    {},
                )
            assert (row["u"], row["admin"] or "", row["conforming"]) == (user, "", conforming)
