"""Every statement the repositories send, and the migrated schema, stay distributable on Citus.

The statements are the ones test_user_scope captures (every public repository method, real
Postgres); the rules are tests/citus_rules.py. A reintroduction of each kind of problem the real
cluster refused is checked below too, so the rules cannot pass by seeing nothing.
"""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from app.citus import citus_version
from tests.citus_rules import not_immutable_functions, schema_problems, statement_problems
from tests.repositories.test_user_scope import Recorder, recorded  # noqa: F401  (fixture)


async def test_every_captured_statement_is_distributable(
    recorded: Recorder,  # noqa: F811
    db_engine: AsyncEngine,
) -> None:
    async with db_engine.connect() as conn:
        not_immutable = await not_immutable_functions(conn)
    assert recorded.statements, "nothing was captured"
    problems = [
        f"{cls}.{method}: {why}\n    {' '.join(sql.split())[:300]}"
        for (cls, method), sql in recorded.statements
        for why in statement_problems(sql, not_immutable)
    ]
    assert not problems, "statements Citus would refuse:\n" + "\n".join(problems)


async def test_the_schema_is_distributable(db_engine: AsyncEngine) -> None:
    async with db_engine.connect() as conn:
        problems = await schema_problems(conn)
    assert not problems, "schema Citus would refuse to distribute:\n" + "\n".join(problems)


# What Citus 13 refused on the real cluster (docs/scaling.md), each as pgrecall once sent it.
REFUSED = [
    (
        "UPDATE memory_items SET deleted_at = coalesce(memory_items.deleted_at, now()) "
        "WHERE memory_items.id = $1 AND memory_items.user_id = $2",
        "now() in a CASE/COALESCE of SET deleted_at",
    ),
    (
        "UPDATE extraction_jobs AS j SET next_attempt_at = CASE WHEN $1 = 'retry' "
        "THEN CURRENT_TIMESTAMP ELSE j.next_attempt_at END WHERE j.user_id = $2",
        "CURRENT_TIMESTAMP in a CASE/COALESCE of SET next_attempt_at",
    ),
    (
        "INSERT INTO memory_items (id, user_id, store_namespace, store_key) VALUES ($1, $2, $3, $4)"
        " ON CONFLICT (user_id, store_namespace, store_key) WHERE store_key IS NOT NULL "
        "DO UPDATE SET updated_at = now()",
        "now() in DO UPDATE SET updated_at",
    ),
    (
        "UPDATE memory_items SET expires_at=(now() + make_interval($1::INTEGER, $2::INTEGER, "
        "$3::INTEGER, $4::INTEGER, $5::INTEGER, $6::INTEGER, CAST((memory_items.metadata ->> "
        "$7::TEXT) AS FLOAT) * $8::INTEGER)) WHERE memory_items.user_id = $9::VARCHAR",
        "now() with a column in SET expires_at",
    ),
    (
        "UPDATE memory_items SET expires_at = CURRENT_TIMESTAMP + ttl * interval '1 minute' "
        "WHERE user_id = $1",
        "CURRENT_TIMESTAMP with a column in SET expires_at",
    ),
    (
        "INSERT INTO extraction_jobs (id, user_id, conversation_id, message_id) "
        "SELECT gen_random_uuid(), $1, $2, m FROM unnest($3::uuid[]) AS m "
        "ON CONFLICT (message_id) DO NOTHING",
        "ON CONFLICT target ['message_id'] lacks user_id",
    ),
    (
        "WITH first AS (SELECT user_id, conversation_id FROM extraction_jobs "
        "WHERE state = 'queued' ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
        "UPDATE extraction_jobs AS j SET state = 'running' FROM first "
        "WHERE j.user_id = first.user_id AND j.conversation_id = first.conversation_id",
        "FOR UPDATE/SHARE over extraction_jobs not pinned to a user",
    ),
]
ACCEPTED = [
    # now() outside CASE/COALESCE is evaluated once on the coordinator: accepted.
    "UPDATE memory_items SET updated_at = now() WHERE user_id = $1 AND id = $2",
    "UPDATE memory_items SET deleted_at = coalesce(deleted_at, $3) WHERE user_id = $1 AND id = $2",
    # The clock read alone (on the coordinator), then plain arithmetic with the column.
    "UPDATE memory_items SET expires_at = to_timestamp(extract(epoch FROM now()) "
    "+ CAST(metadata ->> 'ttl' AS float) * 60) WHERE user_id = $1",
    "UPDATE extraction_jobs SET lease_until = now() + make_interval(secs => $2) WHERE user_id = $1",
    "INSERT INTO search_stats (user_id, doc_count) VALUES ($1, 1) ON CONFLICT (user_id) "
    "DO UPDATE SET doc_count = search_stats.doc_count + EXCLUDED.doc_count",
    "SELECT id FROM extraction_jobs WHERE user_id = $1 AND conversation_id = $2 FOR UPDATE",
    # api_keys stays on the coordinator: not a distributed table.
    "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1",
]


