"""Half-precision vectors, index-only exact search, and policies that read their setting once.

The exact path of the query (a user of up to exact_search_max_items items) scores every vector
of the user. On a 5,520-turn user that scan was most of the query's Postgres time: one heap row
of about 1.8 kB per vector, row-level security's `current_setting` call per row, and the
vector's 1.5 kB read from memory (docs/performance.md, "Half-precision vectors and index-only
exact search"). Three changes, each kept where it helped in that measurement:

1. **halfvec.** `embedding` of messages, message_passages and memory_items becomes
   `halfvec(n)` (app/vectors.py): half the bytes per vector in the tables and in their ANN
   indexes. The ANN indexes (each table's own and `pgrecall reindex`'s per-user ones) are
   dropped, the columns converted, and every index made again under its name, with
   `halfvec_cosine_ops` and its comment (the row count `pgrecall reindex` notes).
2. **Covering indexes** (up to app/vectors.COVERING_MAX_DIMENSION dimensions):
   `idx_messages_user_vectors` on messages `(user_id, embedding_model) INCLUDE (id,
   embedding) WHERE embedding IS NOT NULL`, and `idx_message_passages_user_vectors` on
   passages `(user_id, embedding_model) INCLUDE (message_id, embedding)`: the exact path reads
   a user's vectors by an index-only scan, consecutive entries of its own, not a heap row each.
3. **Policies read their setting once per statement.** Every policy of the public schema that
   calls `current_setting(...)` calls it in a scalar subquery, `(SELECT current_setting(...))`:
   an InitPlan, evaluated once, instead of a call (a lookup of the setting by name) per row.
   The same rows pass. New policies should be written so.

The last step runs VACUUM (ANALYZE) on the three tables outside the migration's transaction:
the rewrite left no page marked all-visible, and an index-only scan reads the table for rows on
such pages. Afterwards autovacuum keeps the visibility map current as rows arrive.

Revision ID: 0017_halfvec_covering
Revises: 0016_messages_user_conversation
Create Date: 2026-11-27
"""

import re
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.vectors import COVERING_MAX_DIMENSION

revision: str = "0017_halfvec_covering"
down_revision: str | None = "0016_messages_user_conversation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("messages", "message_passages", "memory_items")
COVERING = {
    "idx_messages_user_vectors": (
        "messages (user_id, embedding_model) INCLUDE (id, embedding) WHERE embedding IS NOT NULL"
    ),
    "idx_message_passages_user_vectors": (
        "message_passages (user_id, embedding_model) INCLUDE (message_id, embedding)"
    ),
}
# As pg_get_expr prints a policy's call, and the same call in a scalar subquery.
_CALL = re.compile(r"current_setting\('([a-z_.]+)'::text, true\)")
_WRAPPED = re.compile(r"\( SELECT current_setting\('([a-z_.]+)'::text, true\) AS current_setting\)")


def _ddl(sql: str) -> None:
    """A statement built from catalog text (index definitions, comments, policy expressions),
    sent as it is: text() would read a `:word` in a quoted user id as a bind parameter."""
    op.get_bind().exec_driver_sql(sql)


def _dimension() -> int:
    """The vectors' width (a vector's and a halfvec's atttypmod is their dimension)."""
    sql = (
        "SELECT atttypmod FROM pg_attribute "
        "WHERE attrelid = CAST('messages' AS regclass) AND attname = 'embedding'"
    )
    return int(op.get_bind().execute(text(sql)).scalar_one())


def _ann_indexes() -> list[tuple[str, str, str | None]]:
    """(name, definition, comment) of every ivfflat and HNSW index on the three tables."""
    sql = (
        "SELECT c.relname, pg_get_indexdef(i.indexrelid), "
        "obj_description(i.indexrelid, 'pg_class') "
        "FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid "
        "JOIN pg_am AS a ON a.oid = c.relam WHERE a.amname IN ('ivfflat', 'hnsw') "
        "AND i.indrelid = ANY (CAST(ARRAY['messages', 'message_passages', 'memory_items'] "
        "AS regclass[])) ORDER BY c.relname"
    )
    return [(r[0], r[1], r[2]) for r in op.get_bind().execute(text(sql))]


def _convert(to_type: str, from_ops: str, to_ops: str) -> None:
    indexes = _ann_indexes()
    dimension = _dimension()
    # ivfflat's k-means samples 50 vectors per list; enough for a 1M-row table's 1000 lists.
    op.execute("SET LOCAL maintenance_work_mem = '512MB'")
    for name, _, _ in indexes:
        op.execute(f'DROP INDEX "{name}"')
    for table in TABLES:
        # STORAGE PLAIN as migration 0001 made it (vectors inline, never TOAST), in the same
        # statement: the rewrite itself must not move a wide vector out of line.
        op.execute(
            f"ALTER TABLE {table} ALTER COLUMN embedding TYPE {to_type}({dimension}) "
            f"USING embedding::{to_type}({dimension}), ALTER COLUMN embedding SET STORAGE PLAIN"
        )
    for name, definition, comment in indexes:
        _ddl(definition.replace(f" {from_ops}", f" {to_ops}"))
        if comment is not None:
            _ddl(f'COMMENT ON INDEX "{name}" IS \'' + comment.replace("'", "''") + "'")


def _policies(pattern: re.Pattern[str], replacement: str) -> None:
    rows = op.get_bind().execute(
        text(
            "SELECT p.polname, c.relname, pg_get_expr(p.polqual, p.polrelid), "
            "pg_get_expr(p.polwithcheck, p.polrelid) FROM pg_policy AS p "
            "JOIN pg_class AS c ON c.oid = p.polrelid JOIN pg_namespace AS n "
            "ON n.oid = c.relnamespace WHERE n.nspname = 'public' ORDER BY c.relname, p.polname"
        )
    )
    for name, table, using, check in rows.all():
        clauses = []
        if using is not None and pattern.search(using):
            clauses.append(f"USING ({pattern.sub(replacement, using)})")
        if check is not None and pattern.search(check):
            clauses.append(f"WITH CHECK ({pattern.sub(replacement, check)})")
        if clauses:
            _ddl(f'ALTER POLICY "{name}" ON {table} ' + " ".join(clauses))


def _vacuum() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.execute(f"VACUUM (ANALYZE) {table}")


def upgrade() -> None:
    _convert("halfvec", "vector_cosine_ops", "halfvec_cosine_ops")
    if _dimension() <= COVERING_MAX_DIMENSION:
        for name, target in COVERING.items():
            op.execute(f"CREATE INDEX {name} ON {target}")
    _policies(_CALL, r"(SELECT current_setting('\1'::text, true))")
    _vacuum()


def downgrade() -> None:
    _policies(_WRAPPED, r"current_setting('\1'::text, true)")
    for name in COVERING:
        op.execute(f"DROP INDEX IF EXISTS {name}")
    _convert("vector", "halfvec_cosine_ops", "vector_cosine_ops")
    _vacuum()
