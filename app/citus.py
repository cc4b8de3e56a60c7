"""pgrecall on a Citus cluster: distribute the user tables by user_id, and check a cluster.

docs/scaling.md has the whole story. Every user table (app/roles.py DISTRIBUTED_TABLES) becomes
a hash-distributed table on `user_id`, all co-located with `conversations`, so all of one user's
rows sit in one shard group on one worker and every statement the service sends (each names its
user: tests/repositories/test_user_scope.py) is a router query on that worker. `api_keys` stays a
plain table of the coordinator: authentication reads it by token hash before it knows the user.
Shared spaces' `spaces` and `space_members` become reference tables, a copy on every node, which
the space policies read where a shard's statement runs (issue 43; docs/scaling.md, "Shared
spaces on Citus").

`distribute` runs as the owner role (Citus lets a table's owner distribute it) after
`pgrecall db upgrade`; it is idempotent. `cluster_status` is doctor's check.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.db import SET_LOCAL, ScopeKey, UserScope, one_line, scope_settings, set_local_params
from app.domain import MemoryScope
from app.roles import (
    ADMIN_ROLE,
    COORDINATOR_TABLES,
    DISTRIBUTED_TABLES,
    POLICIES,
    REFERENCE_TABLES,
    SCOPE_KEY_TABLE,
    policy_rewrites,
    read_scope_key,
    user_of,
)

DISTRIBUTION_COLUMN = "user_id"
ANCHOR = DISTRIBUTED_TABLES[0]  # the table the others are co-located with
DEFAULT_SHARD_COUNT = 32


class CitusError(RuntimeError):
    """The database is not a Citus coordinator, or a table cannot be distributed."""


@dataclass(frozen=True)
class TableDistribution:
    table: str
    method: str | None  # 'h' hash-distributed, 'n' reference/local in metadata, None: plain
    column: str | None
    colocation: int | None
    shards: int
    reference: bool = False  # a reference table: one shard, a copy on every node


_VERSION = text("SELECT extversion FROM pg_extension WHERE extname = 'citus'")
_DISTRIBUTION = text(
    """
    SELECT t.name, p.partmethod::text AS method,
           CASE WHEN p.partmethod = 'h'
                THEN column_to_column_name(p.logicalrelid, p.partkey) END AS column,
           p.colocationid AS colocation,
           (SELECT count(*) FROM pg_dist_shard AS s WHERE s.logicalrelid = p.logicalrelid)
               AS shards,
           coalesce(p.partmethod = 'n' AND p.repmodel = 't', false) AS reference
    FROM unnest(CAST(:tables AS text[])) AS t(name)
    LEFT JOIN pg_dist_partition AS p ON p.logicalrelid = to_regclass(t.name)
    """
)
# The anchor sets the shard count; the others take its placement (Citus refuses both at once).
_DISTRIBUTE_ANCHOR = text(
    "SELECT create_distributed_table(CAST(:table AS regclass), :column, "
    "shard_count := :shard_count)"
)
_DISTRIBUTE_WITH = text(
    "SELECT create_distributed_table(CAST(:table AS regclass), :column, "
    "colocate_with := :colocate_with)"
)
_REFERENCE = text("SELECT create_reference_table(CAST(:table AS regclass))")
_FORCED = text("SELECT relforcerowsecurity FROM pg_class WHERE oid = CAST(:table AS regclass)")
# A reference table's one shard: its name (the same on every node) and the active nodes that
# hold no copy of it ('' when all do; the node running this is one of them).
_REFERENCE_COPIES = text(
    """
    SELECT shard_name(s.logicalrelid, s.shardid) AS name,
           coalesce((SELECT string_agg(n.nodename || ':' || n.nodeport, ', '
                                       ORDER BY n.nodename, n.nodeport)
                     FROM pg_dist_node AS n
                     WHERE n.isactive AND n.noderole = 'primary'
                       AND NOT EXISTS (SELECT FROM pg_dist_placement AS p
                                       WHERE p.shardid = s.shardid AND p.groupid = n.groupid)),
                    '') AS missing,
           EXISTS (SELECT FROM pg_dist_placement AS p
                   WHERE p.shardid = s.shardid
                     AND p.groupid = (SELECT groupid FROM pg_dist_local_group)) AS local
    FROM pg_dist_shard AS s WHERE s.logicalrelid = CAST(:table AS regclass)
    """
)
_DISTRIBUTE_SPACES = text("SELECT create_distributed_function('pgrecall_scope_spaces(boolean)')")
_SPACES_ON_WORKERS = "SELECT pgrecall_scope_spaces(false)"
# doctor: the spaces function reads space_members' shard (scope_spaces_function), not the table.
_SPACES_READ_COPY = text(
    "SELECT coalesce(bool_and(p.prosrc LIKE '%FROM ' || shard_name(s.logicalrelid, s.shardid) "
    "|| ' AS m%'), false) FROM pg_proc AS p, pg_dist_shard AS s "
    "WHERE p.proname = 'pgrecall_scope_spaces' AND s.logicalrelid = 'space_members'::regclass"
)
_SCOPE_KEY_PLACED = text(
    f"SELECT count(*) FROM pg_dist_partition WHERE logicalrelid = '{SCOPE_KEY_TABLE}'::regclass"
)
# Restrictive policies of the tables to distribute (Citus 13.0.5 creates every shard's policy
# as permissive: measured on the cluster, docs/scaling.md).
_RESTRICTIVE = text(
    "SELECT DISTINCT c.relname || '.' || p.polname FROM pg_policy AS p "
    "JOIN pg_class AS c ON c.oid = p.polrelid "
    "WHERE NOT p.polpermissive AND c.relname = ANY(CAST(:tables AS text[])) ORDER BY 1"
).bindparams(tables=list(DISTRIBUTED_TABLES))
# Each distributed table's policies, as "name:permissive" sorted, on the coordinator and on
# each of its shards (doctor: a shard whose policies differ is not guarded as the table is).
_POLICY_SHAPE = (
    "SELECT coalesce(string_agg(p.polname || ':' || p.polpermissive::text, ',' "
    "ORDER BY p.polname), '') FROM pg_policy AS p WHERE p.polrelid = '{table}'::regclass"
)
_UNDISTRIBUTE_KEY = text(f"SELECT undistribute_table('{SCOPE_KEY_TABLE}')")
_READ_KEY = text(f"SELECT inner_pad, outer_pad FROM {SCOPE_KEY_TABLE} WHERE id = 1")
_ON_WORKERS = text(
    "SELECT nodename, nodeport, success, result FROM run_command_on_workers(:command)"
)
# Citus hides shard tables from pg_class on every node by a function call per catalog row; the
# asyncpg type lookup every new connection runs (for `vector`) took 1.4-1.6 s on the coordinator
# instead of 10-40 ms, and tripped the query path's timeout. The service's connections do not
# need the hiding: off for the database on the coordinator (its owner may set it).
_SHOW_SHARDS = text(
    "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET citus.override_table_visibility = off', "
    "current_database()); END $$"
)
_TRUNCATE_LOCAL = text(
    "SELECT truncate_local_data_after_distributing_table(CAST(:table AS regclass))"
)
_VISIBILITY = text("SELECT current_setting('citus.override_table_visibility')")
_PROBE_INSERT = text(
    "INSERT INTO conversations (id, user_id, title) VALUES (:id, :user_id, 'pgrecall doctor')"
)
# Probe users for doctor: candidate ids, each with the node its shard of the anchor table is on
# (the co-located tables' shards of a user sit on the same node).
PROBE_PREFIX = "pgrecall-doctor-"
_PROBE_CANDIDATES = text(
    f"""
    SELECT n.nodename || ':' || n.nodeport AS node, c.user_id
    FROM generate_series(1, 512) AS g
    CROSS JOIN LATERAL (SELECT :prefix || g AS user_id) AS c
    JOIN pg_dist_placement AS p
      ON p.shardid = get_shard_id_for_distribution_column('{ANCHOR}', c.user_id)
    JOIN pg_dist_node AS n ON n.groupid = p.groupid
    ORDER BY g
    """
)
# Every node holding a shard of the anchor table.
_SHARD_NODES = text(
    f"""
    SELECT DISTINCT n.nodename || ':' || n.nodeport AS node
    FROM pg_dist_shard AS s JOIN pg_dist_placement AS p ON p.shardid = s.shardid
    JOIN pg_dist_node AS n ON n.groupid = p.groupid
    WHERE s.logicalrelid = '{ANCHOR}'::regclass ORDER BY 1
    """
)
# Where the role itself sets citus.override_table_visibility ('*': in every database, else
# the database's name), which wins over the database's setting; NULL when it does not.
_ROLE_VISIBILITY = text(
    """
    SELECT CASE WHEN s.setdatabase = 0 THEN '*' ELSE current_database() END
    FROM pg_db_role_setting AS s JOIN pg_roles AS r ON r.oid = s.setrole
    WHERE r.rolname = :role
      AND s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
      AND EXISTS (SELECT FROM unnest(s.setconfig) AS c
                  WHERE c LIKE 'citus.override\\_table\\_visibility=%')
    ORDER BY s.setdatabase DESC LIMIT 1
    """
)
_PROBE_READ = text("SELECT count(*) FROM conversations WHERE user_id = :user_id AND id = :id")


# Each distributed table's policies as the coordinator holds them, and the policy names of each
# of its shards ("a,b"). Migrations change a distributed table's policies on the coordinator
# alone (Citus 13 cannot forward a policy holding a function call: "unrecognized node type");
# `distribute` then makes every shard's the same (sync_shard_policies).
_TABLE_POLICIES = text(
    """
    SELECT p.polname AS name, p.polpermissive AS permissive, p.polcmd::text AS cmd,
           CASE WHEN p.polroles = '{0}' THEN 'PUBLIC' ELSE
             (SELECT string_agg(quote_ident(r.rolname), ', ') FROM pg_roles AS r
              WHERE r.oid = ANY (p.polroles)) END AS roles,
           pg_get_expr(p.polqual, p.polrelid) AS using,
           pg_get_expr(p.polwithcheck, p.polrelid) AS check
    FROM pg_policy AS p WHERE p.polrelid = CAST(:table AS regclass) ORDER BY p.polname
    """
)
_ON_SHARDS = text(
    "SELECT shardid, success, result FROM run_command_on_shards(CAST(:table AS regclass), "
    "replace(:command, '{table}', '%s'))"
)
_COMMANDS = {"*": "ALL", "r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE"}
# The grants of a space policy read once per shard statement (an InitPlan), not once per row:
# a shard is a plain table of its worker, which takes the subquery Citus refuses on the
# distributed table. Per row, a member's count of a 2,000-memory space took 1.1-1.3 s instead
# of 22-43 ms (docs/scaling.md, "Shared spaces on Citus").
_SPACES_CALL = re.compile(r"(?<!SELECT )(pgrecall_scope_spaces\((?:true|false)\))")


def scope_spaces_function(members: str) -> str:
    """Migration 0019's pgrecall_scope_spaces() reading the grants from `members`, the name of
    space_members' one shard: every node has that copy, and a shard's statement reads it as a
    plain table of its node. (Read through space_members, the reference table, it is "a
    distributed query from a query on a shard", refused; allowed by
    citus.allow_nested_distributed_execution it was Citus' local execution of the same read,
    planned again at every call: docs/scaling.md.)"""
    return (
        "CREATE OR REPLACE FUNCTION pgrecall_scope_spaces(writes boolean) RETURNS text[] "
        "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$ "
        "SELECT coalesce(array_agg('space:' || m.space_id), '{}') "
        f"FROM {members} AS m "
        "WHERE m.user_id = pgrecall_scope_user() AND (NOT writes OR m.access = 'write') $fn$"
    )


def shard_expression(expression: str | None) -> str | None:
    """A policy expression as a shard of its table gets it: the grants read once per statement."""
    return None if expression is None else _SPACES_CALL.sub(r"(SELECT \1)", expression)


def shard_policy_statement(
    name: str, permissive: bool, cmd: str, roles: str, using: str | None, check: str | None
) -> str:
    """CREATE POLICY of one table policy for a shard (`{table}` stands for the shard), with a
    space policy's grants read once per statement (shard_expression)."""
    using, check = shard_expression(using), shard_expression(check)
    statement = (
        f'CREATE POLICY "{name}" ON {{table}} AS {"PERMISSIVE" if permissive else "RESTRICTIVE"}'
        f" FOR {_COMMANDS[cmd]} TO {roles}"
    )
    if using is not None:
        statement += f" USING ({using})"
    if check is not None:
        statement += f" WITH CHECK ({check})"
    return statement


