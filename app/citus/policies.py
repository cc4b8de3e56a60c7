"""Row-level security on the shards: every shard carries its table's policies (migrations change
them on the coordinator alone), with their scope calls (settings, the signed user, the grants)
read once per statement; the spaces function reads space_members' copy on each node."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.citus.metadata import CitusError
from app.roles import read_once, scope_function

# Each distributed table's policies, as "name:permissive" sorted, on the coordinator and on
# each of its shards (doctor: a shard whose policies differ is not guarded as the table is).
POLICY_SHAPE = (
    "SELECT coalesce(string_agg(p.polname || ':' || p.polpermissive::text, ',' "
    "ORDER BY p.polname), '') FROM pg_policy AS p WHERE p.polrelid = '{table}'::regclass"
)


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
ON_SHARDS = text(
    "SELECT shardid, success, result FROM run_command_on_shards(CAST(:table AS regclass), "
    "replace(:command, '{table}', '%s'))"
)
_COMMANDS = {"*": "ALL", "r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE"}
# A shard's policies read their scope calls (settings, the signed user, a space's grants) once
# per statement (InitPlans), not once per row: a shard is a plain table of its worker, which
# takes the subquery Citus refuses on the distributed table. Per row, a member's count of a
# 2,000-memory space took 1.1-1.3 s instead of 22-43 ms (docs/scaling.md, "Shared spaces on
# Citus"), and a small user's keyword statement called the signed user's check for each of the
# ~240 postings it read (docs/scaling.md, "The policies on the shards").


def scope_spaces_function(members: str, plpgsql: bool = True) -> str:
    """Migration 0021's pgrecall_scope_spaces() reading the grants from `members`, the name of
    space_members' one shard: every node has that copy, and a shard's statement reads it as a
    plain table of its node. (Read through space_members, the reference table, it is "a
    distributed query from a query on a shard", refused; allowed by
    citus.allow_nested_distributed_execution it was Citus' local execution of the same read,
    planned again at every call: docs/scaling.md.) In PL/pgSQL (`plpgsql`: the nodes' Postgres
    is before 18, as Citus 13's always is), whose plan is kept for the session, as migration
    0022 makes it off Citus."""
    query = (
        "SELECT coalesce(array_agg('space:' || m.space_id), '{}') "
        f"FROM {members} AS m "
        "WHERE m.user_id = (SELECT pgrecall_scope_user()) AND (NOT writes OR m.access = 'write')"
    )
    return scope_function("pgrecall_scope_spaces(writes boolean)", "text[]", query, plpgsql)


def shard_expression(expression: str | None) -> str | None:
    """A policy expression as a shard of its table gets it: its scope calls read once per
    statement (app/roles.read_once)."""
    return None if expression is None else read_once(expression)


def shard_policy_statement(
    name: str, permissive: bool, cmd: str, roles: str, using: str | None, check: str | None
) -> str:
    """CREATE POLICY of one table policy for a shard (`{table}` stands for the shard), with its
    scope calls read once per statement (shard_expression)."""
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
    shapes = await conn.execute(ON_SHARDS, {"table": table, "command": POLICY_SHAPE})
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
            for r in await conn.execute(ON_SHARDS, {"table": table, "command": command})
            if not r.success
        ]
        if failed:
            raise CitusError(f"policies of {table}'s shards: " + "; ".join(failed[:3]))
    return len(policies)


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
