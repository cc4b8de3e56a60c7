"""doctor's Citus check (`cluster_status`): the placement, the shards' policies, the spaces
function, and a write and read back as the service role on every node that holds shards."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import replace

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from app.citus.metadata import (
    ANCHOR,
    DISTRIBUTION_COLUMN,
    citus_version,
    distribution,
    distribution_problems,
)
from app.citus.policies import ON_SHARDS, POLICY_SHAPE, policy_drift
from app.db import (
    SET_LOCAL,
    ScopeKey,
    UserScope,
    create_engine,
    one_line,
    read_transaction,
    scope_settings,
    set_local_params,
)
from app.domain import MemoryScope
from app.roles import (
    DISTRIBUTED_TABLES,
    REFERENCE_TABLES,
    read_scope_key,
    user_of,
)
from app.services.query.shards import ShardRouter

# doctor: the spaces function reads space_members' shard (scope_spaces_function), not the table.
_SPACES_READ_COPY = text(
    "SELECT coalesce(bool_and(p.prosrc LIKE '%FROM ' || shard_name(s.logicalrelid, s.shardid) "
    "|| ' AS m%'), false) FROM pg_proc AS p, pg_dist_shard AS s "
    "WHERE p.proname = 'pgrecall_scope_spaces' AND s.logicalrelid = 'space_members'::regclass"
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


async def cluster_status(
    owner_url: str, service_url: str, *, direct_reads: bool = True
) -> tuple[bool, str] | None:
    """doctor's Citus check; None on plain Postgres (nothing to check).

    Not ok unless every user table is distributed by user_id and co-located, api_keys is not,
    and the service role can write a row and read it back in that user's scope on every node
    that holds shards: one probe user per node, chosen by the shard its id hashes to (the SET
    LOCAL scope reaching that worker, which must accept the role's connections; rolled back).
    One random user reached one worker, so a worker refusing the role passed half the time.

    With `direct_reads` (PGRECALL_CITUS_DIRECT_READS_TTL_S > 0), also that each such node
    takes the query path's reads of the probe user's shards straight from this host
    (app/services/query/shards.py): a worker that refuses them is not an error of the
    service, which then reads through the coordinator, but that costs each query about 1.7x."""
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
                    table = await conn.scalar(text(POLICY_SHAPE.format(table=t)))
                    on_shards = {"table": t, "command": POLICY_SHAPE}
                    shards = {r.result for r in await conn.execute(ON_SHARDS, on_shards)}
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
    if direct_reads:
        for node, refused in (await _direct_reads(service_url, key, probes)).items():
            failures.append(
                f"the query path cannot read {role}'s shards on {node} from this host "
                f"({refused}): its reads go through the coordinator instead, about 1.7x "
                f"the time per query; let {node} accept {role} from this host (pg_hba.conf) "
                "or turn the direct reads off (PGRECALL_CITUS_DIRECT_READS_TTL_S=0)"
            )
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
        + ("; the query path reads its shards there directly" if direct_reads else "")
    )


async def _direct_reads(service_url: str, key: ScopeKey, probes: dict[str, str]) -> dict[str, str]:
    """The nodes whose probe user's shards the query path cannot read there from this host,
    and why: through the service's own router and read transaction (one of each for all)."""
    engine = create_engine(service_url, pool_size=1, scope_key=key)
    router = ShardRouter(engine, pool_size=1)
    refusals: dict[str, str] = {}
    try:
        for node, user_id in probes.items():
            refused: list[BaseException] = []
            try:
                route = await router.route(user_id)
                if route is None:
                    refusals[node] = "the shards' placement could not be read"
                    continue
                route = replace(route, failed=refused.append)
                async with read_transaction(engine, user_id, route=route) as reads:
                    await reads.fetch("SELECT count(*) AS n FROM messages AS m", {})
            except SQLAlchemyError as exc:
                refused.append(exc)
            if refused:
                refusals[node] = one_line(refused[0])
    finally:
        await router.close()
        await engine.dispose()
    return refusals


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