async def sync_shard_policies(conn: AsyncConnection, table: str) -> int:
    """Make every shard of `table` carry the table's policies, as the coordinator has them
    (dropped and made again); how many policies. Statements on the shards run on their own
    connections: call after the table's changes have committed."""
    policies = (await conn.execute(_TABLE_POLICIES, {"table": table})).all()
    wanted = {p.name for p in policies}
    shapes = await conn.execute(_ON_SHARDS, {"table": table, "command": _POLICY_SHAPE})
    stale = {
        n.split(":")[0] for r in shapes if r.success for n in r.result.split(",") if n
    } | wanted
    commands = [f'DROP POLICY IF EXISTS "{n}" ON {{table}}' for n in sorted(stale)]
    commands += [
        shard_policy_statement(p.name, p.permissive, p.cmd, p.roles, p.using, p.check)
        for p in policies
    ]
    for command in commands:
        failed = [
            f"shard {r.shardid}: {r.result}"
            for r in await conn.execute(_ON_SHARDS, {"table": table, "command": command})
            if not r.success
        ]
        if failed:
            raise CitusError(f"policies of {table}'s shards: " + "; ".join(failed[:3]))
    return len(policies)


def _worker_key_command(inner: bytes, outer: bytes) -> str:
    """The scope key as a plain table of a worker (as migration 0018 makes it on the
    coordinator: the owner's, readable by the admin role alone), created or brought up to date."""
    return (
        f"CREATE TABLE IF NOT EXISTS {SCOPE_KEY_TABLE} (id smallint PRIMARY KEY CHECK (id = 1), "
        "inner_pad bytea NOT NULL, outer_pad bytea NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now()); "
        f"REVOKE ALL ON {SCOPE_KEY_TABLE} FROM PUBLIC; "
        f"GRANT SELECT ON {SCOPE_KEY_TABLE} TO {ADMIN_ROLE}; "
        f"INSERT INTO {SCOPE_KEY_TABLE} (id, inner_pad, outer_pad) "
        f"VALUES (1, '\\x{inner.hex()}', '\\x{outer.hex()}') ON CONFLICT (id) DO UPDATE "
        "SET inner_pad = EXCLUDED.inner_pad, outer_pad = EXCLUDED.outer_pad"
    )


