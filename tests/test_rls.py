"""Row-level security, through the service role, with statements that forget the user.

Every statement here deliberately lacks a `user_id` predicate: Postgres alone has to keep one
user's rows from another. Rows are written as the superuser (which bypasses RLS) so each test
knows exactly what exists; reads and writes then go through the service role.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from app.db import (
    SET_LOCAL,
    admin_sessions,
    create_sessionmaker,
    job_queue_sessions,
    key_lookup_session,
    set_local_params,
    user_session,
)
from app.embedded import EmbeddedPostgres
from app.models.base import EMBEDDING_DIMENSION
from app.roles import ADMIN_ROLE, DEFAULT_APP_ROLE, SCOPE_KEY_TABLE, USER_TABLES, rls_status
from app.vectors import vector_literal
from tests.servers import admin_url

# Deleting from a table as one user must leave the other user's rows; each table's rows.
TABLES = USER_TABLES


@dataclass(frozen=True)
class Pair:
    a: str
    b: str


@pytest.fixture
async def admin_engine(pg: EmbeddedPostgres) -> AsyncIterator[AsyncEngine]:
    """The admin role (pgrecall_admin), as the service's admin work logs in."""
    engine = create_async_engine(admin_url(pg), pool_size=1, max_overflow=0)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def sessions(
    service_engine: AsyncEngine, admin_engine: AsyncEngine
) -> async_sessionmaker[AsyncSession]:
    return create_sessionmaker(service_engine, admin_engine)


async def _seed(owner: AsyncEngine, user: str) -> None:
    """One row of the user in every user-data table (as the superuser: RLS does not apply)."""
    conversation, message, item = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    vector = vector_literal([0.1] * EMBEDDING_DIMENSION)
    async with owner.begin() as conn:
        await conn.execute(
            text("INSERT INTO conversations (id, user_id) VALUES (:c, :u)"),
            {"c": conversation, "u": user},
        )
        await conn.execute(
            text(
                "INSERT INTO messages (id, conversation_id, user_id, role, content, correlation_id)"
                " VALUES (:m, :c, :u, 'user', 'hello there', :m)"
            ),
            {"m": message, "c": conversation, "u": user},
        )
        await conn.execute(
            text(
                "INSERT INTO message_passages (message_id, ord, user_id, embedding, "
                "embedding_model) VALUES (:m, 0, :u, CAST(:v AS vector), 'm')"
            ),
            {"m": message, "u": user, "v": vector},
        )
        await conn.execute(
            text(
                "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding, "
                "embedding_model) VALUES (:i, :u, 'likes tea', :h, 'fact', CAST(:v AS vector), 'm')"
            ),
            {"i": item, "u": user, "h": uuid.uuid4().hex, "v": vector},
        )
        await conn.execute(
            text(
                "INSERT INTO search_postings (user_id, lexeme, item_id, source, tf, dl) "
                "VALUES (:u, 'tea', :i, 0, 1, 2)"
            ),
            {"u": user, "i": item},
        )
        await conn.execute(
            text("INSERT INTO search_stats (user_id, doc_count, total_length) VALUES (:u, 1, 2)"),
            {"u": user},
        )
        await conn.execute(
            text(
                "INSERT INTO api_keys (id, key_hash, prefix, user_id, scope) "
                "VALUES (:k, :h, 'pgr_test', :u, 'read')"
            ),
            {"k": uuid.uuid4(), "h": _key_hash(user), "u": user},
        )
        await conn.execute(
            text(
                "INSERT INTO extraction_jobs (id, user_id, conversation_id, message_id) "
                "VALUES (:j, :u, :c, :m)"
            ),
            {"j": uuid.uuid4(), "u": user, "c": conversation, "m": message},
        )
        await conn.execute(
            text(
                "INSERT INTO extraction_usage (user_id, day, tokens) VALUES (:u, '2026-11-26', 5)"
            ),
            {"u": user},
        )


