"""Memory scopes enforced by Postgres (migration 0019_memory_scopes, issue 43), in raw SQL as the
service role: what a statement injected into a request could try.

- an agent's rows are invisible to another agent of the same user, and a changed agent,
  run or own setting (the signature covers them) shows nothing at all;
- a run's rows are invisible to another run; `own` hides the unscoped rows;
- a space's rows are visible to its members only; a read grant cannot write; a revoked grant
  reads nothing from its next statement; the membership table shows a user its own grants, and
  a member leaving deletes its own grant alone.

On a Citus coordinator (PGRECALL_TEST_DATABASE_URL) the same: the grants are read on the
worker, from its copy of space_members (docs/scaling.md, "Shared spaces on Citus").
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import SET_LOCAL, ScopeKey, engine_scope_key, set_local_params
from app.domain import MemoryScope, space_owner
from app.models.base import EMBEDDING_DIMENSION
from app.vectors import vector_literal

VECTOR = vector_literal([0.1] * EMBEDDING_DIMENSION)


def _key(engine: AsyncEngine) -> ScopeKey:
    key = engine_scope_key(engine)
    assert key is not None
    return key


def settings_of(key: ScopeKey, scope: MemoryScope) -> dict[str, str]:
    return {
        "pgrecall.user_id": scope.user_id,
        "pgrecall.user_sig": key.sign(scope.signed_message()),
        "pgrecall.agent_id": scope.agent_id or "",
        "pgrecall.run_id": scope.run_id or "",
        "pgrecall.scope_own": "on" if scope.own else "",
    }


async def run_as(
    engine: AsyncEngine, settings: dict[str, str], sql: str, params: dict[str, object]
) -> list[str]:
    async with engine.connect() as conn, conn.begin():
        # SET LOCAL as the service does (on Citus it reaches the workers; set_config does not)
        await conn.execute(SET_LOCAL, set_local_params(settings))
        result = await conn.execute(text(sql), params)
        return [str(v) for v in result.scalars()] if result.returns_rows else []


async def seed(
    db_engine: AsyncEngine, user: str, agent: str | None, run: str | None, text_: str
) -> None:
    async with db_engine.begin() as conn:
        await conn.execute(
            text(
                "INSERT INTO memory_items (id, user_id, agent_id, run_id, content, content_hash, "
                "type, embedding, embedding_model) VALUES (:i, :u, :a, :r, :c, :h, 'fact', "
                "CAST(:v AS vector), 'm')"
            ),
            {
                "i": uuid.uuid4(),
                "u": user,
                "a": agent,
                "r": run,
                "c": text_,
                "h": uuid.uuid4().hex,
                "v": VECTOR,
            },
        )


SEEN = "SELECT content FROM memory_items WHERE user_id = :u ORDER BY content"


async def test_agents_and_runs_are_kept_apart(
    service_engine: AsyncEngine, db_engine: AsyncEngine
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    for agent, run, content in (
        ("a", None, "a's"),
        ("b", None, "b's"),
        (None, None, "unscoped"),
        ("a", "r1", "a's r1"),
        ("a", "r2", "a's r2"),
    ):
        await seed(db_engine, user, agent, run, content)
    key, p = _key(service_engine), {"u": user}

    async def seen(scope: MemoryScope) -> list[str]:
        return await run_as(service_engine, settings_of(key, scope), SEEN, p)

    assert await seen(MemoryScope(user)) == ["a's", "a's r1", "a's r2", "b's", "unscoped"]
    assert await seen(MemoryScope(user, "a")) == ["a's", "a's r1", "a's r2", "unscoped"]
    assert await seen(MemoryScope(user, "b")) == ["b's", "unscoped"]
    assert await seen(MemoryScope(user, "a", own=True)) == ["a's", "a's r1", "a's r2"]
    assert await seen(MemoryScope(user, "a", "r1")) == ["a's", "a's r1", "unscoped"]
    assert await seen(MemoryScope(user, "a", "r1", own=True)) == ["a's r1"]
    assert await seen(MemoryScope(user, run_id="r2")) == ["a's", "a's r2", "b's", "unscoped"]


async def test_a_changed_scope_setting_shows_nothing(
    service_engine: AsyncEngine, db_engine: AsyncEngine
) -> None:
    """b's signed scope with the agent setting changed (or cleared, or own switched off) after
    signing: the signature no longer matches, so no row at all."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    await seed(db_engine, user, "a", None, "a's")
    await seed(db_engine, user, "b", None, "b's")
    key = _key(service_engine)
    signed = settings_of(key, MemoryScope(user, "b", own=True))
    for change in (
        {"pgrecall.agent_id": "a"},
        {"pgrecall.agent_id": ""},
        {"pgrecall.scope_own": ""},
        {"pgrecall.run_id": "r9"},
    ):
        assert await run_as(service_engine, signed | change, SEEN, {"u": user}) == [], change
    assert await run_as(service_engine, signed, SEEN, {"u": user}) == ["b's"]


