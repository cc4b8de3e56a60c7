"""app/citus/ where there is no Citus (CI): the placement rules, and plain Postgres refused.

The cluster itself was checked on a real Citus 13.0 coordinator with two workers
(docs/scaling.md, "Verified on a real cluster")."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.adapters.embedder import LOCAL_DIMENSION, LOCAL_MODEL_ID
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
    scope_spaces_function,
    shard_expression,
    shard_policy_statement,
    visibility_advice,
)
from app.db import (
    SET_LOCAL,
    ReadTransaction,
    UserScope,
    create_engine,
    create_sessionmaker,
    engine_scope_key,
    positional,
    read_transaction,
    scope_settings,
    set_local_params,
    user_session,
    with_scope_key,
)
from app.domain import MemoryScope, space_owner
from app.embedded import EmbeddedPostgres
from app.migrate import upgrade_head
from app.repositories.admin import AdminMemoryRepository
from app.repositories.retrieval import RetrievalRepository, Source
from app.roles import (
    COORDINATOR_TABLES,
    DEFAULT_APP_ROLE,
    DISTRIBUTED_TABLES,
    REFERENCE_TABLES,
    ensure_service_role,
    read_scope_key,
    with_user,
)
from app.services.query.shards import ShardRouter
from app.vectors import vector_literal
from tests.servers import ExternalPostgres, service_url


def _layout(**changes: TableDistribution) -> list[TableDistribution]:
    tables = {t: TableDistribution(t, "h", "user_id", 7, 32) for t in DISTRIBUTED_TABLES}
    tables |= {t: TableDistribution(t, None, None, None, 0) for t in COORDINATOR_TABLES}
    tables |= {t: TableDistribution(t, "n", None, 9, 1, reference=True) for t in REFERENCE_TABLES}
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
        (
            TableDistribution("space_members", None, None, None, 0),
            "space_members not a reference table (the space policies read it)",
        ),
    ],
)
def test_each_misplacement_is_named(change: TableDistribution, problem: str) -> None:
    assert distribution_problems(_layout(**{change.table: change})) == [problem]


def test_a_shard_reads_its_scope_once_per_statement() -> None:
    """The shards' policies call pgrecall_scope_spaces(), pgrecall_scope_user() and read their
    settings in subqueries (InitPlans, once per statement), whatever form the coordinator's
    policy has; nothing else changes."""
    per_row = "((user_id)::text = ANY (COALESCE(pgrecall_scope_spaces(false), '{}'::text[])))"
    once = shard_expression(per_row)
    assert once == per_row.replace(
        "pgrecall_scope_spaces(false)", "(SELECT pgrecall_scope_spaces(false))"
    )
    assert shard_expression(once) == once
    user = (
        "(((user_id)::text = pgrecall_scope_user()) AND "
        "((agent_id)::text = current_setting('pgrecall.agent_id'::text, true)))"
    )
    assert shard_expression(user) == (
        "(((user_id)::text = (SELECT pgrecall_scope_user())) AND "
        "((agent_id)::text = (SELECT current_setting('pgrecall.agent_id'::text, true))))"
    )
    printed = "((user_id)::text = ( SELECT pgrecall_scope_user() AS pgrecall_scope_user))"
    assert shard_expression(printed) == printed  # as a shard's policy prints it: already once
    assert shard_expression(None) is None
    statement = shard_policy_statement("t_space_update", True, "w", "PUBLIC", per_row, per_row)
    assert statement.count("(SELECT pgrecall_scope_spaces(false))") == 2


@pytest.mark.parametrize("plpgsql", [True, False])
async def test_the_spaces_function_of_the_nodes_reads_its_copy_in_either_language(
    db_engine: AsyncEngine, plpgsql: bool
) -> None:
    """What `distribute` makes on each node (PL/pgSQL before Postgres 18, as Citus 13's nodes
    are): the grants of the signed user read from the copy it names, the signed user once per
    call. Made in a schema of its own in a rolled-back transaction of the test server, over a
    stand-in copy of space_members, and called there."""
    run = uuid.uuid4().hex[:8]
    schema = f"nodes_{run}"
    statement = scope_spaces_function(f"{schema}.members_copy", plpgsql)
    assert f"FROM {schema}.members_copy AS m" in statement
    assert "(SELECT pgrecall_scope_user())" in statement
    async with db_engine.connect() as conn, conn.begin() as outer:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
        await conn.execute(
            text(
                f"CREATE TABLE {schema}.members_copy AS SELECT 's1' AS space_id, "
                "'u1' AS user_id, 'read' AS access UNION ALL SELECT 's2', 'u1', 'write' "
                "UNION ALL SELECT 's3', 'u2', 'write'"
            )
        )
        await conn.execute(text(f"SET LOCAL search_path = {schema}, public"))
        await conn.exec_driver_sql(statement)
        language = await conn.scalar(
            text(
                "SELECT l.lanname FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang "
                "WHERE p.pronamespace = CAST(:n AS regnamespace)"
            ),
            {"n": schema},
        )
        assert language == ("plpgsql" if plpgsql else "sql")
        # the signed user as the service signs it (the key's pads are the owner's to read)
        await conn.execute(
            text(
                "SELECT set_config('pgrecall.user_id', 'u1', true), "
                "set_config('pgrecall.user_sig', encode(sha256(k.outer_pad || "
                "sha256(k.inner_pad || convert_to('u1', 'UTF8'))), 'hex'), true) "
                "FROM pgrecall_scope_key AS k"
            )
        )
        reads = await conn.scalar(text(f"SELECT {schema}.pgrecall_scope_spaces(false)"))
        writes = await conn.scalar(text(f"SELECT {schema}.pgrecall_scope_spaces(true)"))
        assert sorted(reads) == ["space:s1", "space:s2"] and writes == ["space:s2"]
        await outer.rollback()


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
        # a shared space mover-1 reads, with one memory
        "INSERT INTO spaces (id) VALUES ('movers')",
        "INSERT INTO space_members (space_id, user_id, access) VALUES ('movers', 'mover-1', "
        "'read')",
        "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding, "
        "embedding_model) VALUES (gen_random_uuid(), 'space:movers', 'a shared note', "
        "md5('movers'), 'note', CAST(array_fill(0.05, ARRAY[384]) AS halfvec), 'test')",
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
    assert done == list(DISTRIBUTED_TABLES + REFERENCE_TABLES)
    assert await distribute(owner) == []  # rerun: nothing left to do
    engine = create_async_engine(owner, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            assert distribution_problems(await distribution(conn)) == []
            counts = await conn.execute(
                text("SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM memory_items)")
            )
            assert tuple(counts.one()) == (200, 21)
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
            (scope_settings(UserScope(MemoryScope("mover-3")), key), 10),
            (scope_settings(UserScope(MemoryScope("mover-3"))), 0),  # unsigned
        ):
            async with app_engine.begin() as conn:
                await conn.execute(SET_LOCAL, set_local_params(scope))
                assert await conn.scalar(text("SELECT count(*) FROM messages")) == expected
        # The space's memory: its member reads it, another user does not (the grants read on
        # the worker, from space_members' copy there).
        space = "SELECT count(*) FROM memory_items WHERE user_id = 'space:movers'"
        for member, expected in (("mover-1", 1), ("mover-2", 0)):
            async with app_engine.begin() as conn:
                await conn.execute(
                    SET_LOCAL, set_local_params(scope_settings(UserScope(MemoryScope(member)), key))
                )
                assert await conn.scalar(text(space)) == expected
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
    # The query path's reads on the shard's worker: the scope's function is on the workers
    # too (a store migrated before Citus had it on the coordinator alone), so the read begins
    # there and never falls back to the coordinator.
    reads_engine = create_engine(service, pool_size=1, scope_key=key)
    router = ShardRouter(reads_engine, pool_size=1)
    try:
        route = await router.route("mover-3")
        assert route is not None
        refused: list[BaseException] = []
        route = replace(route, failed=refused.append)
        async with read_transaction(reads_engine, "mover-3", route=route) as reads:
            (row,) = await reads.fetch("SELECT count(*) AS n FROM messages AS m", {})
        assert (refused, row["n"]) == ([], 10)
    finally:
        await router.close()
        await reads_engine.dispose()


# ---- Shared spaces on the cluster (issue 43): reference tables, shard policies, routing. ----

SPACE_TABLES = ("memory_items", "search_postings", "search_stats")
# A shard table a plan's node scans ("... on memory_items_102192 ..."): table and shard id.
SHARD_NAME = re.compile(r"\bon (" + "|".join(DISTRIBUTED_TABLES) + r")_(\d+)\b")


@pytest.fixture
async def cluster(db_engine: AsyncEngine) -> AsyncEngine:
    """The superuser's engine at the coordinator (PGRECALL_TEST_DATABASE_URL); skipped elsewhere."""
    async with db_engine.connect() as conn:
        if await citus_version(conn) is None:
            pytest.skip("needs PGRECALL_TEST_DATABASE_URL at a Citus coordinator")
    return db_engine


