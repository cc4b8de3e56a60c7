"""Shared spaces on a Citus cluster: the space policies there too; row-level security on spaces.

Issue 43. Migration 0019 made no space policy where Citus is installed (the workers had no
space_members to read a grant from), so no space was readable there. Now `pgrecall db
distribute` makes `spaces` and `space_members` reference tables (a copy on every node) and has
`pgrecall_scope_spaces()` read the grants from the copy on the node that runs a shard's
statement (app/citus/, docs/scaling.md). This migration gives memory_items, search_postings
and search_stats the same two permissive policies as 0019 does off Citus (`<table>_space_read`,
`<table>_space_write`), in the per-row form (Citus refuses a subquery in a policy of a
distributed table), on the coordinator's tables alone: Citus 13 cannot forward a policy holding a
function call to the shards ("unrecognized node type"), so `pgrecall db distribute`, run after
every upgrade, gives each shard its table's policies (app/citus/policies.py:
sync_shard_policies). Until it runs, the shards keep no space policy: no space is readable
there, as before.

Off Citus these policies exist already (0019).

Everywhere: `spaces` gets forced row-level security with one policy, the admin role's
(`spaces_admin`), so the service role's DELETE privilege on it (app/roles.py grant_statements)
admits no row. Citus needs that privilege: deleting a member's grant (a purge, a member
leaving) locks the shard of spaces, the table space_members refers to, and Citus refuses the
lock to a role that could not modify spaces ("permission denied for table spaces", measured
on the cluster as the service role). The downgrade takes the privilege back from every role
but the owner and the admin role, with the row-level security.

Revision ID: 0020_spaces_on_citus
Revises: 0019_memory_scopes
Create Date: 2026-12-05
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.roles import ADMIN_ROLE

revision: str = "0020_spaces_on_citus"
down_revision: str | None = "0019_memory_scopes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SPACE_TABLES = ("memory_items", "search_postings", "search_stats")
# The tables with agent and run scope columns (migration 0019's SCOPED_TABLES).
SCOPED_TABLES = ("memory_items",)

# Migration 0019's function, as it made it: `distribute` points it at the reference table's
# copy on each node; the downgrade puts it back.
SCOPE_SPACES_FUNCTION = """
CREATE OR REPLACE FUNCTION pgrecall_scope_spaces(writes boolean) RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $fn$
    SELECT coalesce(array_agg('space:' || m.space_id), '{}')
      FROM space_members AS m
     WHERE m.user_id = pgrecall_scope_user() AND (NOT writes OR m.access = 'write')
$fn$
"""


def _named(setting: str, column: str) -> str:
    """Migration 0019's scope match of one setting (comparisons, IS NULL, AND and OR only)."""
    value = f"current_setting('pgrecall.{setting}', true)"
    own = "current_setting('pgrecall.scope_own', true)"
    not_own = f"({own} IS NULL OR {own} <> 'on')"
    return (
        f"({value} IS NULL OR {value} = '' OR {column} = {value} "
        f"OR ({column} IS NULL AND {not_own}))"
    )


SCOPE_MATCH = f"{_named('agent_id', 'agent_id')} AND {_named('run_id', 'run_id')}"
SPACE_READ = "user_id = ANY (coalesce(pgrecall_scope_spaces(false), '{}'))"
SPACE_WRITE = "user_id = ANY (coalesce(pgrecall_scope_spaces(true), '{}'))"


def _citus() -> bool:
    sql = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
    return bool(op.get_bind().execute(text(sql)).scalar_one())


def upgrade() -> None:
    citus = _citus()
    if citus:
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    op.execute("ALTER TABLE spaces ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE spaces FORCE ROW LEVEL SECURITY")
    op.execute(
        f"CREATE POLICY spaces_admin ON spaces TO {ADMIN_ROLE} USING (true) WITH CHECK (true)"
    )
    if not citus:
        return
    op.execute("SET LOCAL citus.enable_ddl_propagation TO off")
    for table in SPACE_TABLES:
        scoped = f" AND {SCOPE_MATCH}" if table in SCOPED_TABLES else ""
        read, write = f"{SPACE_READ}{scoped}", f"{SPACE_WRITE}{scoped}"
        op.execute(f"DROP POLICY IF EXISTS {table}_space_read ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_space_write ON {table}")
        op.execute(f"CREATE POLICY {table}_space_read ON {table} FOR SELECT USING ({read})")
        op.execute(
            f"CREATE POLICY {table}_space_write ON {table} USING ({write}) WITH CHECK ({write})"
        )
    op.execute("SET LOCAL citus.enable_ddl_propagation TO on")


def downgrade() -> None:
    citus = _citus()
    if citus:
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    # Without row-level security a DELETE privilege on spaces would delete every space.
    holders = op.get_bind().execute(
        text(
            "SELECT DISTINCT quote_ident(r.rolname) FROM pg_class AS c, aclexplode(c.relacl) AS a "
            "JOIN pg_roles AS r ON r.oid = a.grantee WHERE c.oid = 'spaces'::regclass "
            "AND a.privilege_type = 'DELETE' AND r.oid <> c.relowner AND r.rolname <> :admin"
        ),
        {"admin": ADMIN_ROLE},
    )
    for role in holders.scalars():
        op.execute(f"REVOKE DELETE ON spaces FROM {role}")
    op.execute("DROP POLICY spaces_admin ON spaces")
    op.execute("ALTER TABLE spaces NO FORCE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE spaces DISABLE ROW LEVEL SECURITY")
    if not citus:
        return
    op.execute("SET LOCAL citus.enable_ddl_propagation TO off")
    for table in SPACE_TABLES:
        op.execute(f"DROP POLICY IF EXISTS {table}_space_read ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_space_write ON {table}")
    op.execute("SET LOCAL citus.enable_ddl_propagation TO on")
    # The function reads space_members again (0019's form), on every node (it is distributed).
    op.execute(SCOPE_SPACES_FUNCTION)
