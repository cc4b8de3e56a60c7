"""Half-precision vectors and index-only exact search.

The exact path of the query (a user of up to exact_search_max_items items) scores every vector
of the user. On a 5,520-turn user that scan was most of the query's Postgres time: one heap row
of about 1.8 kB per vector and the vector's 1.5 kB read from memory (docs/performance.md,
"Half-precision vectors and index-only exact search"). Three changes:

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
   `idx_messages_user_id` goes: it is a prefix of the primary key `(user_id, id)`, and on a
   freshly built store the planner priced its heap-order scan of a 5,520-turn user's rows level
   with the index-only scan and chose it (docs/performance.md).

3. **Policies read their setting once per statement** (app/roles.policy_rewrites): every
   `current_setting(...)` of a policy in a scalar subquery, an InitPlan, instead of a lookup of
   the setting by name on every row. Not where Citus is installed: it refuses a subquery in a
   policy of a distributed table (`pgrecall citus distribute` puts a store migrated without
   Citus back to the per-row form before it distributes).

On Citus, the shards of a distributed table keep the halfvec type's default storage: Citus does
not forward SET STORAGE (docs/scaling.md).

An index-only scan reads the table for every row on a page not marked all-visible, and only
VACUUM marks pages so. The last step runs VACUUM (ANALYZE) on the three tables outside the
migration's transaction (the rewrite left no page marked), and messages and passages get
`autovacuum_vacuum_insert_scale_factor = 0.01`: autovacuum visits them after 1,000 + 1 % new
rows instead of 1,000 + 20 % (the default), so the newest turns, the ones asked about most, are
read from the index too. A vacuum after inserts reads only the pages not yet marked.

Revision ID: 0017_halfvec_covering
Revises: 0016_messages_user_conversation
Create Date: 2026-11-27
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.roles import POLICIES, policy_rewrites
from app.vectors import COVERING_MAX_DIMENSION

revision: str = "0017_halfvec_covering"
down_revision: str | None = "0016_messages_user_conversation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("messages", "message_passages", "memory_items")
INSERT_VACUUMED = ("messages", "message_passages")
COVERING = {
    "idx_messages_user_vectors": (
        "messages (user_id, embedding_model) INCLUDE (id, embedding) WHERE embedding IS NOT NULL"
    ),
    "idx_message_passages_user_vectors": (
        "message_passages (user_id, embedding_model) INCLUDE (message_id, embedding)"
    ),
}


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


def _convert(to_type: str, from_ops: str, to_ops: str, *, citus: bool) -> int:
    """The columns to `to_type`, their ANN indexes made again; returns the dimension."""
    indexes = _ann_indexes()
    dimension = _dimension()
    # ivfflat's k-means samples 50 vectors per list; enough for a 1M-row table's 1000 lists.
    op.execute("SET LOCAL maintenance_work_mem = '512MB'")
    for name, _, _ in indexes:
        op.execute(f'DROP INDEX "{name}"')
    for table in TABLES:
        change = (
            f"ALTER TABLE {table} ALTER COLUMN embedding TYPE {to_type}({dimension}) "
            f"USING embedding::{to_type}({dimension})"
        )
        # STORAGE PLAIN as migration 0001 made it (vectors inline, never TOAST), in the same
        # statement: the rewrite itself must not move a wide vector out of line. Citus does not
        # forward SET STORAGE to a distributed table's shards (docs/scaling.md): where it is
        # installed, the type alone, and the type's default storage.
        plain = "" if citus else ", ALTER COLUMN embedding SET STORAGE PLAIN"
        op.execute(change + plain)
    for name, definition, comment in indexes:
        _ddl(definition.replace(f" {from_ops}", f" {to_ops}"))
        if comment is not None:
            _ddl(f'COMMENT ON INDEX "{name}" IS \'' + comment.replace("'", "''") + "'")
    return dimension


def _citus() -> bool:
    sql = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
    return bool(op.get_bind().execute(text(sql)).scalar_one())


def _policies(*, once: bool) -> None:
    for statement in policy_rewrites(op.get_bind().execute(POLICIES).all(), once=once):
        _ddl(statement)


def _vacuum() -> None:
    with op.get_context().autocommit_block():
        for table in TABLES:
            op.execute(f"VACUUM (ANALYZE) {table}")


def upgrade() -> None:
    citus = _citus()
    dimension = _convert("halfvec", "vector_cosine_ops", "halfvec_cosine_ops", citus=citus)
    if dimension <= COVERING_MAX_DIMENSION:
        for name, target in COVERING.items():
            op.execute(f"CREATE INDEX {name} ON {target}")
    op.execute("DROP INDEX IF EXISTS idx_messages_user_id")
    for table in INSERT_VACUUMED:
        op.execute(f"ALTER TABLE {table} SET (autovacuum_vacuum_insert_scale_factor = 0.01)")
    if not citus:
        _policies(once=True)
    _vacuum()


def downgrade() -> None:
    _policies(once=False)
    for table in INSERT_VACUUMED:
        op.execute(f"ALTER TABLE {table} RESET (autovacuum_vacuum_insert_scale_factor)")
    for name in COVERING:
        op.execute(f"DROP INDEX IF EXISTS {name}")
    op.execute("CREATE INDEX IF NOT EXISTS idx_messages_user_id ON messages (user_id)")
    _convert("vector", "halfvec_cosine_ops", "vector_cosine_ops", citus=_citus())
    _vacuum()