def _key_hash(user: str) -> str:
    return hashlib.sha256(f"token of {user}".encode()).hexdigest()


@pytest.fixture
async def pair(db_engine: AsyncEngine) -> Pair:
    """Two fresh users with one row each in every user-data table."""
    run = uuid.uuid4().hex[:12]
    users = Pair(f"rls-a-{run}", f"rls-b-{run}")
    await _seed(db_engine, users.a)
    await _seed(db_engine, users.b)
    return users


async def _owner_count(owner: AsyncEngine, table: str, user: str) -> int:
    async with owner.connect() as conn:
        sql = text(f"SELECT count(*) FROM {table} WHERE user_id = :u")
        return int(await conn.scalar(sql, {"u": user}) or 0)


# -- statements without the user predicate ---------------------------------------------------


@pytest.mark.parametrize("table", TABLES)
async def test_select_without_predicate_sees_only_the_current_user(
    sessions: async_sessionmaker[AsyncSession], pair: Pair, table: str
) -> None:
    async with user_session(sessions, pair.a) as session:
        owners = (await session.execute(text(f"SELECT user_id FROM {table}"))).scalars().all()
    # The table holds every other test's users too; only this one's row is visible.
    assert owners == [pair.a]


@pytest.mark.parametrize("table", TABLES)
async def test_update_without_predicate_touches_only_the_current_user(
    sessions: async_sessionmaker[AsyncSession], db_engine: AsyncEngine, pair: Pair, table: str
) -> None:
    async with user_session(sessions, pair.a) as session, session.begin():
        result = await session.execute(text(f"UPDATE {table} SET user_id = user_id"))
        assert result.rowcount == 1  # type: ignore[attr-defined]
    # Moving rows to another user is refused by the policy's WITH CHECK (on Citus, before it,
    # by the distribution column being immutable: PGRECALL_TEST_DATABASE_URL runs).
    with pytest.raises(DBAPIError, match=r"row-level security|modifying the partition value"):
        async with user_session(sessions, pair.a) as session, session.begin():
            await session.execute(text(f"UPDATE {table} SET user_id = :b"), {"b": pair.b})
    assert await _owner_count(db_engine, table, pair.a) == 1
    assert await _owner_count(db_engine, table, pair.b) == 1


@pytest.mark.parametrize("table", TABLES)
async def test_delete_without_predicate_removes_only_the_current_users_rows(
    sessions: async_sessionmaker[AsyncSession], db_engine: AsyncEngine, pair: Pair, table: str
) -> None:
    async with user_session(sessions, pair.a) as session, session.begin():
        result = await session.execute(text(f"DELETE FROM {table}"))
        assert result.rowcount == 1  # type: ignore[attr-defined]
    assert await _owner_count(db_engine, table, pair.a) == 0
    assert await _owner_count(db_engine, table, pair.b) == 1


