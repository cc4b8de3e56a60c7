"""app/citus.py where there is no Citus (CI): the placement rules, and plain Postgres refused.

The cluster itself was checked on a real Citus 13.0 coordinator with two workers
(docs/scaling.md, "Verified on a real cluster")."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.citus import (
    ANCHOR,
    CitusError,
    TableDistribution,
    citus_version,
    cluster_status,
    distribute,
    distribution_problems,
)
from app.embedded import EmbeddedPostgres
from app.roles import COORDINATOR_TABLES, DISTRIBUTED_TABLES
from tests.servers import service_url


def _layout(**changes: TableDistribution) -> list[TableDistribution]:
    tables = {t: TableDistribution(t, "h", "user_id", 7, 32) for t in DISTRIBUTED_TABLES}
    tables |= {t: TableDistribution(t, None, None, None, 0) for t in COORDINATOR_TABLES}
    return list((tables | changes).values())


def test_the_documented_layout_has_no_problem() -> None:
    assert distribution_problems(_layout()) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (TableDistribution("messages", None, None, None, 0), "messages not distributed"),
        (
            TableDistribution("memory_items", "h", "id", 7, 32),
            "memory_items distributed by id, not user_id",
        ),
        (
            TableDistribution("search_postings", "h", "user_id", 8, 32),
            f"search_postings not co-located with {ANCHOR}",
        ),
        (
            TableDistribution("api_keys", "h", "user_id", 7, 32),
            "api_keys distributed (authentication reads it by hash)",
        ),
    ],
)
def test_each_misplacement_is_named(change: TableDistribution, problem: str) -> None:
    assert distribution_problems(_layout(**{change.table: change})) == [problem]


async def test_plain_postgres_is_not_a_cluster(
    pg: EmbeddedPostgres, db_engine: AsyncEngine
) -> None:
    async with db_engine.connect() as conn:
        if await citus_version(conn) is not None:  # PGRECALL_TEST_DATABASE_URL: a coordinator
            pytest.skip("the test server is a Citus coordinator")
    assert await cluster_status(pg.url, service_url(pg)) is None
    with pytest.raises(CitusError, match="not a Citus coordinator"):
        await distribute(pg.url)
