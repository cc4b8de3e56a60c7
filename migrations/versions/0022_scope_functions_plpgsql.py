"""The scope functions in PL/pgSQL on Postgres before 18: their plans kept for the session.

Issue 42 and 43. Every row-level security policy calls `pgrecall_scope_user()` (the signed user,
migration 0018) and the space policies `pgrecall_scope_spaces()` (migration 0019), once per
table a statement reads. Both are SQL functions that Postgres cannot inline (SECURITY DEFINER,
SET search_path), and before Postgres 18 such a function's body is parsed and planned again at
every call site of every statement: on PostgreSQL 15.20 a call of `pgrecall_scope_user()` took
86 µs and one of `pgrecall_scope_spaces()` 138 µs (pgbench, twenty calls per statement, each in
its own scalar subquery). A PL/pgSQL function keeps its statement's plan for the session: 11 µs
and 23 µs. So on a server before 18 both become PL/pgSQL with the same bodies; Postgres 18
caches the plans of SQL functions itself (7 µs and 14 µs there, 0021's figures), where the
PL/pgSQL form measured slower, and they stay SQL (docs/performance.md, "The scope functions").

Citus 13 runs on Postgres 15 to 17: the functions change on every node (they are distributed),
and `pgrecall db distribute`, run after every upgrade, points the spaces function at
space_members' copy on each node in the same language (app/citus/policies.py).

Revision ID: 0022_scope_functions_plpgsql
Revises: 0021_space_grants_once
Create Date: 2026-12-06
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.roles import CACHES_SQL_FUNCTIONS, SERVER_VERSION, scope_function

revision: str = "0022_scope_functions_plpgsql"
down_revision: str | None = "0021_space_grants_once"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Migration 0019's query (the message signed: the user alone, or the user and its scope).
SCOPE_USER_QUERY = """
    SELECT s.user_id
      FROM (SELECT current_setting('pgrecall.user_id', true) AS user_id,
                   current_setting('pgrecall.user_sig', true) AS sig,
                   concat_ws(chr(31), coalesce(current_setting('pgrecall.agent_id', true), ''),
                             coalesce(current_setting('pgrecall.run_id', true), ''),
                             coalesce(current_setting('pgrecall.scope_own', true), ''))
                       AS scope) AS s,
           pgrecall_scope_key AS k
     WHERE s.user_id <> ''
       AND s.sig = encode(sha256(k.outer_pad || sha256(k.inner_pad || convert_to(
           CASE WHEN s.scope = chr(31) || chr(31) THEN s.user_id
                ELSE s.user_id || chr(31) || s.scope END, 'UTF8'))), 'hex')
"""
# Migration 0021's query.
SCOPE_SPACES_QUERY = """
    SELECT coalesce(array_agg('space:' || m.space_id), '{}')
      FROM space_members AS m
     WHERE m.user_id = (SELECT pgrecall_scope_user()) AND (NOT writes OR m.access = 'write')
"""


def scope_functions(plpgsql: bool) -> list[str]:
    """CREATE OR REPLACE of both functions, in PL/pgSQL (`plpgsql`) or SQL, same queries."""
    return [
        scope_function("pgrecall_scope_user()", "text", SCOPE_USER_QUERY, plpgsql),
        scope_function(
            "pgrecall_scope_spaces(writes boolean)", "text[]", SCOPE_SPACES_QUERY, plpgsql
        ),
    ]


def _before_18() -> bool:
    version = op.get_bind().execute(text(SERVER_VERSION))
    return int(version.scalar_one()) < CACHES_SQL_FUNCTIONS


def _replace(plpgsql: bool) -> None:
    if not _before_18():
        return
    citus = op.get_bind().execute(
        text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")
    ).scalar_one()
    if citus:
        # the distributed functions change on every node over one connection each, as after
        # the other migrations' changes in the same transaction (0019, 0020)
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    for statement in scope_functions(plpgsql):
        op.execute(statement)


def upgrade() -> None:
    _replace(plpgsql=True)


def downgrade() -> None:
    _replace(plpgsql=False)
