"""Space policies that cost a read of a space less: the grants read once per call, and the write
grants only where a statement writes.

Issue 43. Two changes, neither to who may see or change what:

- `pgrecall_scope_spaces()` compared each `space_members` row with a call of
  `pgrecall_scope_user()`: on a sequential scan (a small table, or any table the planner reads
  whole) the user's signature was checked once per membership row it read, 31 checks for 30
  rows (tests/test_rls_scopes.py counts them); now once per call (a scalar subquery). The
  function runs once per table a statement reads a space's rows from.
- `<table>_space_write` applied to every command (FOR ALL), SELECT included, so every read of a
  space's rows also computed the caller's write grants. It is now three policies,
  `<table>_space_insert`, `<table>_space_update` and `<table>_space_delete`, with the same
  expression: reads check the read grants alone (`<table>_space_read`, which a write grant
  satisfies too, as before).

Off Citus the policies read their settings and calls once per statement, as 0019's do
(app/roles.policy_rewrites). On Citus the policies change on the coordinator's tables alone
(Citus 13 cannot forward a policy holding a function call) and the function in 0019's form
(reading `space_members`): `pgrecall db distribute`, run after every upgrade, gives the shards
their tables' policies and points the function at the reference table's copy on each node
(app/citus/policies.py), as after 0020.

Revision ID: 0021_space_grants_once
Revises: 0020_spaces_on_citus
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.roles import POLICIES, policy_rewrites

revision: str = "0021_space_grants_once"
down_revision: str | None = "0020_spaces_on_citus"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SPACE_TABLES = ("memory_items", "search_postings", "search_stats")
# The tables with agent and run scope columns (migration 0019's SCOPED_TABLES).
SCOPED_TABLES = ("memory_items",)

_FUNCTION = """
CREATE OR REPLACE FUNCTION pgrecall_scope_spaces(writes boolean) RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $fn$
    SELECT coalesce(array_agg('space:' || m.space_id), '{}')
      FROM space_members AS m
     WHERE m.user_id = %s AND (NOT writes OR m.access = 'write')
$fn$
"""
SCOPE_SPACES_FUNCTION = _FUNCTION % "(SELECT pgrecall_scope_user())"
OLD_SCOPE_SPACES_FUNCTION = _FUNCTION % "pgrecall_scope_user()"


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
SPACE_WRITE = "user_id = ANY (coalesce(pgrecall_scope_spaces(true), '{}'))"
# The write policies of a space: each command's, with 0019's expression.
WRITES = {
    "insert": "FOR INSERT WITH CHECK ({w})",
    "update": "FOR UPDATE USING ({w}) WITH CHECK ({w})",
    "delete": "FOR DELETE USING ({w})",
}


def _citus() -> bool:
    sql = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
    return bool(op.get_bind().execute(text(sql)).scalar_one())


def _write(table: str) -> str:
    return f"{SPACE_WRITE} AND {SCOPE_MATCH}" if table in SCOPED_TABLES else SPACE_WRITE


def _policies(citus: bool, make: list[str]) -> None:
    """Run `make` (policy statements) on the coordinator's tables alone where Citus is
    installed; off Citus then read every policy's settings and calls once per statement."""
    if citus:
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
        op.execute("SET LOCAL citus.enable_ddl_propagation TO off")
    for statement in make:
        op.execute(statement)
    if citus:
        op.execute("SET LOCAL citus.enable_ddl_propagation TO on")
    else:
        for statement in policy_rewrites(op.get_bind().execute(POLICIES).all(), once=True):
            op.get_bind().exec_driver_sql(statement)


def upgrade() -> None:
    citus = _citus()
    make = []
    for table in SPACE_TABLES:
        make.append(f"DROP POLICY IF EXISTS {table}_space_write ON {table}")
        w = _write(table)
        make += [
            f"CREATE POLICY {table}_space_{command} ON {table} {form.format(w=w)}"
            for command, form in WRITES.items()
        ]
    _policies(citus, make)
    op.execute(SCOPE_SPACES_FUNCTION)


def downgrade() -> None:
    citus = _citus()
    make = []
    for table in SPACE_TABLES:
        make += [f"DROP POLICY IF EXISTS {table}_space_{command} ON {table}" for command in WRITES]
        w = _write(table)
        make.append(f"CREATE POLICY {table}_space_write ON {table} USING ({w}) WITH CHECK ({w})")
    _policies(citus, make)
    op.execute(OLD_SCOPE_SPACES_FUNCTION)
