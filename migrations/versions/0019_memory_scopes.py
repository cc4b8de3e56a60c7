"""Memory scopes: an agent's and a run's memory within a user's, and shared spaces with grants.

Issue 43. After this migration:

- **Agent and run scopes.** `conversations`, `messages` and `memory_items` carry `agent_id` and
  `run_id` (NULL: the user's unscoped memory). Their default is the transaction's
  `pgrecall.agent_id` / `pgrecall.run_id` setting, so every write a scoped request makes is
  stamped with its scope, whatever path writes it. Their user policy (`<table>_user`) now also
  hides from a request that names an agent every row of another agent, and from one that names
  a run every row of another run; with `pgrecall.scope_own = 'on'` also the unscoped rows
  (an agent asking for its own memory only). The scope settings are covered by the user's
  signature (`pgrecall_scope_user()` below): a statement that changes them sees no row at all.
- **Shared spaces.** `spaces` and `space_members` (a user's `read` or `write` grant). A
  space's memories are rows whose `user_id` is `space:<id>` (user ids may not start with
  `space:`; app/schemas/user_id.py), so a space is its own distribution key on Citus and its
  own keyword statistics. Two permissive policies on memory_items, search_postings and
  search_stats let a member read (`<table>_space_read`) or write (`<table>_space_write`) the
  spaces `pgrecall_scope_spaces()` returns for the signed user: read at every statement, so a
  revoked grant is effective on the next one. The service role may read and delete its user's
  own membership rows only; spaces are managed by the admin role. Where Citus is installed this
  migration makes no space policy (the workers had no space_members to read a grant from):
  migration 0020 makes them there, and `pgrecall db distribute` makes spaces and space_members
  reference tables whose copy on each node the function reads (docs/scaling.md, "Shared spaces
  on Citus").
- The uniqueness of a valid memory's text (and of a store address) is per scope.

Revision ID: 0019_memory_scopes
Revises: 0018_admin_role
Create Date: 2026-12-05
"""

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.roles import ADMIN_ROLE, POLICIES, policy_rewrites

revision: str = "0019_memory_scopes"
down_revision: str | None = "0018_admin_role"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPED_TABLES = ("conversations", "messages", "memory_items")
SPACE_TABLES = ("memory_items", "search_postings", "search_stats")
ID_LENGTH = 255

# The message signed: the user alone when no scope setting is made (as migration 0018 signed
# it), else the user, agent, run and own flag joined by the unit separator (ids are printable
# ASCII: they cannot hold it). app/db.py ScopeKey.sign builds the same bytes.
SCOPE_USER_FUNCTION = """
CREATE OR REPLACE FUNCTION pgrecall_scope_user() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $fn$
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
$fn$
"""

OLD_SCOPE_USER_FUNCTION = """
CREATE OR REPLACE FUNCTION pgrecall_scope_user() RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $fn$
    SELECT s.user_id
      FROM (SELECT current_setting('pgrecall.user_id', true) AS user_id,
                   current_setting('pgrecall.user_sig', true) AS sig) AS s,
           pgrecall_scope_key AS k
     WHERE s.user_id <> ''
       AND s.sig = encode(
           sha256(k.outer_pad || sha256(k.inner_pad || convert_to(s.user_id, 'UTF8'))), 'hex')
$fn$
"""

# The owners (`space:<id>`) of the spaces the signed user may read, or write (`writes`).
SCOPE_SPACES_FUNCTION = """
CREATE FUNCTION pgrecall_scope_spaces(writes boolean) RETURNS text[]
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
AS $fn$
    SELECT coalesce(array_agg('space:' || m.space_id), '{}')
      FROM space_members AS m
     WHERE m.user_id = pgrecall_scope_user() AND (NOT writes OR m.access = 'write')
$fn$
"""

_AGENT = "nullif(current_setting('pgrecall.agent_id', true), '')"
_RUN = "nullif(current_setting('pgrecall.run_id', true), '')"


def _named(setting: str, column: str) -> str:
    """The request names no value of `setting`, or the row's `column` is it, or (unless it
    asks for its own rows only) the row has none. Comparisons, IS NULL, AND and OR only:
    Citus 13 cannot forward a policy holding NULLIF or COALESCE to the shards ("unrecognized
    node type")."""
    value = f"current_setting('pgrecall.{setting}', true)"
    own = "current_setting('pgrecall.scope_own', true)"
    not_own = f"({own} IS NULL OR {own} <> 'on')"
    return (
        f"({value} IS NULL OR {value} = '' OR {column} = {value} "
        f"OR ({column} IS NULL AND {not_own}))"
    )


