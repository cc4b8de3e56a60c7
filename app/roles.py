"""The three database roles: the owner (runs migrations, owns the tables), the service's role
(requests) and the admin role (admin work, across users).

The service's role logs in, owns nothing, is neither superuser nor BYPASSRLS, and holds only
SELECT/INSERT/UPDATE/DELETE on the user-data tables (never TRUNCATE: it ignores row-level
security) and SELECT on alembic_version (for /ready). Row-level security (migration 0003_rls)
then limits every statement it sends to the rows of the user named in the transaction's
`pgrecall.user_id` setting, signed with the scope key (app/db.py sets both; migration 0018).

The admin role, `pgrecall_admin` (migration 0018 creates it), sees every row, and reads the
scope key; the service role is never a member. The service runs its admin work (admin routes,
console, CLI, extraction claims, start-up checks) on an engine of its own logged in as the
admin role: embedded, start-up gives the role LOGIN (socket trust, like the service role);
external, PGRECALL_ADMIN_DATABASE_URL names it (or a member of it), else the owner's DSN is used
(the migration makes the owner a member).

With the embedded server the owner is the server's superuser and the role is created here at
start-up (idempotently; unix socket with trust auth, so no password). With an external Postgres
the operator creates the role (docs/security.md) and either sets PGRECALL_MIGRATION_DATABASE_URL,
so start-up grants the privileges, or runs the GRANTs from `grant_statements()` by hand.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.config import Settings, check_role_name
from app.db import ScopeKey, create_engine

if TYPE_CHECKING:
    from app.embedded import EmbeddedPostgres

log = logging.getLogger(__name__)

DEFAULT_APP_ROLE = "pgrecall_app"
# Fixed: the migrations' policies name it (migration 0018_admin_role).
ADMIN_ROLE = "pgrecall_admin"
SCOPE_KEY_TABLE = "pgrecall_scope_key"
# The attributes of both login roles the service uses: bound by row-level security, nothing more.
SAFE_LOGIN = "LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION NOINHERIT"
# Tables holding user data: row-level security on each (migration 0003_rls has the same list),
# and the service's DML grants. A new user-data table is one line here and one in a migration.
USER_TABLES: tuple[str, ...] = (
    "conversations",
    "messages",
    "memory_items",
    "search_postings",
    "search_stats",
    "api_keys",
    "extraction_jobs",  # migration 0008_extraction
    "extraction_usage",
    "message_passages",  # migration 0009_passages
)
# On a Citus cluster (app/citus/, docs/scaling.md) every user table but api_keys is
# distributed by user_id, the first one listed being the one the others are co-located with;
# api_keys stays a table of the coordinator (authentication reads it by hash, not by user).
COORDINATOR_TABLES: tuple[str, ...] = ("api_keys",)
DISTRIBUTED_TABLES: tuple[str, ...] = tuple(t for t in USER_TABLES if t not in COORDINATOR_TABLES)
# Shared spaces and their grants (migration 0019): on Citus, reference tables (a copy on every
# node), so the space policies' grant check reads them where a shard's statement runs; in
# foreign-key order (a referenced table first).
REFERENCE_TABLES: tuple[str, ...] = ("spaces", "space_members")
READ_ONLY_TABLES: tuple[str, ...] = ("alembic_version",)
# Shared spaces' grants (migration 0019): row-level security shows the service role its user's
# own and lets it delete them (leaving a space, a user's purge); granting is the admin role's.
MEMBER_TABLES: tuple[str, ...] = ("space_members",)
# Tables the service role may DELETE from without any row to delete: row-level security admits
# the admin role alone (migration 0020). On Citus a write of space_members first locks the shard
# of spaces, the table it refers to, which Citus allows only to a role that could modify spaces
# ("permission denied for table spaces" when a purge as the service role deleted a grant).
LOCK_ONLY_TABLES: tuple[str, ...] = ("spaces",)
_LOCK_KEY = 0x70677263  # "pgrc": serialises role set-up across processes
_CITUS = text("SELECT count(*) FROM pg_extension WHERE extname = 'citus'")
_SEQUENTIAL = text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")

# Every policy of the schema, with its expressions as Postgres prints them (policy_rewrites).
POLICIES = text(
    "SELECT c.relname AS table, p.polname AS name, pg_get_expr(p.polqual, p.polrelid) AS using, "
    "pg_get_expr(p.polwithcheck, p.polrelid) AS check FROM pg_policy AS p "
    "JOIN pg_class AS c ON c.oid = p.polrelid JOIN pg_namespace AS n ON n.oid = c.relnamespace "
    "WHERE n.nspname = 'public' ORDER BY c.relname, p.polname"
)
# A call a policy reads its scope with (a setting, migration 0018's signed user, migration 0019's
# spaces of that user), not yet in a subquery, and one in a subquery (as Postgres prints them).
_CALL = (
    r"(current_setting\('[a-z_.]+'::text, true\)|pgrecall_scope_user\(\)"
    r"|pgrecall_scope_spaces\((?:true|false)\))"
)
_SETTING_CALL = re.compile(r"(?<!SELECT )" + _CALL)
_SETTING_ONCE = re.compile(r"\( SELECT " + _CALL + r" AS \w+\)")
# Postgres prints a varchar column's implicit cast to text as `(user_id)::text`; written back
# so it becomes an explicit cast, which Citus' router planner then no longer takes as the
# distribution column in a lateral subquery with LIMIT ("cannot push down this subquery" for
# the service role's memory dedup on a real cluster). The column alone parses as before.
_IMPLICIT = re.compile(r"\((\w+)\)::text\b")
_COLUMN = r"\1"


# Postgres caches the plans of SQL functions from 18 on; before, a SQL function that cannot be
# inlined (SECURITY DEFINER, SET search_path) is planned again at every call site, so the scope
# functions are PL/pgSQL there (migration 0022, `pgrecall db distribute`).
CACHES_SQL_FUNCTIONS = 180000
SERVER_VERSION = "SELECT current_setting('server_version_num')::int"


def scope_function(signature: str, returns: str, query: str, plpgsql: bool) -> str:
    """CREATE OR REPLACE of a scope function (`signature`, e.g. "pgrecall_scope_user()")
    returning `query`'s one value: SECURITY DEFINER with a fixed search_path, in PL/pgSQL
    (`plpgsql`: a server before CACHES_SQL_FUNCTIONS) or SQL."""
    language, body = ("plpgsql", f"BEGIN RETURN ({query}); END") if plpgsql else ("sql", query)
    return (
        f"CREATE OR REPLACE FUNCTION {signature} RETURNS {returns} LANGUAGE {language} STABLE "
        f"SECURITY DEFINER SET search_path = pg_catalog, public AS $fn${body}$fn$"
    )


def read_once(expression: str) -> str:
    """A policy expression with each scope call (a setting, the signed user, the spaces) in a
    scalar subquery: read once per statement (an InitPlan), not once per row."""
    return _SETTING_CALL.sub(r"(SELECT \1)", expression)


class RoleSetupError(RuntimeError):
    """The service role could not be created or granted its privileges."""


def with_user(url: str, user: str) -> str:
    """The same database URL, logging in as another role (no password: socket trust auth)."""
    return make_url(url).set(username=user, password=None).render_as_string(hide_password=False)


def user_of(url: str) -> str | None:
    """The role a URL logs in as (None: libpq's default, the OS user)."""
    return make_url(url).username


@dataclass(frozen=True)
class DatabaseUrls:
    """Where requests go (the service role), where admin work goes (the admin role) and where
    migrations and grants go (the owner)."""

    service: str
    owner: str
    create_role: bool  # the embedded default: start-up creates the service role itself
    admin: str = ""  # empty: the owner's

    @property
    def admin_url(self) -> str:
        return self.admin or self.owner

    @property
    def separate_roles(self) -> bool:
        return user_of(self.service) != user_of(self.owner)


def database_urls(settings: Settings, embedded: EmbeddedPostgres | None = None) -> DatabaseUrls:
    """The configured database, or the embedded server (started or attached).

    Embedded: the owner is the server's superuser and requests run as the service role
    (settings.app_role), created at start-up. External: requests run as PGRECALL_DATABASE_URL's
    role, migrations as PGRECALL_MIGRATION_DATABASE_URL's (the same role when unset).
    """
    if settings.database_url:
        owner = settings.migration_database_url or settings.database_url
        admin = settings.admin_database_url or owner
        return DatabaseUrls(settings.database_url, owner, create_role=False, admin=admin)
    if embedded is None:
        from app.embedded import EmbeddedPostgres

        embedded = EmbeddedPostgres(settings.data_dir)
    owner = embedded.start()
    service, admin = with_user(owner, settings.app_role), with_user(owner, ADMIN_ROLE)
    return DatabaseUrls(service, owner, create_role=True, admin=admin)


async def prepare_database(urls: DatabaseUrls, *, migrate: bool = True) -> None:
    """As the owner: migrate to head, then grant the service role (and, embedded, create it:
    that happens even with migrations off, the role is part of the embedded default)."""
    from app.migrate import upgrade_head

    if migrate:
        await asyncio.to_thread(upgrade_head, urls.owner)
    role = user_of(urls.service)
    if urls.separate_roles and role is not None and (migrate or urls.create_role):
        await ensure_service_role(urls.owner, role, create=urls.create_role)


async def service_engine(
    owner_url: str, role: str = DEFAULT_APP_ROLE, **engine_options: Any
) -> AsyncEngine:
    """An engine logged in as the service role of the server `owner_url` reaches (socket trust),
    signing its user scopes with the scope key read as the owner: how scripts and benchmarks
    run statements as the service does. (An engine of the role without the key sees no row.)"""
    key = await read_scope_key(owner_url)
    return create_engine(with_user(owner_url, role), scope_key=key, **engine_options)


async def read_scope_key(admin: str | AsyncEngine) -> ScopeKey:
    """The database's scope key (migration 0018), read as the admin role (or the owner), on
    `admin`'s engine or a URL's throwaway one: the service signs every user scope with it, and
    its own role cannot read it."""
    engine = create_async_engine(admin, poolclass=NullPool) if isinstance(admin, str) else admin
    try:
        async with engine.connect() as conn:
            row = (
                await conn.execute(text(f"SELECT inner_pad, outer_pad FROM {SCOPE_KEY_TABLE}"))
            ).one()
    except Exception as exc:  # driver errors: one readable line for start-up
        raise RoleSetupError(
            f"cannot read the scope key as {user_of(str(engine.url))}: {type(exc).__name__}: "
            f"{exc} (PGRECALL_ADMIN_DATABASE_URL must log in as pgrecall_admin or a member of "
            "it: docs/security.md)"
        ) from exc
    finally:
        if isinstance(admin, str):
            await engine.dispose()
    return ScopeKey(bytes(row.inner_pad), bytes(row.outer_pad))


async def warn_unless_rls_binds(engine: AsyncEngine) -> None:
    """One log line at start-up when the service role is not bound by row-level security."""
    try:
        async with engine.connect() as conn:
            ok, message = await rls_status(conn)
    except (SQLAlchemyError, OSError) as exc:  # serving starts anyway; /ready reports the DB
        log.warning("could not check row-level security at start: %s", type(exc).__name__)
        return
    if not ok:
        log.warning("row-level security is not enforced: %s", message)


def grant_statements(role: str) -> list[str]:
    """The privileges the service role needs, as SQL an operator can run as the owner."""
    role = check_role_name(role)
    tables = ", ".join(USER_TABLES)
    return [
        f"GRANT USAGE ON SCHEMA public TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}",
        f"GRANT SELECT ON {', '.join(READ_ONLY_TABLES)} TO {role}",
        f"GRANT SELECT, DELETE ON {', '.join(MEMBER_TABLES)} TO {role}",
        f"GRANT DELETE ON {', '.join(LOCK_ONLY_TABLES)} TO {role}",
        # messages.seq is an identity column; inserts work without it, but a future serial may not
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}",
    ]