async def test_an_agent_cannot_write_into_another_agents_scope(
    service_engine: AsyncEngine, db_engine: AsyncEngine
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    await seed(db_engine, user, "a", None, "a's")
    key = _key(service_engine)
    as_b = settings_of(key, MemoryScope(user, "b"))
    insert = (
        "INSERT INTO memory_items (id, user_id, agent_id, content, content_hash, type, "
        "embedding, embedding_model) VALUES (:i, :u, 'a', 'forged', :h, 'fact', "
        "CAST(:v AS vector), 'm')"
    )
    with pytest.raises(DBAPIError, match="row-level security"):
        await run_as(
            service_engine,
            as_b,
            insert,
            {"i": uuid.uuid4(), "u": user, "h": uuid.uuid4().hex, "v": VECTOR},
        )
    # updates and deletes of a's row from b's scope touch nothing
    await run_as(
        service_engine,
        as_b,
        "UPDATE memory_items SET content = 'x' WHERE user_id = :u",
        {"u": user},
    )
    await run_as(service_engine, as_b, "DELETE FROM memory_items WHERE user_id = :u", {"u": user})
    assert await run_as(service_engine, settings_of(key, MemoryScope(user)), SEEN, {"u": user}) == [
        "a's"
    ]
    # an insert without agent_id is stamped with the scope's (the column's default)
    await run_as(
        service_engine,
        as_b,
        "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding, "
        "embedding_model) VALUES (:i, :u, 'stamped', :h, 'fact', CAST(:v AS vector), 'm')",
        {"i": uuid.uuid4(), "u": user, "h": uuid.uuid4().hex, "v": VECTOR},
    )
    async with db_engine.connect() as conn:
        stamped = await conn.scalar(
            text("SELECT agent_id FROM memory_items WHERE user_id = :u AND content = 'stamped'"),
            {"u": user},
        )
    assert stamped == "b"


async def test_spaces_follow_their_grants(
    service_engine: AsyncEngine, db_engine: AsyncEngine
) -> None:
    run = uuid.uuid4().hex[:8]
    space, reader, writer, outsider = f"s-{run}", f"r-{run}", f"w-{run}", f"o-{run}"
    room = space_owner(space)
    async with db_engine.begin() as conn:
        await conn.execute(text("INSERT INTO spaces (id) VALUES (:s)"), {"s": space})
        await conn.execute(
            text(
                "INSERT INTO space_members (space_id, user_id, access) VALUES "
                "(:s, :r, 'read'), (:s, :w, 'write')"
            ),
            {"s": space, "r": reader, "w": writer},
        )
    await seed(db_engine, room, None, None, "the team's fact")
    await seed(db_engine, writer, None, None, "the writer's own")
    key = _key(service_engine)

    def as_(user: str) -> dict[str, str]:
        return settings_of(key, MemoryScope(user))

    p = {"u": room}
    assert await run_as(service_engine, as_(reader), SEEN, p) == ["the team's fact"]
    assert await run_as(service_engine, as_(writer), SEEN, p) == ["the team's fact"]
    assert await run_as(service_engine, as_(outsider), SEEN, p) == []
    # a member's own memory stays the member's
    assert await run_as(service_engine, as_(reader), SEEN, {"u": writer}) == []
    # every row a reader can see, whatever it asks for: its own and the space's
    everything = "SELECT DISTINCT user_id FROM memory_items ORDER BY 1"
    assert set(await run_as(service_engine, as_(reader), everything, {})) == {room}
    # membership rows: each user its own
    members = "SELECT user_id FROM space_members ORDER BY 1"
    assert await run_as(service_engine, as_(reader), members, {}) == [reader]
    # a read grant cannot write: insert refused, update and delete touch nothing
    insert = (
        "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding, "
        "embedding_model) VALUES (:i, :u, 'from reader', :h, 'fact', CAST(:v AS vector), 'm')"
    )
    params = {"i": uuid.uuid4(), "u": room, "h": uuid.uuid4().hex, "v": VECTOR}
    with pytest.raises(DBAPIError, match="row-level security"):
        await run_as(service_engine, as_(reader), insert, params)
    await run_as(
        service_engine, as_(reader), "UPDATE memory_items SET content = 'x' WHERE user_id = :u", p
    )
    await run_as(service_engine, as_(reader), "DELETE FROM memory_items WHERE user_id = :u", p)
    # the writer can
    await run_as(service_engine, as_(writer), insert, {**params, "i": uuid.uuid4()})
    assert await run_as(service_engine, as_(reader), SEEN, p) == ["from reader", "the team's fact"]
    # and changes and deletes (each writing command has its own policy: migration 0021)
    change = "UPDATE memory_items SET content = 'edited' WHERE user_id = :u AND content = :c"
    await run_as(service_engine, as_(writer), change, {**p, "c": "from reader"})
    assert await run_as(service_engine, as_(reader), SEEN, p) == ["edited", "the team's fact"]
    delete = "DELETE FROM memory_items WHERE user_id = :u AND content = 'edited'"
    await run_as(service_engine, as_(writer), delete, p)
    await run_as(service_engine, as_(writer), insert, {**params, "i": uuid.uuid4()})
    assert await run_as(service_engine, as_(reader), SEEN, p) == ["from reader", "the team's fact"]
    # nor may a writer move a space's row out to a user (WITH CHECK of the update policy; a
    # Citus coordinator refuses a change of the distribution column before that)
    with pytest.raises(DBAPIError, match=r"row-level security|partition value"):
        await run_as(
            service_engine,
            as_(writer),
            "UPDATE memory_items SET user_id = :o WHERE user_id = :u",
            {**p, "o": outsider},
        )
    # the service role cannot grant itself anything
    with pytest.raises(DBAPIError, match="permission denied"):
        await run_as(
            service_engine,
            as_(outsider),
            "INSERT INTO space_members (space_id, user_id, access) VALUES (:s, :o, 'write')",
            {"s": space, "o": outsider},
        )
    # a member leaves as the service role (as a purge does): its own row alone, and from the
    # next statement on it reads nothing of the space
    await run_as(
        service_engine, as_(writer), "DELETE FROM space_members WHERE space_id = :s", {"s": space}
    )
    assert await run_as(service_engine, as_(writer), SEEN, p) == []
    assert await run_as(service_engine, as_(reader), members, {}) == [reader]
    # revoked: the next statement reads nothing of the space
    async with db_engine.begin() as conn:
        await conn.execute(
            text("DELETE FROM space_members WHERE space_id = :s AND user_id = :r"),
            {"s": space, "r": reader},
        )
    assert await run_as(service_engine, as_(reader), SEEN, p) == []
    async with db_engine.connect() as conn:
        left = "SELECT count(*) FROM space_members WHERE space_id = :s"
        assert await conn.scalar(text(left), {"s": space}) == 0


async def test_the_spaces_function_checks_the_signature_once_per_call(
    service_engine: AsyncEngine, db_engine: AsyncEngine
) -> None:
    """pgrecall_scope_spaces() reads the signed user once, not once per row of space_members it
    scans (migration 0021: with 20 rows a call took ~150 µs instead of ~15). Counted by
    Postgres' function statistics of the transaction, with 30 memberships to scan."""
    run = uuid.uuid4().hex[:8]
    member = f"m-{run}"
    async with db_engine.begin() as conn:
        for n in range(30):
            await conn.execute(text("INSERT INTO spaces (id) VALUES (:s)"), {"s": f"c{n}-{run}"})
        await conn.execute(
            text(
                "INSERT INTO space_members (space_id, user_id, access) "
                "SELECT 'c' || n || '-' || :r, 'u' || n || '-' || :r, 'read' "
                "FROM generate_series(1, 29) AS n"
            ),
            {"r": run},
        )
        await conn.execute(
            text("INSERT INTO space_members (space_id, user_id, access) VALUES (:s, :m, 'read')"),
            {"s": f"c0-{run}", "m": member},
        )
    settings = settings_of(_key(service_engine), MemoryScope(member))
    async with db_engine.connect() as conn, conn.begin():
        await conn.execute(text("SET LOCAL track_functions = 'all'"))
        # a sequential scan, as of a small table: the per-row form called the check per row
        await conn.execute(text("SET LOCAL enable_indexscan = off"))
        await conn.execute(text("SET LOCAL enable_bitmapscan = off"))
        await conn.execute(SET_LOCAL, set_local_params(settings))
        spaces = await conn.scalar(text("SELECT pgrecall_scope_spaces(false)"))
        calls = await conn.scalar(
            text(
                "SELECT calls FROM pg_stat_xact_user_functions "
                "WHERE funcname = 'pgrecall_scope_user'"
            )
        )
    assert spaces == [space_owner(f"c0-{run}")]
    assert calls == 1


def _migration(stem: str) -> Any:
    path = Path(__file__).parent.parent / "migrations" / "versions" / f"{stem}.py"
    spec = importlib.util.spec_from_file_location(f"migration_{stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("plpgsql", [True, False])
async def test_both_forms_of_the_scope_functions_answer_alike(
    service_engine: AsyncEngine, db_engine: AsyncEngine, plpgsql: bool
) -> None:
    """Migration 0022's two forms of the scope functions (PL/pgSQL before Postgres 18, SQL from
    18 on: the test server runs one of them) give the same answers: the signed user, nothing
    for a wrong signature, the scope's user, and the grants of the signed user. Made in a schema
    of their own in a rolled-back transaction, beside the server's own."""
    run = uuid.uuid4().hex[:8]
    space, member = f"f-{run}", f"fm-{run}"
    async with db_engine.begin() as conn:
        await conn.execute(text("INSERT INTO spaces (id) VALUES (:s)"), {"s": space})
        await conn.execute(
            text("INSERT INTO space_members (space_id, user_id, access) VALUES (:s, :m, 'read')"),
            {"s": space, "m": member},
        )
    key = _key(service_engine)
    made = _migration("0022_scope_functions_plpgsql").scope_functions(plpgsql)
    schema = f"forms_{run}"
    async with db_engine.connect() as conn, conn.begin() as outer:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
        await conn.execute(text(f"SET LOCAL search_path = {schema}, public"))
        for statement in made:
            await conn.exec_driver_sql(statement)
        language = await conn.scalar(
            text(
                "SELECT string_agg(DISTINCT l.lanname, ',') FROM pg_proc AS p "
                "JOIN pg_language AS l ON l.oid = p.prolang "
                "WHERE p.pronamespace = CAST(:n AS regnamespace)"
            ),
            {"n": schema},
        )
        assert language == ("plpgsql" if plpgsql else "sql")

        async def ask(scope: MemoryScope, sig: str | None = None) -> tuple[Any, Any]:
            settings = settings_of(key, scope)
            if sig is not None:
                settings["pgrecall.user_sig"] = sig
            async with conn.begin_nested():
                await conn.execute(SET_LOCAL, set_local_params(settings))
                row = (
                    await conn.execute(
                        text(
                            f"SELECT {schema}.pgrecall_scope_user(), "
                            f"{schema}.pgrecall_scope_spaces(false)"
                        )
                    )
                ).one()
            return row[0], row[1]

        assert await ask(MemoryScope(member)) == (member, [space_owner(space)])
        assert await ask(MemoryScope(member), sig="0" * 64) == (None, [])
        scoped = MemoryScope(member, agent_id="planner", run_id="r1")
        assert (await ask(scoped))[0] == member
        await outer.rollback()
