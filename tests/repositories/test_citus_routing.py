"""On a Citus coordinator, every user-scoped repository statement runs on one shard, under
generic plans as under custom ones (issue 42; docs/scaling.md, "Routing").

A prepared statement's generic plan does not know its `user_id`: Citus then routes it to one
shard only when its fast-path router planner takes it (one distributed table, no join, no
subquery, `user_id = $n` at the top of WHERE) or the statement's transaction plans for its
values (custom plans). The retrieval-usage UPDATE joined `unnest(...)` and ran on all 32 shards
once its plan went generic. This test runs the driver of tests/repositories/test_user_scope.py
(every public repository method) with `plan_cache_mode = force_generic_plan` on its connections
and `citus.multi_task_query_log_level = warning`, and fails on any multi-shard statement of a
method that is not on that test's reviewed allow-list of statements that span users. (The
bulk loader, `BulkRepository`, is the benchmarks' owner-side loader, not a user's request.)

Skipped without a coordinator at PGRECALL_TEST_DATABASE_URL (CI has no Citus).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.citus import citus_version
from app.db import create_sessionmaker, user_session
from app.embedded import EmbeddedPostgres
from app.repositories.usage import UsageRepository
from tests.repositories.test_user_scope import ALLOWED, Recorder, drive_session

GENERIC = {
    "plan_cache_mode": "force_generic_plan",
    "citus.multi_task_query_log_level": "warning",
}


class RoutingRecorder(Recorder):
    """Recorder that also tells which method a multi-shard warning came during."""

    def __init__(self) -> None:
        super().__init__()
        self.notices: list[str] = []
        self.multi_task: list[str] = []

    def listen(self, _conn: Any, message: Any) -> None:
        if "multi-task" in str(message):
            self.notices.append(str(message))

    async def call(self, cls: str, method: str, call: Any) -> Any:
        before = len(self.notices)
        try:
            return await super().call(cls, method, call)
        finally:
            await asyncio.sleep(0)  # the listener's callbacks are scheduled, not called inline
            if len(self.notices) > before and (cls, method) not in ALLOWED:
                self.multi_task.append(f"{cls}.{method}: {len(self.notices) - before} multi-task")


@pytest.fixture
async def generic_engine(pg: EmbeddedPostgres, db_engine: AsyncEngine) -> Any:
    async with db_engine.connect() as conn:
        if await citus_version(conn) is None:
            pytest.skip("needs PGRECALL_TEST_DATABASE_URL at a Citus coordinator")
    engine = create_async_engine(pg.url, connect_args={"server_settings": GENERIC})
    try:
        yield engine
    finally:
        await engine.dispose()


async def test_every_user_scoped_statement_routes_to_one_shard_under_generic_plans(
    generic_engine: AsyncEngine, user_id: str
) -> None:
    rec = RoutingRecorder()
    # In a user-scoped transaction, as the service sends them (its scope statement first).
    async with user_session(create_sessionmaker(generic_engine), user_id) as session:
        await session.begin()
        try:
            raw = await (await session.connection()).get_raw_connection()
            raw.driver_connection.add_log_listener(rec.listen)  # type: ignore[union-attr]
            await drive_session(session, rec, user_id)
        finally:
            await session.rollback()
    assert rec.called, "nothing was driven"
    assert not rec.multi_task, "user-scoped statements on every shard:\n" + "\n".join(
        rec.multi_task
    )


async def test_usage_update_routes_on_its_own_under_a_generic_plan(
    generic_engine: AsyncEngine, user_id: str
) -> None:
    """The retrieval-usage UPDATE needs no custom plan: Citus' fast-path router takes it (in an
    unscoped transaction, so no scope statement asks for custom plans)."""
    rec = RoutingRecorder()
    async with create_sessionmaker(generic_engine)() as session:
        await session.begin()
        try:
            raw = await (await session.connection()).get_raw_connection()
            raw.driver_connection.add_log_listener(rec.listen)  # type: ignore[union-attr]
            usage = UsageRepository(session)
            for _ in range(7):  # past the five custom plans Postgres may try first
                ids = {uuid.uuid4(): 1, uuid.uuid4(): 2}
                await rec.call(
                    "UsageRepository",
                    "record_retrievals",
                    usage.record_retrievals(user_id, ids, datetime.now(UTC)),
                )
        finally:
            await session.rollback()
    assert not rec.multi_task, rec.multi_task