async def citus_version(conn: AsyncConnection) -> str | None:
    """The installed Citus extension's version; None on plain Postgres."""
    return await conn.scalar(_VERSION)


async def distribution(conn: AsyncConnection) -> list[TableDistribution]:
    """How each user table, coordinator table and reference table is placed (Citus metadata)."""
    tables = DISTRIBUTED_TABLES + COORDINATOR_TABLES + REFERENCE_TABLES
    rows = await conn.execute(_DISTRIBUTION, {"tables": list(tables)})
    return [
        TableDistribution(
            r.name, r.method, r.column, r.colocation, int(r.shards or 0), bool(r.reference)
        )
        for r in rows
    ]


def distribution_problems(tables: list[TableDistribution]) -> list[str]:
    """What is not as docs/scaling.md lays it out (empty: all distributed and co-located)."""
    problems = []
    by_name = {t.table: t for t in tables}
    anchor = by_name.get(ANCHOR)
    for name in DISTRIBUTED_TABLES:
        t = by_name[name]
        if t.method != "h":
            problems.append(f"{name} not distributed")
        elif t.column != DISTRIBUTION_COLUMN:
            problems.append(f"{name} distributed by {t.column}, not {DISTRIBUTION_COLUMN}")
        elif anchor is not None and t.colocation != anchor.colocation:
            problems.append(f"{name} not co-located with {ANCHOR}")
    for name in COORDINATOR_TABLES:
        if by_name[name].method == "h":
            problems.append(f"{name} distributed (authentication reads it by hash)")
    for name in REFERENCE_TABLES:
        if name in by_name and not by_name[name].reference:
            problems.append(f"{name} not a reference table (the space policies read it)")
    return problems


