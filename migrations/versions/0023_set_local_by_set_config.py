"""`pgrecall_set_local` by one set_config() statement where Citus is not loaded.

Issue 43. Every transaction of the service begins with `pgrecall_set_local(names, values)`
(migration 0010): the signed user, its scope and the read path's planner settings, SET LOCAL.
Its loop ran one dynamic `EXECUTE 'SET LOCAL ...'` per setting, each parsed and planned anew,
plus a subquery quoting the name's parts: 0.2 ms of the server's time for the seven settings of
a read transaction, where the BEGIN and COMMIT around it take 0.1 (pgbench, PostgreSQL 18.6, on
the 2-vCPU bench machine). A query that reads shared spaces runs two such transactions.

`set_config(name, value, true)` is SET LOCAL (the same transaction-local setting, the same
checks of name and value), and one statement sets every pair: 0.04 ms over BEGIN and COMMIT.
It stays on the server it runs on, though: a Citus coordinator forwards SET LOCAL to its worker
connections (with `citus.propagate_set_commands = 'local'`), not set_config(). So where Citus is
loaded (a coordinator, or a worker the direct reads begin on) the function runs its loop as
before; elsewhere the one statement.

Revision ID: 0023_set_local_by_set_config
Revises: 0022_scope_functions_plpgsql
Create Date: 2026-12-07
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0023_set_local_by_set_config"
down_revision: str | None = "0022_scope_functions_plpgsql"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Migration 0010's loop: SET LOCAL of each pair, names quoted as identifiers, values as literals.
_LOOP = """
    FOR i IN 1 .. coalesce(array_length(names, 1), 0) LOOP
        EXECUTE format(
            'SET LOCAL %s = %L',
            (SELECT string_agg(quote_ident(part), '.')
               FROM unnest(string_to_array(names[i], '.')) AS part),
            vals[i]
        );
    END LOOP;"""

# Where Citus is loaded, and what makes it forward the SET LOCALs to the worker connections.
_CITUS = "current_setting('citus.propagate_set_commands', true) IS NOT NULL"
_PROPAGATE = "SET LOCAL citus.propagate_set_commands = 'local';"


def _function(body: str) -> str:
    """CREATE OR REPLACE of pgrecall_set_local with `body` between its BEGIN and END."""
    return f"""
CREATE OR REPLACE FUNCTION pgrecall_set_local(names text[], vals text[]) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
    i int;
BEGIN{body}
END
$fn$
"""


# The loop where Citus is loaded (it forwards SET LOCAL, not set_config()), else one statement.
SET_LOCAL_FUNCTION = _function(f"""
    IF {_CITUS} THEN
        {_PROPAGATE}{_LOOP}
    ELSE
        PERFORM set_config(s.name, s.value, true) FROM unnest(names, vals) AS s(name, value);
    END IF;""")
# Migration 0010's: the loop everywhere.
OLD_SET_LOCAL_FUNCTION = _function(f"""
    IF {_CITUS} THEN
        {_PROPAGATE}
    END IF;{_LOOP}""")


def _replace(function: str) -> None:
    citus = (
        op.get_bind()
        .execute(text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'"))
        .scalar_one()
    )
    if citus:
        # a distributed function changes on every node, over one connection each (as in 0022)
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
    op.execute(function)


def upgrade() -> None:
    _replace(SET_LOCAL_FUNCTION)


def downgrade() -> None:
    _replace(OLD_SET_LOCAL_FUNCTION)
