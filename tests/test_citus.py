"""app/citus.py where there is no Citus (CI): the placement rules, and plain Postgres refused.

The cluster itself was checked on a real Citus 13.0 coordinator with two workers
(docs/scaling.md, "Verified on a real cluster")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.citus import (
    ANCHOR,
    CitusError,
    TableDistribution,
    citus_version,
    cluster_status,
    distribute,
    distribution,
    distribution_problems,
    policy_drift,
    probe_users,
    visibility_advice,
)
from app.db import (
    SET_LOCAL,
    UserScope,
    create_sessionmaker,
    scope_settings,
    set_local_params,
    user_session,
    with_scope_key,
)
from app.embedded import EmbeddedPostgres
from app.migrate import upgrade_head
from app.repositories.admin import AdminMemoryRepository
from app.roles import (
    COORDINATOR_TABLES,
    DEFAULT_APP_ROLE,
    DISTRIBUTED_TABLES,
    ensure_service_role,
    read_scope_key,
    with_user,
)
from tests.servers import ExternalPostgres, service_url


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


def test_doctor_probes_one_user_per_node_holding_shards() -> None:
    candidates = [("w1:1", "u1"), ("w1:1", "u2"), ("w3:1", "u3"), ("w2:1", "u4"), ("w2:1", "u5")]
    assert probe_users(candidates, ["w1:1", "w2:1"]) == ({"w1:1": "u1", "w2:1": "u4"}, [])
    # a node no candidate hashes to is named, not skipped
    assert probe_users(candidates[:3], ["w1:1", "w2:1"]) == ({"w1:1": "u1"}, ["w2:1"])


def test_doctor_names_shard_policies_that_differ_from_the_tables() -> None:
    table = "messages_admin:true,messages_scope:false,messages_user:true"
    assert policy_drift("messages", table, {table}) == []
    assert policy_drift("messages", "", {""}) == []  # no policy either side
    shards = {table.replace("scope:false", "scope:true")}
    (problem,) = policy_drift("messages", table, shards)
    assert "messages_scope:true" in problem and "messages_scope:false" in problem


def test_doctor_names_the_role_level_table_visibility_setting() -> None:
    database_level = visibility_advice("pgrecall_app", None)
    assert "run `pgrecall db distribute`" in database_level
    every_database = visibility_advice("pgrecall_app", "*")
    assert "ALTER ROLE pgrecall_app RESET citus.override_table_visibility" in every_database
    assert "pgrecall db distribute` sets" in every_database
    one_database = visibility_advice("pgrecall_app", "pgrecall")
    assert "ALTER ROLE pgrecall_app IN DATABASE pgrecall RESET" in one_database


async def test_plain_postgres_is_not_a_cluster(
    pg: EmbeddedPostgres, db_engine: AsyncEngine
) -> None:
    async with db_engine.connect() as conn:
        if await citus_version(conn) is not None:  # PGRECALL_TEST_DATABASE_URL: a coordinator
            pytest.skip("the test server is a Citus coordinator")
    assert await cluster_status(pg.url, service_url(pg)) is None
    with pytest.raises(CitusError, match="not a Citus coordinator"):
        await distribute(pg.url)


# ---- On a real cluster (PGRECALL_TEST_DATABASE_URL at a coordinator); skipped elsewhere. ----

MOVED_DATABASE = "pgrecall_citus_move"
OWNER_ROLE = "pgrecall_owner"  # the owner role docs/security.md creates


async def _superuser_nodes(coordinator: str) -> list[str]:
    """The superuser URLs of the coordinator and every active worker of the test cluster
    (the same credentials: the suite's cluster trusts loopback)."""
    url = make_url(coordinator)
    engine = create_async_engine(coordinator, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            if await citus_version(conn) is None:
                return []
            rows = await conn.execute(
                text(
                    "SELECT nodename, nodeport FROM pg_dist_node WHERE isactive "
                    "AND noderole = 'primary' AND groupid <> 0 ORDER BY nodeport"
                )
            )
            workers = [url.set(host=r.nodename, port=r.nodeport) for r in rows]
    finally:
        await engine.dispose()
    return [u.render_as_string(hide_password=False) for u in (url, *workers)]


async def _run_on(url: str, database: str, *statements: str) -> None:
    engine = create_async_engine(
        make_url(url).set(database=database), poolclass=NullPool, isolation_level="AUTOCOMMIT"
    )
    try:
        async with engine.connect() as conn:
            for statement in statements:
                await conn.exec_driver_sql(statement)
    finally:
        await engine.dispose()


@pytest.fixture
async def populated_store(pg: EmbeddedPostgres) -> AsyncIterator[str]:
    """A single node's store moving onto the test cluster: a second database on every node;
    on the coordinator migrated by the owner role before Citus is installed there (the
    policies then read their scope once per statement) and filled with 20 users' rows, then
    Citus installed and the workers added (the owner's URL)."""
    nodes = await _superuser_nodes(pg.url) if isinstance(pg, ExternalPostgres) else []
    if not nodes:
        pytest.skip("needs PGRECALL_TEST_DATABASE_URL at a Citus coordinator")
    drop = f"DROP DATABASE IF EXISTS {MOVED_DATABASE} WITH (FORCE)"
    for node in nodes:
        await _run_on(
            node, "postgres", drop, f"CREATE DATABASE {MOVED_DATABASE} OWNER {OWNER_ROLE}"
        )
        citus = ["CREATE EXTENSION citus"] if node != nodes[0] else []
        await _run_on(node, MOVED_DATABASE, *citus, "CREATE EXTENSION vector")
    coordinator = make_url(nodes[0])
    owner = with_user(
        coordinator.set(database=MOVED_DATABASE).render_as_string(hide_password=False),
        OWNER_ROLE,
    )
    await asyncio.to_thread(upgrade_head, owner)
    await ensure_service_role(owner, DEFAULT_APP_ROLE, create=False)
    # 20 users x 10 turns and a memory each, as the owner (a member of the admin role).
    await _run_on(
        owner,
        MOVED_DATABASE,
        "INSERT INTO conversations (id, user_id) SELECT gen_random_uuid(), 'mover-' || u "
        "FROM generate_series(1, 20) AS u",
        "INSERT INTO messages (id, conversation_id, user_id, role, content, correlation_id) "
        "SELECT gen_random_uuid(), c.id, c.user_id, 'user', c.user_id || ' said ' || t, "
        "gen_random_uuid() FROM conversations AS c, generate_series(1, 10) AS t",
        "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding, "
        "embedding_model) SELECT gen_random_uuid(), c.user_id, 'a note', md5(c.user_id), "
        "'note', CAST(array_fill(0.05, ARRAY[384]) AS halfvec), 'test' FROM conversations AS c",
    )
    await _run_on(
        nodes[0],
        MOVED_DATABASE,
        "CREATE EXTENSION citus",
        f"SELECT citus_set_coordinator_host('{coordinator.host}', {coordinator.port})",
        *(f"SELECT citus_add_node('{make_url(n).host}', {make_url(n).port})" for n in nodes[1:]),
    )
    try:
        yield owner
    finally:
        for node in nodes:
            await _run_on(node, "postgres", drop)


async def test_distribute_moves_a_populated_store_and_keeps_rls_forced(
    populated_store: str,
) -> None:
    owner = populated_store
    # A restrictive policy would reach the shards as a permissive one (Citus 13.0): refused.
    restrictive = "CREATE POLICY probe ON messages AS RESTRICTIVE USING (true)"
    await _run_on(owner, MOVED_DATABASE, restrictive)
    with pytest.raises(CitusError, match=r"restrictive policies on messages\.probe"):
        await distribute(owner)
    await _run_on(owner, MOVED_DATABASE, "DROP POLICY probe ON messages")
    done = await distribute(owner)
    assert done == list(DISTRIBUTED_TABLES)
    assert await distribute(owner) == []  # rerun: nothing left to do
    engine = create_async_engine(owner, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            assert distribution_problems(await distribution(conn)) == []
            counts = await conn.execute(
                text("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM memory_items)")
            )
            assert tuple(counts.one()) == (200, 20)
            forced = await conn.scalar(
                text(
                    "SELECT count(*) FROM pg_class WHERE relforcerowsecurity "
                    "AND relname = ANY(CAST(:tables AS text[]))"
                ),
                {"tables": list(DISTRIBUTED_TABLES)},
            )
            assert forced == len(DISTRIBUTED_TABLES)
            # every shard on every worker forced, with the table's policies
            policies = await conn.scalar(
                text("SELECT count(*) FROM pg_policy WHERE polrelid = 'messages'::regclass")
            )
            shards = await conn.execute(
                text(
                    "SELECT result FROM run_command_on_shards(CAST(:t AS regclass), "
                    "$$SELECT (c.relforcerowsecurity AND c.relrowsecurity)::text || "
                    "(SELECT count(*) FROM pg_policy AS p WHERE p.polrelid = c.oid) "
                    "FROM pg_class AS c WHERE c.oid = '%s'::regclass$$)"
                ),
                {"t": "messages"},
            )
            assert {r.result for r in shards} == {f"true{policies}"}
            # the copies left on the coordinator's disk were truncated
            assert await conn.scalar(text("SELECT pg_relation_size('messages')")) == 0
    finally:
        await engine.dispose()
    # The service role sees one user's rows, only with that user's signature (checked by the
    # policies on the workers, with the scope key there).
    key = await read_scope_key(owner)
    service = with_user(owner, DEFAULT_APP_ROLE)
    app_engine = create_async_engine(service, poolclass=NullPool)
    try:
        for scope, expected in (
            (scope_settings(UserScope("mover-3"), key), 10),
            (scope_settings(UserScope("mover-3")), 0),  # unsigned
        ):
            async with app_engine.begin() as conn:
                await conn.execute(SET_LOCAL, set_local_params(scope))
                assert await conn.scalar(text("SELECT count(*) FROM messages")) == expected
        # The memory dedup's lateral statement, which the per-row policies written back with
        # an explicit cast made Citus refuse ("cannot push down this subquery").
        async with user_session(
            create_sessionmaker(with_scope_key(app_engine, key)), "mover-3"
        ) as s:
            near = await AdminMemoryRepository(s).nearest(
                "mover-3", "test", [np.full(384, 0.05, dtype=np.float32)], min_cosine=0.5, k=3
            )
            assert [len(found) for found in near] == [1]
    finally:
        await app_engine.dispose()