async def distribute(owner_url: str, *, shard_count: int = DEFAULT_SHARD_COUNT) -> list[str]:
    """Distribute every user table by user_id, co-located, and make the shared spaces' tables
    reference tables (the ones not placed yet; in foreign-key order: a referenced table goes
    first); point the spaces function at space_members' copies and give every shard its
    table's policies. Returns the tables it placed."""
    engine = create_async_engine(owner_url, poolclass=NullPool)
    done: list[str] = []
    name = "(metadata)"
    try:
        async with engine.begin() as conn:
            if await citus_version(conn) is None:
                raise CitusError("the citus extension is not installed: not a Citus coordinator")
            # An earlier version made the scope key a reference table (see below): back to a
            # plain table first, committed before the workers make their copy (their own
            # connections would wait on this transaction's drop of the table there).
            name = "(scope key)"
            if await conn.scalar(_SCOPE_KEY_PLACED):
                await conn.execute(_UNDISTRIBUTE_KEY)
        async with engine.begin() as conn:
            placed = {t.table: t for t in await distribution(conn)}
            for name in COORDINATOR_TABLES:
                if placed[name].method == "h":
                    raise CitusError(f"{name} is distributed: it must stay on the coordinator")
            name = "(policies)"
            restrictive = list((await conn.execute(_RESTRICTIVE)).scalars())
            if restrictive:
                raise CitusError(
                    "restrictive policies on " + ", ".join(restrictive) + ": Citus 13.0 "
                    "creates a shard's policies as permissive, so the service role would see "
                    "every row such a policy admits on the workers; not distributing"
                )
            # Citus refuses a subquery in a policy of a distributed table: a store migrated
            # before Citus was installed reads its settings once per statement (migration
            # 0017), and goes back to the per-row form here.
            for statement in policy_rewrites((await conn.execute(POLICIES)).all(), once=False):
                await conn.exec_driver_sql(statement)
            # The policies' signed user (migration 0018) is checked where the rows are, on the
            # workers: the function there, and beside it a plain copy of the scope key on each
            # worker. Not a reference table: the policy calls the function inside the shard's
            # query, and a Citus table read there is "a distributed query from a query on a
            # shard" (every user-scoped statement failed so on a real cluster).
            name = "(scope key)"
            pads = (await conn.execute(_READ_KEY)).one()
            command = _worker_key_command(bytes(pads[0]), bytes(pads[1]))
            await _on_every_worker(conn, command, "copying the scope key to the workers")
            await conn.execute(text("SELECT create_distributed_function('pgrecall_scope_user()')"))
        for name in DISTRIBUTED_TABLES:
            if placed[name].method == "h":
                continue
            # One transaction per table: create_distributed_table copies the local rows into
            # the shards, and a failure leaves the tables before it distributed (rerun resumes).
            # Citus copies the rows with COPY, which forced row-level security refuses to the
            # owner ("COPY FROM not supported with row-level security"): the forcing is lifted
            # for this transaction alone and put back before it commits, so no other session
            # ever sees the table unforced, and a failure rolls both back.
            async with engine.begin() as conn, _unforced(conn, name):
                params = {"table": name, "column": DISTRIBUTION_COLUMN}
                if name == ANCHOR:
                    await conn.execute(_DISTRIBUTE_ANCHOR, {**params, "shard_count": shard_count})
                else:
                    await conn.execute(_DISTRIBUTE_WITH, {**params, "colocate_with": ANCHOR})
            done.append(name)
        for name in REFERENCE_TABLES:
            if not placed[name].reference:
                await _make_reference(engine, name)
                done.append(name)
        name = "(spaces function)"
        await _point_spaces_at_copies(engine)
        # Every shard's policies as its table's: migrations change them on the coordinator
        # alone (see _TABLE_POLICIES); made again on every run, so a rerun after an upgrade
        # brings the shards up to date.
        name = "(shard policies)"
        async with engine.connect() as conn:
            for table in DISTRIBUTED_TABLES:
                await sync_shard_policies(conn, table)
        # The copied rows stay on the coordinator's disk, unread, until truncated (children
        # first: a referenced table's local rows are truncated after its referencing ones').
        name = "(local copies)"
        if done:
            async with engine.begin() as conn:
                for table in reversed(done):
                    await conn.execute(_TRUNCATE_LOCAL, {"table": table})
        name = "(table visibility)"
        async with engine.begin() as conn:
            await conn.execute(_SHOW_SHARDS)
    except SQLAlchemyError as exc:
        raise CitusError(f"distributing {name}: {exc.__class__.__name__}: {exc}") from exc
    finally:
        await engine.dispose()
    return done