@dataclass(frozen=True)
class SharedSpace:
    space: str
    owner: str  # `space:<id>`
    reader: str  # a member with a read grant
    memory: uuid.UUID


@pytest.fixture
async def shared_space(cluster: AsyncEngine) -> AsyncIterator[SharedSpace]:
    """A space with a read member and one memory, written as the superuser; dropped after."""
    run = uuid.uuid4().hex[:8]
    made = SharedSpace(f"c-{run}", space_owner(f"c-{run}"), f"reader-{run}", uuid.uuid4())
    async with cluster.begin() as conn:
        await conn.execute(text("INSERT INTO spaces (id) VALUES (:s)"), {"s": made.space})
        await conn.execute(
            text("INSERT INTO space_members (space_id, user_id, access) VALUES (:s, :u, 'read')"),
            {"s": made.space, "u": made.reader},
        )
        await conn.execute(
            text(
                "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding, "
                "embedding_model) VALUES (:i, :o, 'The team meets on Mondays', :h, 'fact', "
                "CAST(:v AS halfvec), :m)"
            ),
            {
                "i": made.memory,
                "o": made.owner,
                "h": run,
                "v": vector_literal(_unit(1)),
                "m": LOCAL_MODEL_ID,
            },
        )
    try:
        yield made
    finally:
        async with cluster.begin() as conn:
            await conn.execute(
                text("DELETE FROM memory_items WHERE user_id = :o"), {"o": made.owner}
            )
            await conn.execute(text("DELETE FROM spaces WHERE id = :s"), {"s": made.space})


