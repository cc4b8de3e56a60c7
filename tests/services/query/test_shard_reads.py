"""Reads on the shard's worker (app/services/query/shards.py, docs/scaling.md).

Everywhere: the rename of the query path's statements (unit), that every statement the query
path sends on the real server is covered by it, and that on plain Postgres the router routes
nothing. On a real cluster (PGRECALL_TEST_DATABASE_URL at a Citus coordinator; skipped
elsewhere): a route's reads see the user's rows and nobody else's, a stale route reads through
the coordinator, and an answer is the same either way."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.citus import citus_version
from app.db import ReadTransaction, ShardRoute, read_transaction
from app.repositories.shards import Placement
from app.roles import DISTRIBUTED_TABLES
from app.services.query.shards import ShardRouter, _Known, renamed
from tests.helpers import add_messages, headers

SHARDS = tuple((table, 102000 + n) for n, table in enumerate(sorted(DISTRIBUTED_TABLES)))


def test_a_table_becomes_its_shard_and_keeps_its_alias() -> None:
    sql = (
        "SELECT m.id FROM messages AS m JOIN memory_items AS i ON true "
        "WHERE EXISTS (SELECT 1 FROM search_postings p)"
    )
    shard = dict(SHARDS)
    assert renamed(sql, SHARDS) == (
        f"SELECT m.id FROM messages_{shard['messages']} AS m "
        f"JOIN memory_items_{shard['memory_items']} AS i ON true "
        f"WHERE EXISTS (SELECT 1 FROM search_postings_{shard['search_postings']} p)"
    )


def test_a_table_without_an_alias_is_aliased_by_its_own_name() -> None:
    # `memory_items.id` must still name the shard's column
    sql = "SELECT memory_items.id FROM memory_items\n  WHERE memory_items.user_id = $1"
    out = renamed(sql, SHARDS)
    assert f"FROM memory_items_{dict(SHARDS)['memory_items']} AS memory_items\n" in out
    assert out.startswith("SELECT memory_items.id ") and out.endswith("memory_items.user_id = $1")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT conversation_id FROM nb",  # a column that starts like a table
        "SELECT 1 FROM messages_102001 AS m",  # already a shard
        "SELECT 1 FROM spaces AS s JOIN space_members AS g ON true",  # reference tables
        "SELECT x.messages FROM q AS x",  # a column named like a table
    ],
)
def test_what_is_not_a_distributed_table_is_left_alone(sql: str) -> None:
    assert renamed(sql, SHARDS) == sql


def test_a_table_the_route_has_no_shard_for_is_left_alone() -> None:
    assert renamed("SELECT 1 FROM messages AS m", (("memory_items", 7),)) == (
        "SELECT 1 FROM messages AS m"
    )


# A distributed table named anywhere but as a qualifier (`messages.id`) or an alias (`AS
# messages`): a statement that would read the distributed table on the worker.
_BARE = re.compile(r"(?<![.\w])(?<!AS )(" + "|".join(DISTRIBUTED_TABLES) + r")(?![\w.])")


async def test_every_statement_of_the_query_path_reads_shards_once_renamed(
    make_client: Any, monkeypatch: pytest.MonkeyPatch, user_id: str
) -> None:
    """The query path's statements, recorded as the real server runs them (exact and ANN
    search, passages, filters, names, keyword feedback): renamed, none reads a distributed
    table (a miss would be read through Citus on the worker: slower, and refused under the
    generic plans a small user's reads use)."""
    seen: set[str] = set()
    statement = ReadTransaction._statement

    def recorded(self: ReadTransaction, sql: str) -> tuple[str, tuple[str, ...]]:
        seen.add(sql)  # as the repositories wrote it (on a cluster it is then renamed)
        return statement(self, sql)

    monkeypatch.setattr(ReadTransaction, "_statement", recorded)
    turns = [
        "Maria said the boat trip to Hydra is on the first Saturday of June.",
        "The boat needs new sails before the trip. Maria will order them from Athens.",
        "I keep the spare key behind the garden shed door.",
    ]
    bodies: list[dict[str, Any]] = [
        {"query": "When is the boat trip with Maria?", "min_score": 0.0},
        {"query": "boat sails", "min_score": 0.0, "types": ["fact"], "tags": ["sea"]},
        {"query": "Where is the spare key?", "time_from": "2020-01-01T00:00:00Z"},
        {"query": "spare key", "sources": ["message"]},
    ]
    for exact in (10_000, 0):  # the exact path, then ANN on a connection of its own
        async with make_client(exact_search_max_items=exact) as (client, _):
            user = f"{user_id}-{exact}"
            await add_messages(client, user, turns)
            saved = await client.post(
                "/v1/tools/save_memory",
                json={"content": "Maria's boat is called Aura", "type": "fact", "tags": ["sea"]},
                headers=headers(user),
            )
            assert saved.status_code == 200, saved.text
            for body in bodies:
                response = await client.post("/v1/memory/query", json=body, headers=headers(user))
                assert response.status_code == 200, response.text
    # as sent: keyword, feedback, vector, context, sizes... name their tables (the checker
    # sees them); only the planner settings' statement reads none
    assert len([sql for sql in seen if _BARE.findall(sql)]) >= 6
    left = {sql: _BARE.findall(renamed(sql, SHARDS)) for sql in seen}
    assert {sql: found for sql, found in left.items() if found} == {}


async def test_on_plain_postgres_the_router_routes_nothing(service_engine: AsyncEngine) -> None:
    async with service_engine.connect() as conn:
        if await citus_version(conn) is not None:
            pytest.skip("the test server is a Citus coordinator")
    router = ShardRouter(service_engine)
    try:
        assert await router.route("someone") is None
        assert router._citus is False  # asked once, then never again
        assert await router.route("someone else") is None
    finally:
        await router.close()


async def test_a_worker_a_read_failed_on_is_left_alone_for_the_ttl(
    service_engine: AsyncEngine,
) -> None:
    """After a failure on a worker its users read through the coordinator for `ttl_s`, and
    are looked up again (the router's own bookkeeping; no worker is connected to here)."""
    clock = [1000.0]
    router = ShardRouter(service_engine, ttl_s=30.0, clock=lambda: clock[0])
    router._citus = True
    shards = dict(SHARDS)
    for user in ("a", "b"):
        router._known[user] = _Known(Placement("10.0.0.9", 5432, shards), clock[0])
    try:
        route = await router.route("a")
        assert route is not None and route.rename("SELECT 1 FROM messages AS m") == (
            f"SELECT 1 FROM messages_{shards['messages']} AS m"
        )
        route.failed(ConnectionRefusedError("refused"))
        assert "a" not in router._known  # looked up again at its next query
        clock[0] += 10.0
        assert await router.route("b") is None  # same worker, within the ttl
        clock[0] += 25.0
        router._known["b"] = _Known(Placement("10.0.0.9", 5432, shards), clock[0])  # looked up
        assert await router.route("b") is not None  # after the ttl: tried again
    finally:
        await router.close()


# ---- On a real cluster (PGRECALL_TEST_DATABASE_URL at a coordinator); skipped elsewhere. ----


@pytest.fixture
async def router(service_engine: AsyncEngine) -> AsyncIterator[ShardRouter]:
    async with service_engine.connect() as conn:
        if await citus_version(conn) is None:
            pytest.skip("needs PGRECALL_TEST_DATABASE_URL at a Citus coordinator")
    made = ShardRouter(service_engine, pool_size=1)
    try:
        yield made
    finally:
        await made.close()


async def _count(engine: AsyncEngine, user: str, route: ShardRoute | None) -> int:
    async with read_transaction(engine, user, route=route) as reads:
        (row,) = await reads.fetch("SELECT count(*) AS n FROM messages AS m", {})
    return int(row["n"])


async def test_a_route_reads_the_users_rows_on_its_worker_and_no_one_elses(
    make_client: Any, router: ShardRouter, service_engine: AsyncEngine
) -> None:
    users = [f"direct-{uuid.uuid4().hex[:8]}-{n}" for n in range(6)]
    async with make_client() as (client, _):
        for n, user in enumerate(users):
            await add_messages(client, user, [f"note {k} of user {n}" for k in range(n + 1)])
    routes = {user: await router.route(user) for user in users}
    assert all(route is not None for route in routes.values())
    for n, user in enumerate(users):
        route = routes[user]
        assert route is not None
        # on the worker, on the shard (not through the coordinator), the user's own rows
        assert route.engine is not service_engine
        assert "FROM messages_" in route.rename("SELECT 1 FROM messages AS m")
        assert await _count(service_engine, user, route) == n + 1
        # another user's shards, read in this user's scope: this user's rows where the two
        # share a shard group, else none, and never the other user's (row-level security)
        for other in users:
            other_route = routes[other]
            assert other_route is not None
            same = other_route.check == route.check  # it names the shard group's anchor shard
            assert await _count(service_engine, user, other_route) == (n + 1 if same else 0)


async def test_a_users_route_without_the_signed_scope_reads_nothing(
    make_client: Any, router: ShardRouter, user_id: str
) -> None:
    async with make_client() as (client, _):
        await add_messages(client, user_id, ["a turn only this user wrote"])
    route = await router.route(user_id)
    assert route is not None
    async with route.engine.connect() as conn:  # the app role on the worker, no scope set
        shard = route.rename("SELECT count(*) FROM messages AS m")
        assert (await conn.execute(text(shard))).scalar_one() == 0
        await conn.execute(text("SELECT set_config('pgrecall.user_id', :u, true)"), {"u": user_id})
        assert (await conn.execute(text(shard))).scalar_one() == 0  # unsigned


async def test_a_route_whose_shard_moved_reads_through_the_coordinator(
    make_client: Any, router: ShardRouter, service_engine: AsyncEngine, user_id: str
) -> None:
    async with make_client() as (client, _):
        await add_messages(client, user_id, ["one", "two", "three"])
    route = await router.route(user_id)
    assert route is not None
    failures: list[BaseException] = []
    # as after a move: the check names a shard this worker does not hold
    stale = replace(
        route,
        check=route.check.replace("p.shardid = ", "p.shardid = -"),
        failed=failures.append,
    )
    assert await _count(service_engine, user_id, stale) == 3
    assert len(failures) == 1 and "division by zero" in str(failures[0])


async def test_an_answer_is_the_same_on_the_worker_and_through_the_coordinator(
    make_client: Any, router: ShardRouter, user_id: str
) -> None:
    turns = [
        "The dentist appointment moved to Thursday at 9.",
        "Our landlord is called Mr. Okafor and the rent is due on the 3rd.",
        "The bike lock code is 4471.",
    ]
    answers = []
    for ttl in (10.0, 0.0):  # reads on the worker, then all through the coordinator
        async with make_client(citus_direct_reads_ttl_s=ttl) as (client, app):
            if ttl:
                await add_messages(client, user_id, turns)
            response = await client.post(
                "/v1/memory/query",
                json={"query": "What is the bike lock code?", "min_score": 0.0},
                headers=headers(user_id),
            )
            assert response.status_code == 200, response.text
            used = app.state.resources.shard_router
            assert (used is not None and used._known[user_id].placement is not None) == bool(ttl)
            items = response.json()["items"]
            answers.append([(i["id"], round(i["relevance_score"], 4)) for i in items])
    assert answers[0] == answers[1] and answers[0]