# A row is in a request's scope when the request names no agent, or the row is that agent's,
# or (unless it asks for its own memory only) the row has no agent; the same for runs.
SCOPE_MATCH = f"{_named('agent_id', 'agent_id')} AND {_named('run_id', 'run_id')}"
# The exact path's covering index of messages, before and after (migration 0017's, with the
# scope columns the user policy now reads).
COVERING = (
    "messages (user_id, embedding_model) INCLUDE (id, embedding) WHERE embedding IS NOT NULL"
)
COVERING_SCOPED = (
    "messages (user_id, embedding_model) INCLUDE (id, embedding, agent_id, run_id) "
    "WHERE embedding IS NOT NULL"
)
USER_MATCH = "user_id = pgrecall_scope_user()"
# coalesce() makes the array an expression: read once per statement (policy_rewrites puts the
# call in a subquery), `ANY ((SELECT ...))` would be ANY over a subquery's rows instead.
SPACE_READ = "user_id = ANY (coalesce(pgrecall_scope_spaces(false), '{}'))"
SPACE_WRITE = "user_id = ANY (coalesce(pgrecall_scope_spaces(true), '{}'))"


def _citus() -> bool:
    sql = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
    return bool(op.get_bind().execute(text(sql)).scalar_one())


def _sequential_on_citus() -> None:
    """On Citus, the shard commands over one connection per node: the migration replaces the
    distributed pgrecall_scope_user() after changing distributed tables, which Citus refuses
    after a parallel operation in the same transaction."""
    if _citus():
        op.execute("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")


def upgrade() -> None:
    _sequential_on_citus()
    taken = op.get_bind().execute(
        text(
            "SELECT user_id FROM conversations WHERE user_id LIKE 'space:%' UNION "
            "SELECT user_id FROM memory_items WHERE user_id LIKE 'space:%' LIMIT 1"
        )
    )
    clash = taken.scalar_one_or_none()
    if clash is not None:
        raise RuntimeError(
            f"user id {clash!r} starts with 'space:', which now names shared spaces: rename "
            "the user first (pgrecall export / import --into)"
        )
    for table in SCOPED_TABLES:
        op.execute(
            f"ALTER TABLE {table} "
            f"ADD COLUMN agent_id varchar({ID_LENGTH}) DEFAULT {_AGENT}, "
            f"ADD COLUMN run_id varchar({ID_LENGTH}) DEFAULT {_RUN}"
        )
    # A per-user key may be bound to one agent.
    op.execute(f"ALTER TABLE api_keys ADD COLUMN agent_id varchar({ID_LENGTH})")
    # The exact path's index-only scan of a user's vectors reads the scope columns too (the
    # scope policy checks them on every row it returns).
    covering = op.get_bind().execute(
        text("SELECT to_regclass('idx_messages_user_vectors') IS NOT NULL")
    ).scalar_one()
    if covering:
        op.execute("DROP INDEX idx_messages_user_vectors")
        op.execute(f"CREATE INDEX idx_messages_user_vectors ON {COVERING_SCOPED}")
    # A text is unique among one scope's valid memories (NULLS NOT DISTINCT: the unscoped
    # memory is one scope), and so is a store address.
    op.execute("DROP INDEX uq_memory_items_user_content_hash")
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_items_user_content_hash ON memory_items "
        "(user_id, content_hash, agent_id, run_id) NULLS NOT DISTINCT WHERE valid_to IS NULL"
    )
    op.execute("DROP INDEX uq_memory_items_store_address")
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_items_store_address ON memory_items "
        "(user_id, store_namespace text_pattern_ops, store_key, agent_id, run_id) "
        "NULLS NOT DISTINCT WHERE store_key IS NOT NULL AND valid_to IS NULL"
    )

    op.execute(
        "CREATE TABLE spaces (id varchar(64) NOT NULL, "
        "description text NOT NULL DEFAULT '', "
        "created_at timestamptz NOT NULL DEFAULT now(), "
        "CONSTRAINT pk_spaces PRIMARY KEY (id), "
        "CONSTRAINT ck_spaces_id CHECK (id ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'))"
    )
    op.execute(
        "CREATE TABLE space_members (space_id varchar(64) NOT NULL, "
        f"user_id varchar({ID_LENGTH}) NOT NULL, access varchar(5) NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now(), "
        "CONSTRAINT pk_space_members PRIMARY KEY (space_id, user_id), "
        "CONSTRAINT fk_space_members_space_id_spaces FOREIGN KEY (space_id) "
        "REFERENCES spaces (id) ON DELETE CASCADE, "
        "CONSTRAINT ck_space_members_access CHECK (access IN ('read', 'write')))"
    )
    op.execute("CREATE INDEX idx_space_members_user_id ON space_members (user_id)")
    for table in ("spaces", "space_members"):
        op.execute(f"REVOKE ALL ON {table} FROM PUBLIC")
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {ADMIN_ROLE}")
    op.execute("ALTER TABLE space_members ENABLE ROW LEVEL SECURITY")
    op.execute("ALTER TABLE space_members FORCE ROW LEVEL SECURITY")
    op.execute(
        "CREATE POLICY space_members_user ON space_members FOR SELECT "
        "USING (user_id = pgrecall_scope_user())"
    )
    op.execute(
        "CREATE POLICY space_members_leave ON space_members FOR DELETE "
        "USING (user_id = pgrecall_scope_user())"
    )
    op.execute(
        f"CREATE POLICY space_members_admin ON space_members TO {ADMIN_ROLE} "
        "USING (true) WITH CHECK (true)"
    )
    op.execute(SCOPE_USER_FUNCTION)
    op.execute(SCOPE_SPACES_FUNCTION)
    op.execute("REVOKE ALL ON FUNCTION pgrecall_scope_spaces(boolean) FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION pgrecall_scope_spaces(boolean) TO PUBLIC")
    # The scope is part of the user's own policy, not a restrictive policy of its own: Citus
    # 13 creates a distributed table's shard policies permissive whatever the table's are, so
    # a restrictive one would widen every shard to all users (measured on a cluster).
    for table in SCOPED_TABLES:
        _user_policy(table, f"{USER_MATCH} AND {SCOPE_MATCH}")
    citus = _citus()
    # On Citus, migration 0020 makes these policies (on the coordinator's tables alone; then
    # `pgrecall db distribute` gives the shards theirs, with the grants read where they run).
    for table in () if citus else SPACE_TABLES:
        scoped = f" AND {SCOPE_MATCH}" if table in SCOPED_TABLES else ""
        read, write = f"{SPACE_READ}{scoped}", f"{SPACE_WRITE}{scoped}"
        op.execute(f"CREATE POLICY {table}_space_read ON {table} FOR SELECT USING ({read})")
        op.execute(
            f"CREATE POLICY {table}_space_write ON {table} USING ({write}) WITH CHECK ({write})"
        )
    if not citus:
        _read_once()