def _unit(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(LOCAL_DIMENSION).astype(np.float32)
    return v / np.linalg.norm(v)


async def _shard_of(conn: AsyncConnection, table: str, owner: str) -> tuple[int, str]:
    """The shard of `table` holding `owner`'s rows, and the node it is on (host:port)."""
    row = (
        await conn.execute(
            text(
                "SELECT s.id, n.nodename || ':' || n.nodeport AS node FROM (SELECT "
                "get_shard_id_for_distribution_column(CAST(:t AS regclass), CAST(:o AS text)) "
                "AS id) AS s "
                "JOIN pg_dist_placement AS p ON p.shardid = s.id "
                "JOIN pg_dist_node AS n ON n.groupid = p.groupid"
            ),
            {"t": table, "o": owner},
        )
    ).one()
    return int(row.id), str(row.node)


async def test_spaces_are_reference_tables_with_their_policies_on_every_shard(
    cluster: AsyncEngine,
) -> None:
    async with cluster.connect() as conn:
        placed = {t.table: t for t in await distribution(conn)}
        assert distribution_problems(list(placed.values())) == []
        assert all(placed[t].reference for t in REFERENCE_TABLES)
        # a copy of each on every active node (the coordinator too)
        missing = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_dist_node AS n CROSS JOIN pg_dist_shard AS s "
                "WHERE n.isactive AND s.logicalrelid = ANY(CAST(:t AS regclass[])) "
                "AND NOT EXISTS (SELECT FROM pg_dist_placement AS p "
                "WHERE p.shardid = s.shardid AND p.groupid = n.groupid)"
            ),
            {"t": list(REFERENCE_TABLES)},
        )
        assert missing == 0
        # every copy guarded as its table: forced row-level security, the same policies
        copy_guard = (
            "WITH t AS (SELECT CAST('%s' AS regclass) AS r) SELECT (c.relrowsecurity AND "
            "c.relforcerowsecurity)::text || ' ' || (SELECT string_agg(polname, ',' ORDER BY "
            "polname) FROM pg_policy WHERE polrelid = t.r) FROM t JOIN pg_class AS c ON c.oid = t.r"
        )
        for table, policies in (
            ("spaces", "spaces_admin"),
            ("space_members", "space_members_admin,space_members_leave,space_members_user"),
        ):
            copies = await conn.execute(
                text(
                    "SELECT success, result FROM run_command_on_placements(CAST(:t AS regclass), "
                    ":command)"
                ),
                {"t": table, "command": copy_guard},
            )
            assert {(r.success, r.result) for r in copies} == {(True, f"true {policies}")}
        for table in SPACE_TABLES:
            shards = await conn.execute(
                text(
                    "SELECT success, result FROM run_command_on_shards(CAST(:t AS regclass), "
                    "$$SELECT string_agg(polname || '=' || pg_get_expr(coalesce(polqual, "
                    "polwithcheck), polrelid), ' | ' ORDER BY polname) FROM pg_policy "
                    "WHERE polrelid = '%s'::regclass AND polname LIKE '%%space%%'$$)"
                ),
                {"t": table},
            )
            for shard in shards:
                assert shard.success, shard.result
                found = dict(p.split("=", 1) for p in shard.result.split(" | "))
                read = found.pop(f"{table}_space_read")
                # each shard reads the grants once per statement (an InitPlan); reads check
                # the read grants alone, each write command its write grants (migration 0021)
                assert "SELECT pgrecall_scope_spaces(false)" in read
                assert "pgrecall_scope_spaces(true)" not in read
                assert set(found) == {f"{table}_space_{c}" for c in ("delete", "insert", "update")}
                assert all("SELECT pgrecall_scope_spaces(true)" in w for w in found.values())
        # the spaces function reads space_members' copy on the node it runs on
        members = await conn.scalar(
            text(
                "SELECT shard_name(logicalrelid, shardid) FROM pg_dist_shard "
                "WHERE logicalrelid = 'space_members'::regclass"
            )
        )
        bodies = await conn.execute(
            text(
                "SELECT result FROM run_command_on_all_nodes($$SELECT prosrc FROM pg_proc "
                "WHERE proname = 'pgrecall_scope_spaces'$$)"
            )
        )
        assert all(f"FROM {members} AS m" in r.result for r in bodies)
        # the signed user read once per call, not once per membership row (migration 0021)
        assert all("(SELECT pgrecall_scope_user())" in r.result for r in bodies)


