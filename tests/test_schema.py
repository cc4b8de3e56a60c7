"""The Alembic schema as it really is in Postgres: columns, constraints, indexes, round trip."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime

import numpy as np
import pytest
from alembic import command
from sqlalchemy import exc as sa_exc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from app.embedded import EmbeddedPostgres
from app.migrate import alembic_config, head_revision, upgrade_head
from app.vectors import vector_literal
from tests.helpers import as_stored
from tests.servers import temporary_postgres

VECTOR_ZERO = "[" + ",".join(["0.1"] * 384) + "]"


@pytest.fixture
async def conn(db_engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection inside a transaction that is always rolled back: nothing is left behind."""
    async with db_engine.connect() as connection:
        transaction = await connection.begin()
        try:
            yield connection
        finally:
            await transaction.rollback()


async def _columns(conn: AsyncConnection, table: str) -> dict[str, tuple[str, bool, str | None]]:
    rows = await conn.execute(
        text(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"
            " pg_get_expr(d.adbin, d.adrelid)"
            " FROM pg_attribute a LEFT JOIN pg_attrdef d"
            "   ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
            " WHERE a.attrelid = CAST(:t AS regclass) AND a.attnum > 0 AND NOT a.attisdropped"
        ),
        {"t": table},
    )
    return {name: (kind, notnull, default) for name, kind, notnull, default in rows}


async def _indexes(conn: AsyncConnection) -> dict[str, str]:
    rows = await conn.execute(
        text("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'")
    )
    return {name: definition for name, definition in rows}


async def test_vector_extension_installed(conn: AsyncConnection) -> None:
    version = await conn.scalar(
        text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    )
    assert version is not None