def _user_policy(table: str, match: str) -> None:
    """The table's user policy made again. On Citus on the coordinator's table alone: Citus 13
    cannot forward a policy holding a function call to the shards ("unrecognized node type"),
    so `pgrecall db distribute`, run after the upgrade, gives every shard the table's policies
    (app/citus/policies.py: sync_shard_policies; docs/scaling.md)."""
    citus = _citus()
    if citus:
        op.execute("SET LOCAL citus.enable_ddl_propagation TO off")
    op.execute(f"DROP POLICY {table}_user ON {table}")
    op.execute(f"CREATE POLICY {table}_user ON {table} USING ({match}) WITH CHECK ({match})")
    if citus:
        op.execute("SET LOCAL citus.enable_ddl_propagation TO on")


def _read_once() -> None:
    """Off Citus, every policy's settings and scope calls once per statement (InitPlans)."""
    for statement in policy_rewrites(op.get_bind().execute(POLICIES).all(), once=True):
        op.get_bind().exec_driver_sql(statement)


def downgrade() -> None:
    _sequential_on_citus()
    # Rows of spaces and of agents' or runs' scopes go with their columns' meaning: the
    # downgrade refuses to merge them silently into the user's memory.
    left = op.get_bind().execute(
        text(
            "SELECT count(*) FROM memory_items WHERE user_id LIKE 'space:%' "
            "OR agent_id IS NOT NULL OR run_id IS NOT NULL"
        )
    )
    if left.scalar_one():
        raise RuntimeError("memories of spaces, agents or runs exist: export them first")
    for table in SPACE_TABLES:
        op.execute(f"DROP POLICY IF EXISTS {table}_space_read ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_space_write ON {table}")
    for table in SCOPED_TABLES:
        _user_policy(table, USER_MATCH)
    if not _citus():
        _read_once()
    op.execute("DROP FUNCTION pgrecall_scope_spaces(boolean)")
    op.execute(OLD_SCOPE_USER_FUNCTION)
    op.execute("DROP TABLE space_members")
    op.execute("DROP TABLE spaces")
    op.execute("DROP INDEX uq_memory_items_store_address")
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_items_store_address ON memory_items "
        "(user_id, store_namespace text_pattern_ops, store_key) "
        "WHERE store_key IS NOT NULL AND valid_to IS NULL"
    )
    op.execute("DROP INDEX uq_memory_items_user_content_hash")
    op.execute(
        "CREATE UNIQUE INDEX uq_memory_items_user_content_hash ON memory_items "
        "(user_id, content_hash) WHERE valid_to IS NULL"
    )
    covering = op.get_bind().execute(
        text("SELECT to_regclass('idx_messages_user_vectors') IS NOT NULL")
    ).scalar_one()
    if covering:
        op.execute("DROP INDEX idx_messages_user_vectors")
    for table in SCOPED_TABLES:
        op.execute(f"ALTER TABLE {table} DROP COLUMN agent_id, DROP COLUMN run_id")
    op.execute("ALTER TABLE api_keys DROP COLUMN agent_id")
    if covering:
        op.execute(f"CREATE INDEX idx_messages_user_vectors ON {COVERING}")