async def test_a_revoked_grant_reads_nothing_on_the_worker(
    cluster: AsyncEngine, service_engine: AsyncEngine, shared_space: SharedSpace
) -> None:
    """The member's statements read the space's shard on its worker through the coordinator,
    and on the worker itself (its shard table, as the service role); the grant revoked on the
    coordinator, the next statement on either reads nothing."""
    made = shared_space
    key = engine_scope_key(service_engine)
    assert key is not None
    async with cluster.connect() as conn:
        shard, node = await _shard_of(conn, "memory_items", made.owner)
    host, port = node.split(":")
    on_worker = create_async_engine(
        service_engine.url.set(host=host, port=int(port)), poolclass=NullPool
    )
    settings = set_local_params(scope_settings(UserScope(MemoryScope(made.reader)), key))
    through_coordinator = "SELECT count(*) FROM memory_items WHERE user_id = :o"
    on_shard = f"SELECT count(*) FROM memory_items_{shard} WHERE user_id = :o"

    async def seen() -> tuple[int, int]:
        counts = []
        for engine, sql in ((service_engine, through_coordinator), (on_worker, on_shard)):
            async with engine.begin() as c:
                await c.execute(SET_LOCAL, settings)
                counts.append(int(await c.scalar(text(sql), {"o": made.owner})))
        return counts[0], counts[1]

    try:
        assert await seen() == (1, 1)
        # the worker's copy of space_members shows the member its own grants alone
        async with cluster.connect() as conn:
            members = await conn.scalar(
                text(
                    "SELECT shard_name(logicalrelid, shardid) FROM pg_dist_shard "
                    "WHERE logicalrelid = 'space_members'::regclass"
                )
            )
        async with on_worker.begin() as c:
            await c.execute(SET_LOCAL, settings)
            own = (await c.execute(text(f"SELECT DISTINCT user_id FROM {members}"))).scalars()
            assert list(own) == [made.reader]
        async with cluster.begin() as conn:
            await conn.execute(
                text("DELETE FROM space_members WHERE space_id = :s AND user_id = :u"),
                {"s": made.space, "u": made.reader},
            )
        assert await seen() == (0, 0)
    finally:
        await on_worker.dispose()


