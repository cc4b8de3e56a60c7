"""Where Citus has put each table (its metadata): the distribution docs/scaling.md lays out,
and what differs from it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.roles import (
    COORDINATOR_TABLES,
    DISTRIBUTED_TABLES,
    REFERENCE_TABLES,
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
