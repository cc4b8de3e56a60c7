"""The user_id scope checker (tests/sql_scope.py) on statements it must pass and must reject."""

from __future__ import annotations

import pytest

from tests.sql_scope import copy_violations, violations

PINNED = [
    "SELECT * FROM memory_items WHERE user_id = $1",
    "SELECT * FROM memory_items AS m WHERE m.id = $2 AND m.user_id = CAST($1 AS text)",
    "SELECT m.id FROM messages AS m JOIN conversations AS c ON c.id = m.conversation_id "
    "WHERE m.user_id = :u AND c.user_id = m.user_id",
    "WITH x AS (SELECT item_id FROM search_postings WHERE user_id = $1) SELECT * FROM x",
    "SELECT 1 FROM x WHERE EXISTS (SELECT 1 FROM memory_items m WHERE m.user_id = 'a')",
    "UPDATE memory_items SET importance = 1 WHERE id = $1 AND user_id = $2",
    "DELETE FROM search_postings WHERE user_id = $1 AND item_id = ANY($2)",
    "INSERT INTO search_stats (user_id, doc_count) VALUES ($1, 1)",
    "SELECT p.id FROM messages AS c CROSS JOIN LATERAL (SELECT p.id FROM messages AS p "
    "WHERE p.user_id = $1 AND p.seq < c.seq) AS p WHERE c.user_id = $1",
    "SELECT a FROM memory_items WHERE user_id = $1 "
    "UNION ALL SELECT a FROM messages WHERE user_id = $1",
    "SELECT 1 FROM pg_class WHERE relname = 'memory_items'",
]

UNPINNED = [
    "SELECT * FROM memory_items WHERE id = $1",
    "SELECT * FROM memory_items WHERE user_id = $1 OR id = $2",
    "SELECT * FROM memory_items WHERE user_id = ANY($1)",
    "SELECT * FROM memory_items WHERE user_id <> $1",
    "SELECT m.id FROM messages AS m JOIN conversations AS c ON c.id = m.conversation_id "
    "WHERE m.user_id = :u",
    "SELECT m.id FROM messages AS m, memory_items AS i WHERE user_id = $1",
    "SELECT 1 FROM x WHERE EXISTS (SELECT 1 FROM memory_items m WHERE m.id = x.id)",
    "WITH x AS (SELECT item_id FROM search_postings) SELECT * FROM x",
    "UPDATE memory_items SET importance = 1 WHERE id = $1",
    "DELETE FROM search_postings USING search_stats WHERE search_postings.user_id = $1",
    "INSERT INTO search_stats (doc_count) VALUES (1)",
    "ANALYZE memory_items",
    "CREATE INDEX i ON messages USING ivfflat (embedding vector_cosine_ops)",
    "SELECT a FROM memory_items WHERE user_id = $1 UNION ALL SELECT a FROM messages",
]


@pytest.mark.parametrize("sql", PINNED)
def test_pinned_statements_pass(sql: str) -> None:
    assert violations(sql.replace(":u", "$9")) == []


@pytest.mark.parametrize("sql", UNPINNED)
def test_unpinned_statements_are_reported(sql: str) -> None:
    assert violations(sql.replace(":u", "$9"))


def test_copy_needs_user_id() -> None:
    assert copy_violations("memory_items", ("id", "user_id")) == []
    assert copy_violations("memory_items", ("id", "content"))
    assert copy_violations("pg_temp_table", ("id",)) == []