async def _make_reference(engine: AsyncEngine, table: str) -> None:
    """`table` a reference table, in one transaction: the forcing of row-level security lifted
    for the copy of its rows (as for a distributed table, above) and put back."""
    async with engine.begin() as conn, _unforced(conn, table):
        await conn.execute(_REFERENCE, {"table": table})


@asynccontextmanager
async def _unforced(conn: AsyncConnection, table: str) -> AsyncIterator[None]:
    """Row-level security's forcing of `table` lifted inside `conn`'s transaction (Citus copies
    the rows with COPY, which forced row-level security refuses to the owner) and put back
    before it commits, if it was forced: no other session sees the table unforced, and a
    failure rolls both back."""
    forced = bool(await conn.scalar(_FORCED, {"table": table}))
    if forced:
        await conn.exec_driver_sql(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
    yield
    if forced:
        await conn.exec_driver_sql(f"ALTER TABLE {table} FORCE ROW LEVEL SECURITY")


async def _point_spaces_at_copies(engine: AsyncEngine) -> None:
    """pgrecall_scope_spaces() on every node reading space_members' copy there (see
    scope_spaces_function), then called on each worker: a node without the copy fails here,
    not in a request."""
    members = "space_members"
    async with engine.begin() as conn:
        copies = (await conn.execute(_REFERENCE_COPIES, {"table": members})).one()
        if copies.missing or not copies.local:
            where = copies.missing or "this node"
            raise CitusError(
                f"no copy of {members} on {where}: run `SELECT replicate_reference_tables()` "
                "as a superuser on the coordinator (a node added later gets its copies so), "
                "then `pgrecall db distribute` again"
            )
        await conn.execute(_DISTRIBUTE_SPACES)
        await conn.exec_driver_sql(scope_spaces_function(copies.name))
    async with engine.connect() as conn:
        await _on_every_worker(conn, _SPACES_ON_WORKERS, "the spaces function on the workers")


async def _on_every_worker(conn: AsyncConnection, command: str, what: str) -> None:
    """Run `command` on every worker; a worker where it fails is named in the CitusError."""
    failed = [
        f"{r.nodename}:{r.nodeport}: {r.result}"
        for r in await conn.execute(_ON_WORKERS, {"command": command})
        if not r.success
    ]
    if failed:
        raise CitusError(f"{what}: " + "; ".join(failed))


async def cluster_status(owner_url: str, service_url: str) -> tuple[bool, str] | None:
    """doctor's Citus check; None on plain Postgres (nothing to check).

    Not ok unless every user table is distributed by user_id and co-located, api_keys is not,
    and the service role can write a row and read it back in that user's scope on every node
    that holds shards: one probe user per node, chosen by the shard its id hashes to (the SET
    LOCAL scope reaching that worker, which must accept the role's connections; rolled back).
    One random user reached one worker, so a worker refusing the role passed half the time."""
    engine = create_async_engine(owner_url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            version = await citus_version(conn)
            if version is None:
                return None
            tables = await distribution(conn)
            problems = distribution_problems(tables)
            drift: list[str] = []
            if not problems:
                run = uuid.uuid4().hex[:12]
                candidates = [
                    (r.node, r.user_id)
                    for r in await conn.execute(
                        _PROBE_CANDIDATES, {"prefix": f"{PROBE_PREFIX}{run}-"}
                    )
                ]
                nodes = list((await conn.execute(_SHARD_NODES)).scalars())
                for t in DISTRIBUTED_TABLES:
                    table = await conn.scalar(text(_POLICY_SHAPE.format(table=t)))
                    on_shards = {"table": t, "command": _POLICY_SHAPE}
                    shards = {r.result for r in await conn.execute(_ON_SHARDS, on_shards)}
                    drift += policy_drift(t, table, shards)
                if not await conn.scalar(_SPACES_READ_COPY):
                    drift.append(
                        "pgrecall_scope_spaces() does not read space_members' copy on each node "
                        "(a migration made it again?): every read of a space fails on the "
                        "workers; run `pgrecall db distribute`"
                    )
                role_setting = await conn.scalar(_ROLE_VISIBILITY, {"role": user_of(service_url)})
    except SQLAlchemyError as exc:
        return False, f"cannot read the Citus metadata: {exc.__class__.__name__}: {exc}"
    finally:
        await engine.dispose()
    if problems:
        return False, f"Citus {version}: " + "; ".join(problems) + " (run `pgrecall db distribute`)"
    if drift:
        return False, f"Citus {version}: " + "; ".join(drift)
    role = user_of(service_url)
    probes, unreached = probe_users(candidates, nodes)
    if unreached:
        return False, f"Citus {version}: no probe user hashes to {', '.join(unreached)}"
    key = await read_scope_key(owner_url)
    failures = []
    hidden = "off"
    for node, user_id in probes.items():
        try:
            wrote, hidden = await _round_trip(service_url, key, user_id)
        except SQLAlchemyError as exc:
            failures.append(f"{role} cannot write its own row on {node}: {one_line(exc)}")
            continue
        if not wrote:
            failures.append(f"{role} wrote a row on {node} but could not read it back")
    if failures:
        return False, f"Citus {version}: " + "; ".join(failures)
    if hidden == "on":
        return False, f"Citus {version}: " + visibility_advice(role, role_setting)
    shards = next(t.shards for t in tables if t.table == ANCHOR)
    return True, (
        f"Citus {version}: {len(DISTRIBUTED_TABLES)} tables distributed by "
        f"{DISTRIBUTION_COLUMN} and co-located ({shards} shards), "
        f"{' and '.join(REFERENCE_TABLES)} reference tables; {role} writes and reads back "
        f"its own row on each of {len(probes)} nodes ({', '.join(probes)})"
    )


def policy_drift(table: str, on_table: str | None, on_shards: set[str]) -> list[str]:
    """A problem when a table's shards do not carry its policies as the table has them (each
    side as "name:permissive" joined by commas; a failed shard command reads as its error)."""
    wrong = sorted(shard for shard in on_shards if shard != (on_table or ""))
    if not wrong:
        return []
    return [
        f"{table}'s shards have policies {wrong[0] or '(none)'} where the table has "
        f"{on_table or '(none)'}: rows the table's policies keep out may be visible on the workers"
    ]


def probe_users(
    candidates: Iterable[tuple[str, str]], nodes: Iterable[str]
) -> tuple[dict[str, str], list[str]]:
    """One probe user id per node that holds shards (the first candidate whose id hashes to a
    shard on it), and the nodes no candidate reached."""
    wanted = list(dict.fromkeys(nodes))
    probes: dict[str, str] = {}
    for node, user_id in candidates:
        if node in wanted and node not in probes:
            probes[node] = user_id
    return {n: probes[n] for n in wanted if n in probes}, [n for n in wanted if n not in probes]


def visibility_advice(role: str | None, role_setting: str | None) -> str:
    """Why the service role's connections hide the shard tables, and what to run.

    `role_setting`: where the role itself sets citus.override_table_visibility (None: not on
    the role, so the database's setting, which `pgrecall db distribute` makes, is missing)."""
    slow = "every new connection's type lookup takes about a second"
    if role_setting is None:
        return (
            f"citus.override_table_visibility is on for {role}: {slow} "
            "(run `pgrecall db distribute`)"
        )
    scope = "" if role_setting == "*" else f" IN DATABASE {role_setting}"
    return (
        f"citus.override_table_visibility is on for {role}: {slow}; the role's own setting "
        f"(ALTER ROLE {role}{scope} SET ...) overrides the database's, which `pgrecall db "
        f"distribute` sets: run `ALTER ROLE {role}{scope} RESET citus.override_table_visibility`"
    )


async def _round_trip(service_url: str, key: ScopeKey, user_id: str) -> tuple[bool, str]:
    """(the probe row written and read back, the connection's citus.override_table_visibility)"""
    row = {"id": uuid.uuid4(), "user_id": user_id}
    engine = create_async_engine(service_url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            tx = await conn.begin()
            try:
                scope = scope_settings(UserScope(MemoryScope(user_id)), key)
                await conn.execute(SET_LOCAL, set_local_params(scope))
                await conn.execute(_PROBE_INSERT, row)
                read = await conn.scalar(_PROBE_READ, row) == 1
                return read, str(await conn.scalar(_VISIBILITY))
            finally:
                await tx.rollback()
    finally:
        await engine.dispose()