def create_statement(role: str) -> str:
    """CREATE ROLE for the service role (idempotent: an existing role is left as it is)."""
    role = check_role_name(role)
    return (
        f"DO $$ BEGIN CREATE ROLE {role} {SAFE_LOGIN}; "
        "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )


async def ensure_service_role(owner_url: str, role: str, *, create: bool) -> None:
    """Create the role if asked (embedded default) and grant it the service's privileges; with
    `create`, also give the admin role LOGIN and the admin work's privileges.

    Run as the owner after the migrations. Safe to repeat and to run from two processes at once.
    When the owner is a superuser (embedded) the role's attributes are also reset to the safe
    ones, so a role someone altered by hand cannot keep BYPASSRLS.
    """
    engine = create_async_engine(owner_url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            # Two processes starting at once (serve and an admin command) take turns: concurrent
            # GRANTs on one table can fail with "tuple concurrently updated".
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            if await conn.scalar(_CITUS):
                # The grants reach the shards over one connection per node: Citus refuses the
                # grant on spaces, a reference table another refers to, after a parallel one.
                await conn.execute(_SEQUENTIAL)
            exists = await conn.scalar(
                text("SELECT true FROM pg_roles WHERE rolname = :r"), {"r": role}
            )
            if not exists and not create:
                raise RoleSetupError(
                    f"role {role} does not exist: create it as docs/security.md shows"
                )
            if create:
                await conn.execute(text(create_statement(role)))
                superuser = text("SELECT rolsuper FROM pg_roles WHERE rolname = CURRENT_USER")
                if await conn.scalar(superuser):
                    await conn.execute(text(f"ALTER ROLE {check_role_name(role)} {SAFE_LOGIN}"))
            for statement in grant_statements(role):
                await conn.execute(text(statement))
            if create:
                # The embedded default's other login: the admin role (migration 0018), with
                # the same safe attributes, the admin work's privileges and the scope key.
                await conn.execute(text(f"ALTER ROLE {ADMIN_ROLE} {SAFE_LOGIN}"))
                admin_grants = grant_statements(ADMIN_ROLE)
                for statement in (
                    *admin_grants,
                    f"GRANT SELECT ON {SCOPE_KEY_TABLE} TO {ADMIN_ROLE}",
                ):
                    await conn.execute(text(statement))
    except RoleSetupError:
        raise
    except Exception as exc:  # driver errors: one readable line for start-up
        raise RoleSetupError(f"setting up role {role}: {type(exc).__name__}: {exc}") from exc
    finally:
        await engine.dispose()
    log.info("service role %s ready (privileges on %s)", role, ", ".join(USER_TABLES))


async def rls_status(conn: AsyncConnection) -> tuple[bool, str]:
    """Whether row-level security binds the role this connection logs in as.

    Not ok when the role is a superuser or has BYPASSRLS (policies do not apply), may SET ROLE
    to such a role, is the admin role or a member of it, may read the scope key (it could sign
    any user), owns a user-data table or may act as its owner (it could switch RLS off), holds
    TRUNCATE on one (TRUNCATE ignores RLS), or a user-data table lacks forced RLS.
    """
    role = (
        await conn.execute(
            text(
                "SELECT rolname, rolsuper, rolbypassrls, "
                "(SELECT string_agg(r.rolname, ', ' ORDER BY r.rolname) FROM pg_roles AS r "
                " WHERE (r.rolsuper OR r.rolbypassrls) AND r.rolname <> CURRENT_USER "
                " AND pg_has_role(CURRENT_USER, r.oid, 'MEMBER')) AS escalates_to, "
                "EXISTS (SELECT FROM pg_roles AS r WHERE r.rolname = :admin "
                " AND pg_has_role(CURRENT_USER, r.oid, 'MEMBER')) AS admin, "
                "coalesce(has_table_privilege(to_regclass(:key_table), 'SELECT'), false) "
                "AS reads_key "
                "FROM pg_roles WHERE rolname = CURRENT_USER"
            ),
            {"admin": ADMIN_ROLE, "key_table": SCOPE_KEY_TABLE},
        )
    ).one()
    if role.rolsuper or role.rolbypassrls:
        attribute = "superuser" if role.rolsuper else "BYPASSRLS"
        return False, (
            f"the service runs as {role.rolname}, a {attribute} role: row-level security does "
            "not apply (docs/security.md: run it as the application role)"
        )
    rows = (
        await conn.execute(
            text(
                "SELECT t.name, c.oid IS NOT NULL AS present, "
                "coalesce(c.relrowsecurity AND c.relforcerowsecurity, false) AS forced, "
                "(SELECT count(*) FROM pg_policy AS p WHERE p.polrelid = c.oid) AS policies, "
                "c.oid IS NOT NULL AND pg_has_role(CURRENT_USER, c.relowner, 'MEMBER') AS owns, "
                "c.oid IS NOT NULL AND has_table_privilege(c.oid, 'TRUNCATE') AS truncates "
                "FROM unnest(CAST(:tables AS text[])) AS t(name) "
                "LEFT JOIN pg_class AS c ON c.oid = to_regclass(t.name)"
            ),
            {"tables": list(USER_TABLES)},
        )
    ).all()
    problems = []
    if role.escalates_to:
        problems.append(f"may SET ROLE to {role.escalates_to} (superuser or BYPASSRLS)")
    if role.admin:
        problems.append(f"is {ADMIN_ROLE} or a member of it (every user's rows)")
    elif role.reads_key:
        problems.append(f"may read {SCOPE_KEY_TABLE} (it could sign any user's scope)")
    for r in rows:
        if not r.present:
            problems.append(f"{r.name} missing")
        elif not (r.forced and r.policies):
            problems.append(f"{r.name} without forced row-level security")
        elif r.owns:
            problems.append(f"{r.name} owned by the service role (or a role it may become)")
        elif r.truncates:
            problems.append(f"TRUNCATE on {r.name} (it ignores row-level security)")
    if problems:
        return False, f"service role {role.rolname}: " + "; ".join(problems)
    return True, (
        f"service role {role.rolname}: no superuser, no BYPASSRLS, owns no user-data table; "
        f"forced row-level security on {len(rows)} tables"
    )


async def rls_status_at(url: str) -> tuple[bool, str]:
    """rls_status for the role a URL logs in as (the service URL: `database_urls().service`);
    a failed connection is not ok, with the reason."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return await rls_status(conn)
    except (SQLAlchemyError, OSError) as exc:
        return False, f"cannot connect as {user_of(url)}: {type(exc).__name__}: {exc}"
    finally:
        await engine.dispose()


async def service_role_status(
    owner_url: str, service_url: str, *, created_at_start: bool, migrate_on_start: bool
) -> tuple[bool, str] | None:
    """`pgrecall doctor`'s row-security check: rls_status of the service role, or why it
    cannot be checked yet. None: not checkable (migrations pending and not applied at start).

    `created_at_start`: the embedded default, whose start-up creates a missing role.
    """
    from app.migrate import current_revision, head_revision

    role = user_of(service_url)
    engine = create_async_engine(owner_url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            exists = await conn.scalar(
                text("SELECT true FROM pg_roles WHERE rolname = :r"), {"r": role}
            )
        revision = await current_revision(engine)
    except (SQLAlchemyError, OSError) as exc:
        return False, f"cannot read roles as {user_of(owner_url)}: {type(exc).__name__}: {exc}"
    finally:
        await engine.dispose()
    if not exists:
        if created_at_start:
            return True, f"service role {role} does not exist yet: start-up creates it"
        return False, f"role {role} does not exist: create it as docs/security.md shows"
    if revision != head_revision():
        if migrate_on_start:
            return True, "checked once start-up has applied the pending migrations"
        return None
    return await rls_status_at(service_url)


def policy_rewrites(policies: Iterable[Sequence[str | None]], *, once: bool) -> list[str]:
    """ALTER POLICY statements for `policies` (rows of POLICIES: table, name, USING, WITH CHECK)
    that read each `current_setting(...)` or `pgrecall_scope_user()` once per statement
    (`once`: in a scalar subquery, an InitPlan) or once per row (the call itself), for the
    policies not so already.

    Once per statement is the faster form: a policy is checked on every row a statement reads,
    and the call looks its setting up by name each time (docs/performance.md, "Half-precision
    vectors and index-only exact search": the exact path of a 5,520-turn user). Citus refuses a
    subquery in a policy of a distributed table, so a Citus database keeps the per-row form
    (migration 0017_halfvec_covering; app/citus/distribute.py)."""
    find, replacement = (_SETTING_CALL, r"(SELECT \1)") if once else (_SETTING_ONCE, r"\1")
    statements = []
    for table, name, using, check in policies:
        clauses = [
            f"{keyword} ({_IMPLICIT.sub(_COLUMN, find.sub(replacement, expression))})"
            for keyword, expression in (("USING", using), ("WITH CHECK", check))
            if expression is not None and find.search(expression)
        ]
        if clauses:
            statements.append(f'ALTER POLICY "{name}" ON {table} ' + " ".join(clauses))
    return statements
