"""Admin rights in a role of their own, and a user scope the service role cannot forge.

Until now both were settings any role could make: `SET pgrecall.admin = 'on'` showed the
service role every row, and `SET pgrecall.user_id = '<anyone>'` another user's rows (issue 44).
A statement injected into a request, or run by anyone holding the service role's password,
could read the whole store. After this migration:

- **Admin work runs as `pgrecall_admin`** (created here, NOLOGIN; start-up gives it LOGIN on the
  embedded server; docs/security.md for an external one). The `<table>_admin` policies apply
  `TO pgrecall_admin` only and need no setting: `pgrecall.admin` and `pgrecall.job_queue` no
  longer mean anything (the extraction workers claim jobs as the admin role too). The service
  role is never made a member, and start-up refuses one that is (app/roles.rls_status). The
  migrating role (the owner) is made a member, so admin commands run as the owner still work.
- **The user scope is signed.** `pgrecall.user_id` counts only next to `pgrecall.user_sig`,
  its HMAC-SHA256 under a key that lives in `pgrecall_scope_key`: readable by the owner and
  `pgrecall_admin`, never by the service role. The service reads the key at start-up as the
  admin role (app/roles.read_scope_key) and signs every scope it sets (app/db.py). The policies
  ask `pgrecall_scope_user()` (SECURITY DEFINER: it reads the key for the caller), which returns
  the user only when the signature matches, else NULL (no row). A statement that sets another
  user id cannot sign it.

The key is 32 random bytes from Python's `secrets`, stored as HMAC's inner and outer pads (the
key, zero-padded to SHA-256's 64-byte block, XOR 0x36 and XOR 0x5c), so SQL computes HMAC with
sha256() alone: sha256(outer || sha256(inner || message)).

Policies are written in the per-row form (what a Citus database keeps) and then, off Citus,
read once per statement as migration 0017 does (app/roles.policy_rewrites).

Revision ID: 0018_admin_role
Revises: 0017_halfvec_covering
Create Date: 2026-12-05
"""

import secrets
from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from app.db import scope_key_pads
from app.roles import ADMIN_ROLE, POLICIES, USER_TABLES, policy_rewrites

revision: str = "0018_admin_role"
down_revision: str | None = "0017_halfvec_covering"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_USER_MATCH = "user_id = current_setting('pgrecall.user_id', true)"
OLD_ADMIN_MODE = "current_setting('pgrecall.admin', true) = 'on'"
OLD_JOB_QUEUE = "current_setting('pgrecall.job_queue', true) = 'on'"
USER_MATCH = "user_id = pgrecall_scope_user()"

CREATE_ROLE = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ADMIN_ROLE}') THEN
        BEGIN
            CREATE ROLE {ADMIN_ROLE} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE
                NOREPLICATION NOINHERIT;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role {ADMIN_ROLE} does not exist and % may not create it: create '
                'it first (docs/security.md, "Roles")', current_user;
        END;
    END IF;
    IF NOT pg_has_role(current_user, '{ADMIN_ROLE}', 'MEMBER') THEN
        EXECUTE format('GRANT {ADMIN_ROLE} TO %I', current_user);
    END IF;
END
$$
"""

SCOPE_USER_FUNCTION = """
CREATE FUNCTION pgrecall_scope_user() RETURNS text
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


def _citus() -> bool:
    sql = "SELECT count(*) FROM pg_extension WHERE extname = 'citus'"
    return bool(op.get_bind().execute(text(sql)).scalar_one())


def _rewrite(*, once: bool) -> None:
    for statement in policy_rewrites(op.get_bind().execute(POLICIES).all(), once=once):
        op.get_bind().exec_driver_sql(statement)


def upgrade() -> None:
    op.execute(CREATE_ROLE)
    op.execute(
        "CREATE TABLE pgrecall_scope_key (id smallint PRIMARY KEY CHECK (id = 1), "
        "inner_pad bytea NOT NULL, outer_pad bytea NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now())"
    )
    op.execute("REVOKE ALL ON pgrecall_scope_key FROM PUBLIC")
    op.execute(f"GRANT SELECT ON pgrecall_scope_key TO {ADMIN_ROLE}")
    inner, outer = scope_key_pads(secrets.token_bytes(32))
    op.get_bind().execute(
        text("INSERT INTO pgrecall_scope_key (id, inner_pad, outer_pad) VALUES (1, :i, :o)"),
        {"i": inner, "o": outer},
    )
    op.execute(SCOPE_USER_FUNCTION)
    op.execute("REVOKE ALL ON FUNCTION pgrecall_scope_user() FROM PUBLIC")
    op.execute("GRANT EXECUTE ON FUNCTION pgrecall_scope_user() TO PUBLIC")
    op.execute("DROP POLICY IF EXISTS extraction_jobs_claim ON extraction_jobs")
    for table in USER_TABLES:
        op.execute(f"DROP POLICY IF EXISTS {table}_user ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_admin ON {table}")
        op.execute(
            f"CREATE POLICY {table}_user ON {table} USING ({USER_MATCH}) WITH CHECK ({USER_MATCH})"
        )
        op.execute(
            f"CREATE POLICY {table}_admin ON {table} TO {ADMIN_ROLE} USING (true) WITH CHECK (true)"
        )
        op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {ADMIN_ROLE}")
    op.execute(f"GRANT USAGE ON SCHEMA public TO {ADMIN_ROLE}")
    op.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {ADMIN_ROLE}")
    op.execute(f"GRANT SELECT ON alembic_version TO {ADMIN_ROLE}")
    if not _citus():
        _rewrite(once=True)


def downgrade() -> None:
    for table in USER_TABLES:
        op.execute(f"DROP POLICY IF EXISTS {table}_user ON {table}")
        op.execute(f"DROP POLICY IF EXISTS {table}_admin ON {table}")
        op.execute(
            f"CREATE POLICY {table}_user ON {table} "
            f"USING ({OLD_USER_MATCH}) WITH CHECK ({OLD_USER_MATCH})"
        )
        op.execute(
            f"CREATE POLICY {table}_admin ON {table} "
            f"USING ({OLD_ADMIN_MODE}) WITH CHECK ({OLD_ADMIN_MODE})"
        )
    op.execute(
        "CREATE POLICY extraction_jobs_claim ON extraction_jobs "
        f"USING ({OLD_JOB_QUEUE}) WITH CHECK ({OLD_JOB_QUEUE})"
    )
    if not _citus():
        _rewrite(once=True)
    op.execute("DROP FUNCTION pgrecall_scope_user()")
    op.execute("DROP TABLE pgrecall_scope_key")
    # The role stays: roles are the cluster's, and other databases may use it.