class ExplainedReads(ReadTransaction):
    """The query path's transaction, with each read statement EXPLAINed (its parameters bound,
    as it is sent) before it runs."""

    def __init__(self, driver: Any) -> None:
        super().__init__(driver)
        self.plans: list[str] = []

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> Sequence[Any]:
        query, names = positional(sql)
        rows = await self.driver.fetch(f"EXPLAIN {query}", *[params[name] for name in names])
        self.plans.append("\n".join(r[0] for r in rows))
        return await super().fetch(sql, params)


@pytest.mark.parametrize("session_plans", ["default", "force_generic_plan"])
async def test_a_space_owners_query_statements_each_run_on_its_one_shard(
    cluster: AsyncEngine, service_engine: AsyncEngine, shared_space: SharedSpace, session_plans: str
) -> None:
    """Every statement the query path sends for a space (its member's signed scope, the owner
    `space:<id>`, memories only) is one task, on the space's shards on one worker: a query of
    the user and two spaces reads at most the user's shard group and one per space. Also on
    connections whose session asks for generic plans (as a role's setting could): the scope
    statement plans the transaction's statements for their values on Citus (app/db.py), and a
    generic plan of these statements is refused there ("could not create distributed plan").
    """
    made = shared_space
    async with cluster.connect() as conn:
        shards = {t: await _shard_of(conn, t, made.owner) for t in DISTRIBUTED_TABLES}
    node = {n for _, n in shards.values()}
    assert len(node) == 1  # co-located: one node holds the space's shard group
    key = engine_scope_key(service_engine)
    assert key is not None
    settings = {} if session_plans == "default" else {"plan_cache_mode": session_plans}
    engine = with_scope_key(
        create_async_engine(
            service_engine.url, poolclass=NullPool, connect_args={"server_settings": settings}
        ),
        key,
    )
    try:
        async with read_transaction(engine, MemoryScope(made.reader)) as tx:
            reads = ExplainedReads(tx.driver)
            repo = RetrievalRepository(reads)
            scope: dict[str, Any] = {
                "limit": 10,
                "memories": True,
                "messages": False,
                "types": None,
                "k1": 1.2,
                "b": 0.75,
            }
            await repo.keyword(made.owner, "When does the team meet?", **scope)
            await repo.expansion(made.owner, "team", [made.memory], terms=3, min_df=1, **scope)
            for exact in (True, False):
                await repo.vector(
                    made.owner,
                    _unit(1),
                    limit=10,
                    memories=True,
                    messages=False,
                    types=None,
                    exact=exact,
                    model=LOCAL_MODEL_ID,
                )
            keys = [(Source.MEMORY, made.memory)]
            await repo.fetch(made.owner, keys)
            await repo.fetch_around(made.owner, keys, [])
            await repo.vectors(made.owner, keys)
            await repo.item_count(made.owner)
            await repo.search_size(made.owner, up_to=5)
            # The shared spaces' statements (app/repositories/retrieval/shared.py) as the
            # pipeline sends them on Citus: one per owner (`split`), here the space's.
            owners = [made.owner]
            await repo.sizes(owners, split=True)
            await repo.keyword_each(owners, "When does the team meet?", split=True, **scope)
            await repo.keyword_each(
                owners, "team", [[made.memory]], terms=3, min_df=1, split=True, **scope
            )
            for exact in (True, False):
                await repo.vector_each(
                    owners, _unit(1), exact=[exact], limit=10, model=LOCAL_MODEL_ID, split=True
                )
            await repo.rows_each(owners, [[made.memory]], [made.memory], split=True)
    finally:
        await engine.dispose()
    assert len(reads.plans) >= 15, reads.plans
    (host_port,) = node
    host, port = host_port.split(":")
    for plan in reads.plans:
        assert re.findall(r"Task Count: (\d+)", plan) == ["1"], plan
        assert f"host={host} port={port}" in plan, plan
        named = SHARD_NAME.findall(plan)
        assert named, plan
        owners = {(t, s) for t, (s, _) in shards.items()}
        assert {(t, int(i)) for t, i in named} - owners == set(), plan
