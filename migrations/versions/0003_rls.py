"""Row-level security on every table holding user data.

Each table gets ENABLE and FORCE ROW LEVEL SECURITY (FORCE: the owner is bound too, unless it is
a superuser or BYPASSRLS) and two permissive policies, OR-ed by Postgres:

- `<table>_user`: rows whose user_id is the transaction's `pgrecall.user_id` setting. app/db.py
  sets it with set_config(..., true) (transaction-local) at the start of every transaction of a
  user-scoped session. Unset or empty matches no row.
- `<table>_admin`: every row while `pgrecall.admin` is 'on', which only the audited admin code
  paths set (app/db.py: admin_sessions).

Every table listed carries user_id itself (messages has it denormalised from its conversation),
so no policy needs a join. Adding a table is one line in TABLES (and in app/roles.py).

Revision ID: 0003_rls
Revises: 0002_api_keys
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003_rls"
down_revision: str | None = "0002_api_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = (
    "conversations",
    "messages",
    "memory_items",
    "search_postings",
    "search_stats",
    "api_keys",
)
# Authentication reads a key before it knows the user: one row, found by its token hash, which
# the key-lookup scope (app/db.py: key_lookup_session) sets transaction-locally.
KEY_MATCH = "key_hash = current_setting('pgrecall.key_hash', true)"
USER_MATCH = "user_id = current_setting('pgrecall.user_id', true)"
ADMIN_MODE = "current_setting('pgrecall.admin', true) = 'on'"


def upgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")
        op.execute(
            f"CREATE POLICY {table}_user ON {table} USING ({USER_MATCH}) WITH CHECK ({USER_MATCH})"
        )
        op.execute(
            f"CREATE POLICY {table}_admin ON {table} USING ({ADMIN_MODE}) WITH CHECK ({ADMIN_MODE})"
        )
    op.execute(f"CREATE POLICY api_keys_lookup ON api_keys FOR SELECT USING ({KEY_MATCH})")
    op.execute(
        f"CREATE POLICY api_keys_touch ON api_keys FOR UPDATE USING ({KEY_MATCH}) "
        f"WITH CHECK ({KEY_MATCH})"
    )


def downgrade() -> None:
    op.execute("DROP POLICY IF EXISTS api_keys_touch ON api_keys")
    op.execute("DROP POLICY IF EXISTS api_keys_lookup ON api_keys")
    for table in reversed(TABLES):
        op.execute(f"DROP POLICY IF EXISTS {table}_admin ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_user ON {table}")
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