async def test_tables_exist(conn: AsyncConnection) -> None:
    rows = await conn.scalars(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'"))
    assert {
        "conversations",
        "messages",
        "memory_items",
        "search_postings",
        "search_stats",
        "alembic_version",
    } <= set(rows)
    assert await conn.scalar(text("SELECT version_num FROM alembic_version")) == head_revision()


async def test_conversations_columns(conn: AsyncConnection) -> None:
    cols = await _columns(conn, "conversations")
    assert cols["id"][:2] == ("uuid", True)
    assert cols["user_id"][:2] == ("character varying(255)", True)
    assert cols["title"][:2] == ("character varying(500)", False)
    for name in ("created_at", "updated_at"):
        assert cols[name] == ("timestamp with time zone", True, "now()")


async def test_messages_columns(conn: AsyncConnection) -> None:
    cols = await _columns(conn, "messages")
    assert cols["id"][:2] == ("uuid", True)
    assert cols["conversation_id"][:2] == ("uuid", True)
    assert cols["user_id"][:2] == ("character varying(255)", True)
    assert cols["role"][:2] == ("character varying(20)", True)
    assert cols["content"][:2] == ("text", True)
    # Dimension 384 is the local MiniLM model's (the settings default).
    assert cols["embedding"][:2] == ("halfvec(384)", False)
    assert cols["embedding_model"][:2] == ("character varying(100)", False)
    assert cols["correlation_id"][:2] == ("uuid", True)
    assert cols["seq"][:2] == ("bigint", True)
    assert cols["metadata"] == ("jsonb", True, "'{}'::jsonb")
    assert cols["created_at"] == ("timestamp with time zone", True, "now()")
    identity = await conn.scalar(
        text(
            "SELECT attidentity::text FROM pg_attribute"
            " WHERE attrelid = 'messages'::regclass AND attname = 'seq'"
        )
    )
    assert identity == "a"  # GENERATED ALWAYS: clients cannot forge the order


async def test_memory_items_columns(conn: AsyncConnection) -> None:
    cols = await _columns(conn, "memory_items")
    expected = {
        "id": ("uuid", True),
        "user_id": ("character varying(255)", True),
        "content": ("text", True),
        "content_hash": ("character varying(64)", True),
        "type": ("character varying(20)", True),
        "embedding": ("halfvec(384)", True),
        "embedding_model": ("character varying(100)", True),
        "source_message_id": ("uuid", False),
        "source": ("character varying(500)", False),
        "importance": ("double precision", True),
        "created_at": ("timestamp with time zone", True),
        "updated_at": ("timestamp with time zone", True),
        "expires_at": ("timestamp with time zone", False),
        "deleted_at": ("timestamp with time zone", False),
        "metadata": ("jsonb", True),
        "valid_from": ("timestamp with time zone", True),
        "valid_to": ("timestamp with time zone", False),
        "supersedes_id": ("uuid", False),
    }
    assert {name: cols[name][:2] for name in expected} == expected
    assert cols["importance"][2] == "0.5"
    assert cols["created_at"][2] == "now()"
    assert cols["updated_at"][2] == "now()"
    assert cols["deleted_at"][2] is None


async def test_foreign_keys_in_catalog(conn: AsyncConnection) -> None:
    rows = await conn.execute(
        text(
            "SELECT conrelid::regclass::text, confrelid::regclass::text, confdeltype::text,"
            " pg_get_constraintdef(oid) FROM pg_constraint WHERE contype = 'f'"
        )
    )
    fks = {(src, dst): (action, definition) for src, dst, action, definition in rows}
    # Keys carry user_id (Citus co-location, migration 0010_distributable); the links a memory
    # keeps are NO ACTION ('a'): the app clears them before deleting (Citus refuses SET NULL).
    action, definition = fks[("messages", "conversations")]
    assert action == "c" and "(user_id, conversation_id)" in definition
    action, definition = fks[("memory_items", "messages")]
    assert action == "a" and "(user_id, source_message_id)" in definition
    action, definition = fks[("memory_items", "memory_items")]
    assert action == "a" and "(user_id, supersedes_id)" in definition
    for src in ("extraction_jobs", "message_passages"):
        action, definition = fks[(src, "messages")]
        assert action == "c" and "(user_id, message_id)" in definition


async def test_check_constraints_in_catalog(conn: AsyncConnection) -> None:
    rows = await conn.execute(
        text(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE contype = 'c'"
        )
    )
    checks = [(table, definition) for table, definition in rows]
    messages = " ".join(d for t, d in checks if t == "messages")
    memories = " ".join(d for t, d in checks if t == "memory_items")
    for role in ("user", "assistant", "system"):
        assert f"'{role}'" in messages
    for kind in ("fact", "preference", "decision", "note"):
        assert f"'{kind}'" in memories
    assert "importance >= (0)" in memories and "importance <= (1)" in memories


async def _conversation(conn: AsyncConnection) -> uuid.UUID:
    cid = uuid.uuid4()
    await conn.execute(
        text("INSERT INTO conversations (id, user_id) VALUES (:id, 'schema-test')"), {"id": cid}
    )
    return cid


async def _message(conn: AsyncConnection, cid: uuid.UUID, role: str = "user") -> uuid.UUID:
    mid = uuid.uuid4()
    await conn.execute(
        text(
            "INSERT INTO messages (id, conversation_id, user_id, role, content, correlation_id)"
            " VALUES (:id, :cid, 'schema-test', :role, 'hello', :corr)"
        ),
        {"id": mid, "cid": cid, "role": role, "corr": uuid.uuid4()},
    )
    return mid


async def _memory(
    conn: AsyncConnection,
    *,
    kind: str = "fact",
    importance: float | None = None,
    source_message: uuid.UUID | None = None,
) -> uuid.UUID:
    mid = uuid.uuid4()
    await conn.execute(
        text(
            "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding,"
            " embedding_model, source_message_id, importance)"
            " VALUES (:id, 'schema-test', 'c', :hash, :type, CAST(:emb AS vector), 'm', :src,"
            " COALESCE(CAST(:imp AS double precision), 0.5))"
        ),
        {
            "id": mid,
            "hash": uuid.uuid4().hex,
            "type": kind,
            "emb": VECTOR_ZERO,
            "src": source_message,
            "imp": importance,
        },
    )
    return mid


async def _expect_violation(conn: AsyncConnection, coro_factory, sqlstate: str) -> None:  # type: ignore[no-untyped-def]
    """Run one insert in a savepoint; it must fail with the given SQLSTATE."""
    savepoint = await conn.begin_nested()
    with pytest.raises(sa_exc.IntegrityError) as info:
        await coro_factory()
    await savepoint.rollback()
    assert getattr(info.value.orig, "sqlstate", None) == sqlstate, info.value


async def test_defaults_applied(conn: AsyncConnection) -> None:
    cid = await _conversation(conn)
    mid = await _message(conn, cid)
    row = (
        await conn.execute(
            text("SELECT metadata, created_at, seq FROM messages WHERE id = :id"), {"id": mid}
        )
    ).one()
    assert row.metadata == {} and row.created_at is not None and row.seq > 0
    memory = await _memory(conn)
    imp = await conn.scalar(
        text("SELECT importance FROM memory_items WHERE id = :id"), {"id": memory}
    )
    assert imp == 0.5


async def test_role_check_rejects_unknown_role(conn: AsyncConnection) -> None:
    cid = await _conversation(conn)
    await _message(conn, cid, role="assistant")
    await _expect_violation(conn, lambda: _message(conn, cid, role="robot"), "23514")


async def test_type_check_rejects_unknown_type(conn: AsyncConnection) -> None:
    await _memory(conn, kind="preference")
    await _expect_violation(conn, lambda: _memory(conn, kind="opinion"), "23514")


@pytest.mark.parametrize("importance", [-0.01, 1.01])
async def test_importance_range_enforced(conn: AsyncConnection, importance: float) -> None:
    await _memory(conn, importance=0.0)
    await _memory(conn, importance=1.0)
    await _expect_violation(conn, lambda: _memory(conn, importance=importance), "23514")


async def test_not_null_enforced(conn: AsyncConnection) -> None:
    cid = await _conversation(conn)

    async def no_correlation() -> None:
        await conn.execute(
            text(
                "INSERT INTO messages (id, conversation_id, user_id, role, content)"
                " VALUES (:id, :cid, 'u', 'user', 'x')"
            ),
            {"id": uuid.uuid4(), "cid": cid},
        )

    async def no_embedding() -> None:
        await conn.execute(
            text(
                "INSERT INTO memory_items (id, user_id, content, content_hash, type,"
                " embedding_model) VALUES (:id, 'u', 'c', 'h', 'fact', 'm')"
            ),
            {"id": uuid.uuid4()},
        )

    await _expect_violation(conn, no_correlation, "23502")
    await _expect_violation(conn, no_embedding, "23502")


async def test_message_needs_existing_conversation(conn: AsyncConnection) -> None:
    await _expect_violation(conn, lambda: _message(conn, uuid.uuid4()), "23503")


async def test_delete_conversation_cascades_and_memory_source_must_be_cleared(
    conn: AsyncConnection,
) -> None:
    cid = await _conversation(conn)
    message = await _message(conn, cid)
    memory = await _memory(conn, source_message=message)
    delete = text("DELETE FROM conversations WHERE id = :id")
    # A memory still pointing at the message refuses the delete (no dangling link)...
    await _expect_violation(conn, lambda: conn.execute(delete, {"id": cid}), "23503")
    # ...and once the link is cleared (ConversationRepository does it) the delete cascades.
    await conn.execute(
        text("UPDATE memory_items SET source_message_id = NULL WHERE id = :id"), {"id": memory}
    )
    await conn.execute(delete, {"id": cid})
    left = await conn.scalar(
        text("SELECT count(*) FROM messages WHERE conversation_id = :id"), {"id": cid}
    )
    assert left == 0
    source = await conn.execute(
        text("SELECT source_message_id FROM memory_items WHERE id = :id"), {"id": memory}
    )
    assert source.one() == (None,)  # the memory survives


async def test_embedding_dimension_enforced(conn: AsyncConnection) -> None:
    savepoint = await conn.begin_nested()
    with pytest.raises(sa_exc.DBAPIError, match="expected 384 dimensions"):
        await conn.execute(
            text(
                "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding,"
                " embedding_model) VALUES (:id, 'u', 'c', 'h', 'fact', '[1,2,3]', 'm')"
            ),
            {"id": uuid.uuid4()},
        )
    await savepoint.rollback()


async def test_vector_indexes(conn: AsyncConnection) -> None:
    indexes = await _indexes(conn)
    for table in ("messages", "memory_items"):
        definition = indexes[f"idx_{table}_embedding"]
        assert f"ON public.{table} USING ivfflat (embedding halfvec_cosine_ops)" in definition
        assert "WITH (lists='100')" in definition


async def test_the_exact_path_has_covering_indexes_of_the_vectors(conn: AsyncConnection) -> None:
    """Migration 0017: a user's vectors are consecutive index entries (an index-only scan);
    migration 0019 adds the scope columns the scope policy reads."""
    indexes = await _indexes(conn)
    assert indexes["idx_messages_user_vectors"] == (
        "CREATE INDEX idx_messages_user_vectors ON public.messages USING btree (user_id, "
        "embedding_model) INCLUDE (id, embedding, agent_id, run_id) WHERE (embedding IS NOT NULL)"
    )
    assert indexes["idx_message_passages_user_vectors"] == (
        "CREATE INDEX idx_message_passages_user_vectors ON public.message_passages USING btree "
        "(user_id, embedding_model) INCLUDE (message_id, embedding)"
    )
    for table in ("messages", "message_passages"):  # the visibility map kept current
        options = await conn.scalar(
            text("SELECT reloptions FROM pg_class WHERE oid = CAST(:t AS regclass)"), {"t": table}
        )
        assert options == ["autovacuum_vacuum_insert_scale_factor=0.01"], table
    citus = await conn.scalar(text("SELECT to_regclass('pg_catalog.pg_dist_partition')"))
    for table in ("messages", "message_passages", "memory_items"):
        storage = await conn.scalar(
            text(
                "SELECT attstorage::text FROM pg_attribute"
                " WHERE attrelid = CAST(:t AS regclass) AND attname = 'embedding'"
            ),
            {"t": table},
        )
        # Inline, as before the type changed. Citus does not forward SET STORAGE to a
        # distributed table: where it is installed, the column keeps the type's default (0017).
        assert storage == "p" or (citus is not None and storage == "e"), table


async def test_policies_read_their_settings_once_per_statement(conn: AsyncConnection) -> None:
    """Migration 0017 (and 0018): every policy's current_setting or signed-user call in a scalar
    subquery (an InitPlan), none per row; on a Citus database none (Citus refuses a subquery in
    a distributed table's policy). The admin policies (0018) call nothing: `true` for the admin
    role alone."""
    citus = await conn.scalar(text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'"))
    rows = (
        await conn.execute(
            text(
                "SELECT c.relname || '.' || p.polname, coalesce(pg_get_expr(p.polqual, "
                "p.polrelid), '') || ' ' || coalesce(pg_get_expr(p.polwithcheck, p.polrelid), '')"
                " FROM pg_policy AS p JOIN pg_class AS c ON c.oid = p.polrelid"
            )
        )
    ).all()
    assert len(rows) >= 20
    for name, expressions in rows:
        if name.endswith("_admin"):
            assert expressions.split() == ["true", "true"], (name, expressions)
            continue
        functions = ("current_setting(", "pgrecall_scope_user(", "pgrecall_scope_spaces(")
        calls = sum(expressions.count(f) for f in functions)
        once = sum(expressions.count(f"SELECT {f}") for f in functions)
        assert calls and once == (0 if citus else calls), (name, expressions)


async def test_full_text_indexes_index_the_column(conn: AsyncConnection) -> None:
    indexes = await _indexes(conn)
    for table in ("messages", "memory_items"):
        definition = indexes[f"idx_{table}_content_fts"]
        # The literal-'content' trap would read to_tsvector('english'::regconfig, 'content'::text).
        assert definition.endswith(
            f"ON public.{table} USING gin (to_tsvector('english'::regconfig, content))"
        ), definition


async def test_full_text_index_serves_english_queries(conn: AsyncConnection) -> None:
    cid = await _conversation(conn)
    await _message(conn, cid)
    await conn.execute(text("SET LOCAL enable_seqscan = off"))
    plan = "\n".join(
        await conn.scalars(
            text(
                "EXPLAIN SELECT id FROM messages"
                " WHERE to_tsvector('english', content) @@ to_tsquery('english', 'hello')"
            )
        )
    )
    assert "idx_messages_content_fts" in plan
    found = await conn.scalar(
        text(
            "SELECT count(*) FROM messages WHERE conversation_id = :cid"
            " AND to_tsvector('english', content) @@ to_tsquery('english', 'hellos')"
        ),
        {"cid": cid},
    )
    assert found == 1  # stemmed English, not the literal word "content"


async def test_partial_and_conversation_indexes(conn: AsyncConnection) -> None:
    indexes = await _indexes(conn)
    assert indexes["idx_memory_items_user_id"].endswith(
        "USING btree (user_id) WHERE (deleted_at IS NULL)"
    )
    assert indexes["idx_memory_items_type"].endswith(
        "USING btree (user_id, type) WHERE (deleted_at IS NULL)"
    )
    assert indexes["idx_conversations_user_id"].endswith("USING btree (user_id)")
    assert indexes["idx_conversations_updated_at"].endswith("USING btree (updated_at DESC)")
    assert indexes["idx_messages_user_conversation_seq"].endswith(
        "USING btree (user_id, conversation_id, seq)"
    )
    assert "idx_messages_conversation_id" not in indexes
    # A prefix of the primary key (user_id, id); it offered the planner a heap scan of a big
    # user's rows priced level with the covering index's index-only scan (migration 0017).
    assert "idx_messages_user_id" not in indexes
    # Per scope (migration 0019): the unscoped memory (NULLs) is one scope.
    assert indexes["uq_memory_items_user_content_hash"].endswith(
        "USING btree (user_id, content_hash, agent_id, run_id) NULLS NOT DISTINCT "
        "WHERE (valid_to IS NULL)"
    )
    assert "UNIQUE" in indexes["uq_memory_items_user_content_hash"]
    assert indexes["idx_memory_items_current"].endswith(
        "USING btree (user_id) WHERE ((deleted_at IS NULL) AND (valid_to IS NULL))"
    )
    assert "UNIQUE" in indexes["uq_memory_items_supersedes_id"]


# -- migrations round trip, on a throwaway server (the shared one must stay at head) ----------


@pytest.fixture(scope="module")
def scratch_pg() -> Iterator[EmbeddedPostgres]:
    with temporary_postgres(migrate=False) as server:
        yield server


async def _public_tables(url: str) -> set[str]:
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            rows = await connection.scalars(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
            )
            return set(rows)
    finally:
        await engine.dispose()


async def test_upgrade_downgrade_reupgrade_and_no_drift(scratch_pg: EmbeddedPostgres) -> None:
    url = scratch_pg.url
    cfg = alembic_config(url)
    # env.py runs its own event loop, so Alembic commands go to a worker thread.
    await asyncio.to_thread(upgrade_head, url)
    assert {"conversations", "messages", "memory_items"} <= await _public_tables(url)
    await asyncio.to_thread(command.downgrade, cfg, "base")
    assert await _public_tables(url) == {"alembic_version"}
    await asyncio.to_thread(upgrade_head, url)
    tables = await _public_tables(url)
    assert {
        "conversations",
        "messages",
        "memory_items",
        "search_postings",
        "search_stats",
    } <= tables
    # Raises AutogenerateDiffsDetected when the models and the migrated schema disagree.
    await asyncio.to_thread(command.check, cfg)


async def test_write_path_downgrade_keeps_valid_items_and_their_index(
    scratch_pg: EmbeddedPostgres,
) -> None:
    """0004_write_path down and up with data: closed versions and their postings go, the
    keyword statistics follow, valid items stay and get valid_from = created_at again."""
    url = scratch_pg.url
    await asyncio.to_thread(upgrade_head, url)
    old, new, other = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    engine = create_async_engine(url)
    insert = (
        "INSERT INTO memory_items (id, user_id, content, content_hash, type, embedding,"
        " embedding_model, created_at, valid_from, valid_to, supersedes_id)"
        " VALUES (:id, 'u4', :c, :h, 'fact', :v, 'm', :t, :t, :to, :sup)"
    )
    try:
        async with engine.begin() as c:
            for item_id, content, when, to, sup in [
                (old, "lives in Berlin", "2025-01-01", "2025-09-01", None),
                (new, "lives in Lisbon", "2025-09-01", None, old),
                (other, "lives in Berlin", "2026-01-01", None, None),  # stated again later
            ]:
                await c.execute(
                    text(insert),
                    {
                        "id": item_id,
                        "c": content,
                        "h": f"h-{content}",
                        "v": VECTOR_ZERO,
                        "t": datetime.fromisoformat(f"{when}T00:00:00+00:00"),
                        "to": None
                        if to is None
                        else datetime.fromisoformat(f"{to}T00:00:00+00:00"),
                        "sup": sup,
                    },
                )
                await c.execute(
                    text(
                        "INSERT INTO search_postings (user_id, lexeme, item_id, source, tf, dl)"
                        " VALUES ('u4', 'live', :i, 0, 1, 2), ('u4', :w, :i, 0, 1, 2)"
                    ),
                    {"i": item_id, "w": content.split()[-1].lower()},
                )
            await c.execute(
                text(
                    "INSERT INTO search_stats (user_id, doc_count, total_length)"
                    " VALUES ('u4', 3, 6)"
                )
            )
        await asyncio.to_thread(command.downgrade, alembic_config(url), "0003_rls")
        async with engine.connect() as c:
            ids = set(await c.scalars(text("SELECT id FROM memory_items WHERE user_id = 'u4'")))
            assert ids == {new, other}
            posted = set(
                await c.scalars(text("SELECT item_id FROM search_postings WHERE user_id = 'u4'"))
            )
            assert posted == {new, other}
            stats = (
                await c.execute(
                    text("SELECT doc_count, total_length FROM search_stats WHERE user_id = 'u4'")
                )
            ).one()
            assert tuple(stats) == (2, 4)
        await asyncio.to_thread(upgrade_head, url)
        async with engine.connect() as c:
            rows = (
                await c.execute(
                    text(
                        "SELECT count(*) FROM memory_items WHERE user_id = 'u4'"
                        " AND valid_from = created_at AND valid_to IS NULL"
                        " AND supersedes_id IS NULL"
                    )
                )
            ).scalar_one()
            assert rows == 2
    finally:
        await engine.dispose()


async def test_halfvec_migration_down_and_up_keeps_vectors_indexes_and_notes(
    scratch_pg: EmbeddedPostgres,
) -> None:
    """0017_halfvec_covering down and up with data: every vector keeps its (half-precision)
    values, a per-user ANN index (`pgrecall reindex`) keeps its name, condition and note, the
    covering indexes and the policies' subqueries go and come back."""
    url = scratch_pg.url
    await asyncio.to_thread(upgrade_head, url)
    engine = create_async_engine(url)
    rng = np.random.default_rng(17)
    values = rng.standard_normal(384).astype(np.float32)
    values /= np.linalg.norm(values)
    literal = vector_literal(values)
    conversation, message = uuid.uuid4(), uuid.uuid4()
    user_index = "idx_messages_embedding_u_test17"
    try:
        async with engine.begin() as c:
            await c.execute(
                text("INSERT INTO conversations (id, user_id, title) VALUES (:c, 'u17', 't')"),
                {"c": conversation},
            )
            await c.execute(
                text(
                    "INSERT INTO messages (id, conversation_id, user_id, role, content, embedding,"
                    " embedding_model, correlation_id) VALUES (:m, :c, 'u17', 'user', 'hi',"
                    " CAST(:v AS halfvec), 'm', :m)"
                ),
                {"m": message, "c": conversation, "v": literal},
            )
            await c.execute(
                text(
                    f"CREATE INDEX {user_index} ON messages USING ivfflat (embedding "
                    "halfvec_cosine_ops) WITH (lists = 1) WHERE user_id = 'u17'"
                )
            )
            await c.execute(text(f"COMMENT ON INDEX {user_index} IS 'built on 1 rows'"))

        async def state() -> tuple[str, str, str | None, list[float], set[str], int]:
            async with engine.connect() as c:
                kind = await c.scalar(
                    text(
                        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE"
                        " attrelid = 'messages'::regclass AND attname = 'embedding'"
                    )
                )
                definition, note = (
                    await c.execute(
                        text(
                            "SELECT pg_get_indexdef(oid), obj_description(oid, 'pg_class')"
                            " FROM pg_class WHERE relname = :n"
                        ),
                        {"n": user_index},
                    )
                ).one()
                stored = await c.scalar(
                    text("SELECT embedding::text FROM messages WHERE id = :m"), {"m": message}
                )
                names = set(await c.scalars(text("SELECT indexname FROM pg_indexes")))
                once = await c.scalar(
                    text(
                        "SELECT count(*) FROM pg_policy"
                        " WHERE pg_get_expr(polqual, polrelid) LIKE '%SELECT current_setting%'"
                    )
                )
            vector = [float(x) for x in stored.strip("[]").split(",")]
            return kind, definition, note, vector, names, int(once)

        half = as_stored(values)
        kind, definition, note, vector, names, once = await state()
        assert kind == "halfvec(384)" and "halfvec_cosine_ops" in definition
        assert note == "built on 1 rows" and once > 0
        assert {"idx_messages_user_vectors", "idx_message_passages_user_vectors"} <= names
        np.testing.assert_array_equal(np.array(vector, dtype=np.float32), half)

        await asyncio.to_thread(
            command.downgrade, alembic_config(url), "0016_messages_user_conversation"
        )
        kind, definition, note, vector, names, once = await state()
        assert kind == "vector(384)" and "vector_cosine_ops" in definition
        assert "WHERE ((user_id)::text = 'u17'::text)" in definition and note == "built on 1 rows"
        assert not {"idx_messages_user_vectors", "idx_message_passages_user_vectors"} & names
        assert once == 0
        np.testing.assert_array_equal(np.array(vector, dtype=np.float32), half)

        await asyncio.to_thread(upgrade_head, url)
        kind, definition, note, vector, names, once = await state()
        assert kind == "halfvec(384)" and "halfvec_cosine_ops" in definition
        assert note == "built on 1 rows" and once > 0
        assert {"idx_messages_user_vectors", "idx_message_passages_user_vectors"} <= names
        np.testing.assert_array_equal(np.array(vector, dtype=np.float32), half)
    finally:
        await engine.dispose()