async def test_insert_for_another_user_is_refused(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    with pytest.raises(DBAPIError, match="row-level security"):
        async with user_session(sessions, pair.a) as session, session.begin():
            await session.execute(
                text("INSERT INTO conversations (id, user_id) VALUES (:c, :u)"),
                {"c": uuid.uuid4(), "u": pair.b},
            )


@pytest.mark.parametrize("table", TABLES)
async def test_no_user_set_sees_no_rows_and_writes_nothing(
    sessions: async_sessionmaker[AsyncSession], pair: Pair, table: str
) -> None:
    async with sessions() as session:
        assert await session.scalar(text(f"SELECT count(*) FROM {table}")) == 0
        result = await session.execute(text(f"DELETE FROM {table}"))
        assert result.rowcount == 0  # type: ignore[attr-defined]
        await session.rollback()
    with pytest.raises(DBAPIError, match="row-level security"):
        async with sessions() as session, session.begin():
            await session.execute(
                text("INSERT INTO search_stats (user_id, doc_count) VALUES (:u, 0)"),
                {"u": f"nobody-{uuid.uuid4()}"},
            )


# -- pooled connections ----------------------------------------------------------------------


async def _visible(session: AsyncSession) -> tuple[int, set[str], str]:
    """(backend pid, users whose memory items are visible, the user setting)."""
    pid = int(await session.scalar(text("SELECT pg_backend_pid()")) or 0)
    users = set((await session.execute(text("SELECT user_id FROM memory_items"))).scalars())
    setting = await session.scalar(text("SELECT current_setting('pgrecall.user_id', true)"))
    return pid, users, setting or ""


async def test_a_pooled_connection_never_carries_a_user_into_the_next(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    async with user_session(sessions, pair.a) as session:
        pid_a, seen_a, _ = await _visible(session)
    async with user_session(sessions, pair.b) as session:
        pid_b, seen_b, setting = await _visible(session)
    assert pid_a == pid_b  # the same pooled connection served both
    assert seen_a == {pair.a} and seen_b == {pair.b} and setting == pair.b
    async with sessions() as session:  # and an unscoped session after them sees nothing
        pid, seen, setting = await _visible(session)
    assert pid == pid_a and seen == set() and setting == ""


async def test_an_error_mid_transaction_does_not_leak_the_user(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    with pytest.raises(DBAPIError, match="division by zero"):
        async with user_session(sessions, pair.a) as session, session.begin():
            pid_a, seen, _ = await _visible(session)
            assert seen == {pair.a}
            await session.execute(text("SELECT 1 / 0"))
    async with user_session(sessions, pair.b) as session:
        pid_b, seen_b, setting = await _visible(session)
    assert pid_a == pid_b and seen_b == {pair.b} and setting == pair.b
    async with sessions() as session:
        _, seen, setting = await _visible(session)
    assert seen == set() and setting == ""


async def test_a_cancelled_transaction_does_not_leak_the_user(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    """The query path cancels on its timeout: the next user of the pool is still on its own."""

    async def slow() -> None:
        async with user_session(sessions, pair.a) as session, session.begin():
            await session.execute(text("SELECT pg_sleep(10)"))

    task = asyncio.create_task(slow())
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with user_session(sessions, pair.b) as session:
        _, seen_b, setting = await _visible(session)
    assert seen_b == {pair.b} and setting == pair.b
    async with sessions() as session:
        _, seen, _ = await _visible(session)
    assert seen == set()


async def test_every_transaction_of_a_session_carries_the_user(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    async with user_session(sessions, pair.a) as session:
        for _ in range(3):
            _, seen, _ = await _visible(session)
            assert seen == {pair.a}
            await session.commit()


async def test_admin_mode_sees_every_user_and_is_audited(
    sessions: async_sessionmaker[AsyncSession], pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="app.audit"):
        async with admin_sessions(sessions, "test: both users")() as session:
            users = set(
                (
                    await session.execute(
                        text("SELECT user_id FROM memory_items WHERE user_id IN (:a, :b)"),
                        {"a": pair.a, "b": pair.b},
                    )
                ).scalars()
            )
    assert users == {pair.a, pair.b}
    audited = [r for r in caplog.records if r.name == "app.audit" and "admin mode" in r.message]
    assert audited and audited[0].fields == {"reason": "test: both users"}  # type: ignore[attr-defined]
    async with admin_sessions(sessions, "test: who")() as session:
        assert await session.scalar(text("SELECT current_user")) == ADMIN_ROLE
    async with sessions() as session:  # the service's own sessions never see it
        _, seen, _ = await _visible(session)
        assert await session.scalar(text("SELECT current_user")) == DEFAULT_APP_ROLE
    assert seen == set()


async def test_the_job_queue_claims_run_as_the_admin_role_without_an_audit_line(
    sessions: async_sessionmaker[AsyncSession], pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    """Extraction workers claim jobs across users on the admin engine; the service role has no
    job-queue policy of its own any more (migration 0018)."""
    with caplog.at_level(logging.INFO, logger="app.audit"):
        async with job_queue_sessions(sessions)() as session:
            jobs = set(
                (
                    await session.execute(
                        text("SELECT user_id FROM extraction_jobs WHERE user_id IN (:a, :b)"),
                        {"a": pair.a, "b": pair.b},
                    )
                ).scalars()
            )
            role = await session.scalar(text("SELECT current_user"))
    assert jobs == {pair.a, pair.b} and role == ADMIN_ROLE
    assert not [r for r in caplog.records if r.name == "app.audit"]


# -- settings and statements the service role might forge (issue 44) ---------------------------


async def _seen_with(service_engine: AsyncEngine, settings: dict[str, str], table: str) -> set[str]:
    """The users whose rows of `table` the service role sees after SET LOCAL of `settings` in a
    transaction of its own (what an injected statement could do)."""
    async with service_engine.connect() as conn, conn.begin():
        # SET LOCAL, as the service's scope statement makes them: on Citus only these reach
        # the workers, where the policies run (set_config stays on the coordinator).
        await conn.execute(SET_LOCAL, set_local_params(settings))
        return set((await conn.execute(text(f"SELECT user_id FROM {table}"))).scalars())


@pytest.mark.parametrize("table", TABLES)
async def test_the_old_admin_and_job_queue_switches_show_the_service_role_nothing(
    service_engine: AsyncEngine, pair: Pair, table: str
) -> None:
    for settings in ({"pgrecall.admin": "on"}, {"pgrecall.job_queue": "on"}):
        assert await _seen_with(service_engine, settings, table) == set(), settings


@pytest.mark.parametrize("table", TABLES)
async def test_a_user_id_set_without_its_signature_shows_nothing(
    service_engine: AsyncEngine, pair: Pair, table: str
) -> None:
    key = await _key(service_engine)
    forged = [
        {"pgrecall.user_id": pair.b},  # no signature
        {"pgrecall.user_id": pair.b, "pgrecall.user_sig": key.sign(pair.a)},  # a's, reused
        {"pgrecall.user_id": pair.b, "pgrecall.user_sig": "0" * 64},
        {"pgrecall.user_id": pair.b, "pgrecall.user_sig": _flip_last(key.sign(pair.b))},
        {"pgrecall.user_id": pair.b, "pgrecall.user_sig": key.sign(pair.b).upper()},
    ]
    for settings in forged:
        assert await _seen_with(service_engine, settings, table) == set(), settings
    signed = {"pgrecall.user_id": pair.b, "pgrecall.user_sig": key.sign(pair.b)}
    assert await _seen_with(service_engine, signed, table) == {pair.b}


def _flip_last(signature: str) -> str:
    return signature[:-1] + ("1" if signature[-1] == "0" else "0")


async def _key(engine: AsyncEngine):  # type: ignore[no-untyped-def]
    from app.db import engine_scope_key

    key = engine_scope_key(engine)
    assert key is not None
    return key


async def test_a_user_scope_cannot_be_switched_inside_its_transaction(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    """A statement injected into a's request that names b sees neither: b is not signed."""
    async with user_session(sessions, pair.a) as session, session.begin():
        assert await session.scalar(text("SELECT count(*) FROM memory_items")) == 1
        await session.execute(
            text("SELECT pgrecall_set_local(ARRAY['pgrecall.user_id'], ARRAY[:b])"), {"b": pair.b}
        )
        users = set((await session.execute(text("SELECT user_id FROM memory_items"))).scalars())
    assert users == set()


async def test_pgrecall_set_local_sets_each_pair_for_the_transaction_alone(
    service_engine: AsyncEngine,
) -> None:
    """Migration 0023's set_config() form (off Citus) is SET LOCAL: every pair is set, the
    planner's settings checked as SET checks them, and nothing outlives the transaction."""
    call = text("SELECT pgrecall_set_local(CAST(:n AS text[]), CAST(:v AS text[]))")
    names = ["pgrecall.user_id", "pgrecall.scope_own", "plan_cache_mode", "work_mem"]
    values = ["someone", "", "force_generic_plan", "7MB"]
    show = text(
        "SELECT current_setting('pgrecall.user_id', true) AS u, "
        "current_setting('pgrecall.scope_own', true) AS own, "
        "current_setting('plan_cache_mode') AS plans, current_setting('work_mem') AS mem"
    )
    async with service_engine.connect() as conn:
        before = (await conn.execute(show)).one()
        await conn.commit()
        async with conn.begin():
            await conn.execute(call, {"n": names, "v": values})
            await conn.execute(call, {"n": [], "v": []})  # nothing to set: nothing changes
            assert tuple((await conn.execute(show)).one()) == ("someone", "", *values[2:])
        after = (await conn.execute(show)).one()
        await conn.commit()
        assert after.plans == before.plans and after.mem == before.mem
        assert after.u in (None, "")  # a placeholder once set reads "" after the transaction
        with pytest.raises(DBAPIError, match="plan_cache_mode"):
            async with conn.begin():
                await conn.execute(call, {"n": ["plan_cache_mode"], "v": ["sometimes"]})


async def test_a_failing_predicate_never_runs_on_another_users_rows(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    """Policies are checked before the statement's own conditions (security barrier): a
    condition that errors on b's rows cannot probe them from a's scope."""
    async with user_session(sessions, pair.a) as session:
        probe = text(
            "SELECT count(*) FROM memory_items "
            "WHERE 1 / (CASE WHEN user_id = :b THEN 0 ELSE 1 END) = 1"
        )
        assert await session.scalar(probe, {"b": pair.b}) == 1


async def test_statistics_views_show_the_service_role_no_values(
    service_engine: AsyncEngine, db_engine: AsyncEngine, pair: Pair
) -> None:
    """pg_stats holds sampled column values; Postgres hides it for tables under row-level
    security from a role it binds."""
    async with db_engine.connect() as conn:
        if await conn.scalar(text("SELECT current_setting('citus.version', true)")):
            pytest.skip(
                "Citus: the coordinator's table has no rows; its shards' stats are on workers"
            )
        await conn.execute(text("ANALYZE memory_items"))
        assert await conn.scalar(
            text("SELECT count(*) FROM pg_stats WHERE tablename = 'memory_items'")
        )
    async with service_engine.connect() as conn:
        seen = await conn.scalar(
            text("SELECT count(*) FROM pg_stats WHERE tablename = 'memory_items'")
        )
    assert seen == 0


# -- what the service role cannot do ---------------------------------------------------------

FORBIDDEN = [
    "ALTER TABLE memory_items DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE memory_items NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY memory_items_user ON memory_items",
    "CREATE POLICY everything ON memory_items USING (true)",
    "DROP TABLE memory_items",
    "TRUNCATE memory_items",
    "ALTER TABLE memory_items OWNER TO pgrecall_app",
    f"ALTER ROLE {DEFAULT_APP_ROLE} BYPASSRLS",
    "SET ROLE postgres",
    "CREATE TABLE pgrecall_escape (id int)",
    # The admin role and the scope key (migration 0018).
    f"SET ROLE {ADMIN_ROLE}",
    f"SET SESSION AUTHORIZATION {ADMIN_ROLE}",
    f"GRANT {ADMIN_ROLE} TO {DEFAULT_APP_ROLE}",
    f"SELECT * FROM {SCOPE_KEY_TABLE}",
    f"UPDATE {SCOPE_KEY_TABLE} SET inner_pad = ''",
    "CREATE OR REPLACE FUNCTION pgrecall_scope_user() RETURNS text LANGUAGE sql AS $$ SELECT "
    "current_setting('pgrecall.user_id', true) $$",
    f"ALTER FUNCTION pgrecall_scope_user() OWNER TO {DEFAULT_APP_ROLE}",
    "DROP FUNCTION pgrecall_scope_user()",
]


@pytest.mark.parametrize("statement", FORBIDDEN)
async def test_the_service_role_cannot_switch_row_level_security_off(
    service_engine: AsyncEngine, statement: str
) -> None:
    async with service_engine.connect() as conn:
        # "must have admin option": Postgres 15's words for the GRANT
        refused = r"permission denied|must be owner|must be superuser|must have admin option"
        with pytest.raises(DBAPIError, match=refused):
            await conn.execute(text(statement))


async def test_row_security_off_makes_queries_fail_not_bypass(
    service_engine: AsyncEngine,
) -> None:
    async with service_engine.connect() as conn:
        await conn.execute(text("SET row_security = off"))
        with pytest.raises(DBAPIError, match="row-level security"):
            await conn.execute(text("SELECT count(*) FROM memory_items"))


# -- the catalog -------------------------------------------------------------------------------


async def test_every_table_with_user_data_has_forced_rls_and_both_policies(
    db_engine: AsyncEngine,
) -> None:
    """A new table with a user_id column fails here until it is in the migration's list."""
    async with db_engine.connect() as conn:
        # spaces: no user's rows; the admin role's alone (migration 0020)
        spaces = (
            await conn.execute(
                text(
                    "SELECT c.relrowsecurity AND c.relforcerowsecurity AS forced, "
                    "array(SELECT polname::text FROM pg_policy WHERE polrelid = c.oid) AS names "
                    "FROM pg_class AS c WHERE c.oid = 'spaces'::regclass"
                )
            )
        ).one()
        assert spaces.forced and spaces.names == ["spaces_admin"]
        citus = await conn.scalar(text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'"))
        rows = (
            await conn.execute(
                text(
                    "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
                    "array(SELECT polname::text FROM pg_policy WHERE polrelid = c.oid "
                    "ORDER BY polname) AS policies "
                    "FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND EXISTS ("
                    "SELECT 1 FROM pg_attribute WHERE attrelid = c.oid AND attname = 'user_id')"
                )
            )
        ).all()
    # On a Citus coordinator, the copy of space_members (a reference table) is a table of its own
    # there, `space_members_<shard id>`, with the table's policies.
    if citus:
        rows = [r for r in rows if not re.fullmatch(r"space_members_\d+", r.relname)]
    # space_members: the grants of shared spaces, read by the service role (its user's own).
    assert {r.relname for r in rows} == {*USER_TABLES, "space_members"}
    for r in rows:
        assert r.relrowsecurity and r.relforcerowsecurity, r.relname
        assert {f"{r.relname}_admin", f"{r.relname}_user"} <= set(r.policies), r.relname
        extra = set(r.policies) - {f"{r.relname}_admin", f"{r.relname}_user"}
        # api_keys: the authentication lookup by token hash; the spaces' grants on the tables
        # a space's memories live in (migration 0019).
        t = r.relname
        # on Citus too (migration 0020); a write grant per writing command (0021)
        space = {f"{t}_space_{c}" for c in ("read", "insert", "update", "delete")}
        more = {
            "api_keys": {"api_keys_lookup", "api_keys_touch"},
            "memory_items": space,
            "search_postings": space,
            "search_stats": space,
            "space_members": {"space_members_leave"},
        }
        assert extra == more.get(r.relname, set()), r.relname
    async with db_engine.connect() as conn:
        policies = (
            await conn.execute(
                text(
                    "SELECT p.polname, array(SELECT rolname::text FROM pg_roles "
                    " WHERE oid = ANY(p.polroles)) AS roles, p.polroles = '{0}' AS public, "
                    "pg_get_expr(p.polqual, p.polrelid) AS using FROM pg_policy AS p"
                )
            )
        ).all()
    for p in policies:
        if p.polname.endswith("_admin"):  # the admin role's alone, needing no setting
            assert p.roles == [ADMIN_ROLE] and p.using == "true", p
        elif p.polname.endswith("_user"):  # everyone's, with the signed user only
            assert p.public and "pgrecall_scope_user()" in p.using, p
            # settings only as the scope within the user (migration 0019: agent, run, own),
            # which the signature covers; never as the user itself
            settings = set(re.findall(r"current_setting\('([a-z_.]+)'", p.using))
            assert settings <= {"pgrecall.agent_id", "pgrecall.run_id", "pgrecall.scope_own"}, p
            assert "current_setting('pgrecall.user_id'" not in p.using, p


def test_the_migrations_and_the_grants_name_the_same_tables() -> None:
    """0003_rls and every later migration that adds user tables (a TABLES list with the same
    policies) name exactly USER_TABLES, in order."""
    import importlib.util

    named: list[str] = []
    for path in sorted((Path(__file__).parent.parent / "migrations" / "versions").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"migration_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "TABLES") and hasattr(module, "USER_MATCH"):
            named += module.TABLES
    assert tuple(named) == USER_TABLES


async def test_rls_status(service_engine: AsyncEngine, db_engine: AsyncEngine) -> None:
    async with service_engine.connect() as conn:
        ok, message = await rls_status(conn)
    assert ok, message
    async with db_engine.connect() as conn:
        ok, message = await rls_status(conn)
    assert not ok and "superuser" in message


async def _attributes(conn: AsyncConnection, role: str) -> tuple[bool, ...]:
    """(superuser, BYPASSRLS, login, CREATEROLE, CREATEDB) of a role."""
    sql = text(
        "SELECT rolsuper, rolbypassrls, rolcanlogin, rolcreaterole, rolcreatedb "
        "FROM pg_roles WHERE rolname = :r"
    )
    return tuple((await conn.execute(sql, {"r": role})).one())


async def test_the_admin_role_logs_in_bypasses_nothing_and_no_one_else_becomes_it(
    db_engine: AsyncEngine, admin_engine: AsyncEngine
) -> None:
    async with db_engine.connect() as conn:
        role = await _attributes(conn, ADMIN_ROLE)
        members = (
            await conn.execute(
                text(
                    "SELECT m.rolname FROM pg_auth_members AS a "
                    "JOIN pg_roles AS m ON m.oid = a.member WHERE a.roleid = to_regrole(:r)"
                ),
                {"r": ADMIN_ROLE},
            )
        ).scalars()
        service_is_member = await conn.scalar(
            text("SELECT pg_has_role(:s, :r, 'MEMBER')"), {"s": DEFAULT_APP_ROLE, "r": ADMIN_ROLE}
        )
    assert tuple(role) == (False, False, True, False, False)
    assert DEFAULT_APP_ROLE not in set(members) and not service_is_member
    async with admin_engine.connect() as conn:  # it reads the key; the service role cannot
        assert await conn.scalar(text(f"SELECT count(*) FROM {SCOPE_KEY_TABLE}")) == 1


async def test_rls_status_refuses_a_service_role_that_is_an_admin_or_reads_the_key(
    service_engine: AsyncEngine, db_engine: AsyncEngine
) -> None:
    for grant, revoke, found in (
        (
            f"GRANT {ADMIN_ROLE} TO {DEFAULT_APP_ROLE}",
            f"REVOKE {ADMIN_ROLE} FROM {DEFAULT_APP_ROLE}",
            "member of it",
        ),
        (
            f"GRANT SELECT ON {SCOPE_KEY_TABLE} TO {DEFAULT_APP_ROLE}",
            f"REVOKE SELECT ON {SCOPE_KEY_TABLE} FROM {DEFAULT_APP_ROLE}",
            "could sign any user's scope",
        ),
    ):
        async with db_engine.begin() as owner:
            await owner.execute(text(grant))
        try:
            async with service_engine.connect() as conn:
                ok, message = await rls_status(conn)
            assert not ok and found in message, message
        finally:
            async with db_engine.begin() as owner:
                await owner.execute(text(revoke))
    async with service_engine.connect() as conn:
        ok, message = await rls_status(conn)
    assert ok, message


async def test_service_role_attributes_and_grants(db_engine: AsyncEngine) -> None:
    async with db_engine.connect() as conn:
        role = await _attributes(conn, DEFAULT_APP_ROLE)
        owned = await conn.scalar(
            text("SELECT count(*) FROM pg_class WHERE relowner = to_regrole(:r)"),
            {"r": DEFAULT_APP_ROLE},
        )
        grants = (
            await conn.execute(
                text(
                    "SELECT table_name, string_agg(privilege_type, ',' ORDER BY privilege_type) "
                    "FROM information_schema.role_table_grants WHERE grantee = :r "
                    "GROUP BY table_name"
                ),
                {"r": DEFAULT_APP_ROLE},
            )
        ).all()
    assert tuple(role) == (False, False, True, False, False)
    assert owned == 0
    expected = {t: "DELETE,INSERT,SELECT,UPDATE" for t in USER_TABLES}
    # DELETE on spaces admits no row (row-level security: the admin role's policy alone)
    members = {"space_members": "DELETE,SELECT", "spaces": "DELETE"}
    # on a Citus coordinator the reference tables' copies there carry the tables' grants
    tables = {re.sub(r"^(spaces|space_members)_\d+$", r"\1", t): g for t, g in grants}
    assert tables == {**expected, "alembic_version": "SELECT", **members}


# -- the running service ---------------------------------------------------------------------


async def test_the_service_runs_requests_as_the_service_role(make_client) -> None:  # type: ignore[no-untyped-def]
    async with make_client() as (_, app), app.state.resources.engine.connect() as conn:
        assert await conn.scalar(text("SELECT current_user")) == DEFAULT_APP_ROLE


@pytest.mark.parametrize("exact_search_max_items", [0, 10_000])
async def test_both_query_arms_run_as_the_requesting_user(
    make_client,
    monkeypatch: pytest.MonkeyPatch,
    user_id: str,  # type: ignore[no-untyped-def]
    exact_search_max_items: int,
) -> None:
    """Each arm's connection carries the request's user: two connections for a user on the ANN
    path (arms at once), one for a user on the exact path."""
    from app.repositories.retrieval import RetrievalRepository
    from tests.helpers import ask_after_one_turn

    seen: dict[str, tuple[int, str]] = {}

    def spy(name: str):  # type: ignore[no-untyped-def]
        original = getattr(RetrievalRepository, name)

        async def wrapped(self: RetrievalRepository, *args, **kwargs):  # type: ignore[no-untyped-def]
            (row,) = await self._rows(
                "SELECT pg_backend_pid() AS pid, current_setting('pgrecall.user_id', true) AS u",
                {},
            )
            seen[name] = (int(row["pid"]), row["u"])
            return await original(self, *args, **kwargs)

        monkeypatch.setattr(RetrievalRepository, name, wrapped)

    spy("keyword")
    spy("vector")
    async with make_client(exact_search_max_items=exact_search_max_items) as (client, _):
        await ask_after_one_turn(client, user_id)
    assert seen["keyword"][1] == seen["vector"][1] == user_id
    two_connections = seen["keyword"][0] != seen["vector"][0]
    assert two_connections == (exact_search_max_items == 0)


# -- authentication: one key row by its hash, before the user is known -------------------------


async def test_key_lookup_sees_only_the_key_with_that_hash(
    sessions: async_sessionmaker[AsyncSession], pair: Pair
) -> None:
    async with key_lookup_session(sessions, _key_hash(pair.a)) as session, session.begin():
        rows = (await session.execute(text("SELECT user_id FROM api_keys"))).scalars().all()
        assert rows == [pair.a]
        touched = await session.execute(text("UPDATE api_keys SET last_used_at = now()"))
        assert touched.rowcount == 1  # type: ignore[attr-defined]
        # The lookup scope reads and marks use; it cannot delete or move a key.
        gone = await session.execute(text("DELETE FROM api_keys"))
        assert gone.rowcount == 0  # type: ignore[attr-defined]
    async with key_lookup_session(sessions, "0" * 64) as session:
        assert await session.scalar(text("SELECT count(*) FROM api_keys")) == 0
