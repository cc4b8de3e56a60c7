"""Where Citus keeps one user's rows: the shard of each distributed table that holds the user,
and the worker that holds the shards (one shard group: the tables are co-located). Read on the
coordinator by the query path's shard router (app/services/query/shards.py), never per query:
its answer is cached a few seconds.

Citus' own catalog (pg_dist_shard, pg_dist_placement, pg_dist_node) is readable by every role,
the service role included; `worker_hash` is the hash Citus routes a `user_id` by (for text,
Postgres' `hashtext`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession


@dataclass(frozen=True)
class Placement:
    """The user's shard of each table, all on one worker (None: the tables are not all
    distributed, or their shards are not on one node)."""

    host: str
    port: int
    shards: dict[str, int]  # table -> shard id


_CITUS = text("SELECT to_regclass('pg_catalog.pg_dist_shard') IS NOT NULL AS citus")

_PLACEMENT = text(
    """
    SELECT s.logicalrelid::regclass::text AS tbl, s.shardid, n.nodename, n.nodeport
    FROM pg_dist_shard AS s
    JOIN pg_dist_placement AS p ON p.shardid = s.shardid
    JOIN pg_dist_node AS n ON n.groupid = p.groupid AND n.isactive
    WHERE s.logicalrelid = ANY(CAST(:tables AS regclass[]))
      AND worker_hash(CAST(:user_id AS text))
          BETWEEN CAST(s.shardminvalue AS int) AND CAST(s.shardmaxvalue AS int)
    """
)


def placement_check(shard_id: int) -> str:
    """A statement that fails (division by zero) unless shard `shard_id` is placed on the node
    that runs it: a worker's copy of the catalog says where each shard is since it moved."""
    return (
        "SELECT 1 / count(*) FROM pg_dist_placement AS p JOIN pg_dist_local_group AS g "
        f"ON g.groupid = p.groupid WHERE p.shardid = {int(shard_id)}"
    )


class ShardRepository:
    """Reads Citus' catalog on the coordinator (in a connection or session of any role)."""

    def __init__(self, connection: AsyncConnection | AsyncSession) -> None:
        self.connection = connection

    async def citus(self) -> bool:
        """Whether this database has Citus' catalog (the extension is installed)."""
        return bool((await self.connection.execute(_CITUS)).scalar_one())

    async def placement(self, user_id: str, tables: Sequence[str]) -> Placement | None:
        """Where `user_id`'s rows of `tables` are: one worker and a shard per table, or None
        when some table is not hash-distributed or the shards are not placed on one node. Only
        where `citus()` (the catalog is not there otherwise)."""
        rows = (
            await self.connection.execute(_PLACEMENT, {"tables": list(tables), "user_id": user_id})
        ).all()
        nodes = {(row.nodename, row.nodeport) for row in rows}
        shards = {row.tbl: row.shardid for row in rows}
        if len(nodes) != 1 or set(shards) != set(tables) or len(rows) != len(tables):
            return None
        ((host, port),) = nodes
        return Placement(host, int(port), shards)