@pytest.mark.parametrize(("sql", "why"), REFUSED)
async def test_a_refused_statement_is_reported(db_engine: AsyncEngine, sql: str, why: str) -> None:
    async with db_engine.connect() as conn:
        not_immutable = await not_immutable_functions(conn)
    assert any(why in p for p in statement_problems(sql, not_immutable)), why


@pytest.mark.parametrize("sql", ACCEPTED)
async def test_an_accepted_statement_passes(db_engine: AsyncEngine, sql: str) -> None:
    async with db_engine.connect() as conn:
        not_immutable = await not_immutable_functions(conn)
    assert statement_problems(sql, not_immutable) == []


@pytest.mark.parametrize(
    ("ddl", "why"),
    [
        (
            [
                "DROP INDEX uq_memory_items_supersedes_id",
                "CREATE UNIQUE INDEX uq_memory_items_supersedes_id ON memory_items (supersedes_id)",
            ],
            "unique index uq_memory_items_supersedes_id ['supersedes_id'] lacks user_id",
        ),
        (
            [
                "ALTER TABLE memory_items DROP CONSTRAINT fk_memory_items_user_id_messages",
                "ALTER TABLE memory_items ADD CONSTRAINT fk_memory_items_user_id_messages "
                "FOREIGN KEY (user_id, source_message_id) REFERENCES messages (user_id, id) "
                "ON DELETE SET NULL (source_message_id)",
            ],
            "fk_memory_items_user_id_messages is ON DELETE SET NULL with user_id",
        ),
        (
            [
                "ALTER TABLE message_passages DROP CONSTRAINT pk_message_passages",
                "ALTER TABLE message_passages ADD CONSTRAINT pk_message_passages "
                "PRIMARY KEY (message_id, ord)",
            ],
            "primary key pk_message_passages ['message_id', 'ord'] lacks user_id",
        ),
    ],
)
async def test_a_schema_change_citus_refuses_is_reported(
    db_engine: AsyncEngine, ddl: list[str], why: str
) -> None:
    """On plain Postgres the change applies and the check reports it; on a Citus coordinator
    (PGRECALL_TEST_DATABASE_URL) Citus itself refuses it, which is what the check stands for."""
    async with db_engine.connect() as conn:
        citus = await citus_version(conn) is not None
        await conn.rollback()
        tx = await conn.begin()
        try:
            if citus:
                with pytest.raises(DBAPIError) as refused:
                    for statement in ddl:
                        await conn.execute(text(statement))
                assert getattr(refused.value.orig, "sqlstate", None) == "0A000"  # not supported
                return
            for statement in ddl:
                await conn.execute(text(statement))
            problems = await schema_problems(conn)
        finally:
            await tx.rollback()
    assert any(why in p for p in problems), problems
