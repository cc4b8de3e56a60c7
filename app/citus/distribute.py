"""`pgrecall db distribute`: every user table distributed by user_id and co-located, the shared
spaces' tables made reference tables, the scope key and the spaces function on every node, and
every shard's policies made its table's (docs/scaling.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.citus.metadata import (
    ANCHOR,
    DEFAULT_SHARD_COUNT,
    DISTRIBUTION_COLUMN,
    CitusError,
    citus_version,
    distribution,
)
from app.citus.policies import scope_spaces_function, sync_shard_policies
from app.roles import (
    ADMIN_ROLE,
    CACHES_SQL_FUNCTIONS,
    COORDINATOR_TABLES,
    DISTRIBUTED_TABLES,
    POLICIES,
    REFERENCE_TABLES,
    SCOPE_KEY_TABLE,
    SERVER_VERSION,
    policy_rewrites,
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
_SERVER_VERSION = text(SERVER_VERSION)
_DISTRIBUTE_SET_LOCAL = "SELECT create_distributed_function('pgrecall_set_local(text[], text[])')"
_DISTRIBUTE_SPACES = text("SELECT create_distributed_function('pgrecall_scope_spaces(boolean)')")
_SPACES_ON_WORKERS = "SELECT pgrecall_scope_spaces(false)"

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


# Migration 0024's triggers (trigger, table): they version the spaces off Citus only.
SPACE_VERSION_TRIGGERS = (
    ("memory_items_space_insert", "memory_items"),
    ("memory_items_space_update", "memory_items"),
    ("memory_items_space_delete", "memory_items"),
    ("search_stats_space_version", "search_stats"),
)

_TRIGGERS = text(
    "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname = ANY(CAST(:names AS text[]))"
).bindparams(names=[trigger for trigger, _ in SPACE_VERSION_TRIGGERS])


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
            # A store migrated before Citus was installed has migration 0024's triggers that
            # version the shared spaces for the service's copies of them: Citus refuses to
            # distribute a table with triggers, and the service keeps no copies on Citus (each
            # space's statements route to its shard). Dropped, and the versions put back to 0,
            # which no copy is ever used at.
            # (Only those there: Citus refuses even DROP TRIGGER IF EXISTS on a distributed
            # table, as on a rerun.)
            name = "(space versions)"
            there = set((await conn.execute(_TRIGGERS)).scalars())
            for trigger, table in SPACE_VERSION_TRIGGERS:
                if trigger in there:
                    await conn.execute(text(f"DROP TRIGGER {trigger} ON {table}"))
        async with engine.begin() as conn, _unforced(conn, "search_stats"):
            await conn.execute(text("UPDATE search_stats SET version = 0 WHERE version <> 0"))
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
            # The query path begins its read transactions on the workers too (reads on the
            # shard's worker, app/services/query/shards.py) with the scope's SET LOCALs: the
            # function must be there. A store migrated before Citus was installed had it on
            # the coordinator alone (found by doctor on a moved store, 2026-12-07).
            await conn.execute(text(_DISTRIBUTE_SET_LOCAL))
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
        version = int(await conn.scalar(_SERVER_VERSION))
        plpgsql = version < CACHES_SQL_FUNCTIONS
        await conn.exec_driver_sql(scope_spaces_function(copies.name, plpgsql))
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
