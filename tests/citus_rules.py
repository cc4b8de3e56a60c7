"""Would Citus accept this statement, or this schema, with the user tables distributed by user_id?

CI has no Citus, so the rules a real cluster enforced (docs/scaling.md, measured on Citus 13.0)
are checked here on the parse tree (pglast, Postgres' own parser) and on the catalog of the
migrated test database:

- a non-immutable function (now(), CURRENT_TIMESTAMP, random(), ...) inside a CASE or COALESCE
  of an UPDATE's SET: Citus evaluates such functions on the coordinator and cannot do it under a
  condition ("non-IMMUTABLE functions are not allowed in CASE or COALESCE statements");
- the clock (now(), CURRENT_TIMESTAMP, ...) as an operand of an operator whose other operand
  reads a column, in an UPDATE's SET (`now() + make_interval(secs => ttl)`): timestamptz
  arithmetic is STABLE, and Citus refuses "STABLE functions used in UPDATE queries ... with
  column references" (`to_timestamp(extract(epoch FROM now()) + ttl)` is accepted: the clock
  is read alone, on the coordinator);
- any non-immutable function in `ON CONFLICT ... DO UPDATE SET`;
- an `ON CONFLICT (...)` target without user_id (no unique index of a distributed table lacks it);
- `FOR UPDATE`/`FOR SHARE` over a distributed table not pinned to one user (locks across shards);
- schema: a primary key or unique index of a distributed table without user_id, a foreign key
  between them without user_id on both sides, or one that is ON DELETE SET NULL / SET DEFAULT.
"""

from __future__ import annotations

from typing import Any

from pglast import ast, enums, parse_sql
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.roles import DISTRIBUTED_TABLES
from tests.sql_scope import _conjuncts, _pinned, _ranges, _walk

# Names of functions with at least one overload that is not IMMUTABLE (conservative: flagged).
_NOT_IMMUTABLE = text("SELECT DISTINCT proname FROM pg_proc WHERE provolatile <> 'i'")


async def not_immutable_functions(conn: AsyncConnection) -> frozenset[str]:
    return frozenset(await conn.scalars(_NOT_IMMUTABLE))


def _calls(node: Any, not_immutable: frozenset[str]) -> list[str]:
    """Non-immutable function calls under `node` (SQL value functions count: CURRENT_TIMESTAMP)."""
    found = []
    for n in _walk(node):
        if isinstance(n, ast.FuncCall):
            name = n.funcname[-1].sval
            if name in not_immutable:
                found.append(f"{name}()")
        elif isinstance(n, ast.SQLValueFunction):
            found.append(enums.SQLValueFunctionOp(n.op).name.removeprefix("SVFOP_"))
    return found


_CLOCKS = frozenset(
    {"now", "statement_timestamp", "transaction_timestamp", "clock_timestamp", "timeofday"}
)


def _is_clock(node: Any) -> bool:
    """The current time itself (through casts): now(), CURRENT_TIMESTAMP and the like."""
    while isinstance(node, ast.TypeCast):
        node = node.arg
    if isinstance(node, ast.SQLValueFunction):
        return True
    return isinstance(node, ast.FuncCall) and node.funcname[-1].sval in _CLOCKS


def _clock_with_column(expr: Any) -> list[str]:
    """Operators under `expr` with the clock on one side and a column read on the other."""
    found = []
    for n in _walk(expr):
        if isinstance(n, ast.A_Expr) and n.lexpr is not None and n.rexpr is not None:
            for clock, other in ((n.lexpr, n.rexpr), (n.rexpr, n.lexpr)):
                if _is_clock(clock) and any(isinstance(c, ast.ColumnRef) for c in _walk(other)):
                    found.extend(_calls(clock, frozenset(_CLOCKS)))
    return found


def _distributed(ref: ast.RangeVar, ctes: set[str]) -> bool:
    shadowed = ref.schemaname is None and ref.relname in ctes  # a CTE of the same name
    return ref.relname in DISTRIBUTED_TABLES and not shadowed


def statement_problems(sql: str, not_immutable: frozenset[str]) -> list[str]:
    """Why Citus would refuse `sql` on the distributed user tables (empty: it would not)."""
    problems: list[str] = []
    for raw in parse_sql(sql):
        tree = raw.stmt
        ctes = {n.ctename for n in _walk(tree) if isinstance(n, ast.CommonTableExpr)}
        for node in _walk(tree):
            if isinstance(node, ast.UpdateStmt) and _distributed(node.relation, ctes):
                for target in node.targetList or ():
                    for call in _clock_with_column(target.val):
                        problems.append(
                            f"UPDATE {node.relation.relname}: {call} with a column in SET "
                            f"{target.name}"
                        )
                    for cond in _walk(target.val):
                        if isinstance(cond, (ast.CaseExpr, ast.CoalesceExpr)):
                            for call in _calls(cond, not_immutable):
                                problems.append(
                                    f"UPDATE {node.relation.relname}: {call} in a CASE/COALESCE "
                                    f"of SET {target.name}"
                                )
            elif isinstance(node, ast.InsertStmt) and _distributed(node.relation, ctes):
                problems += _on_conflict(node, not_immutable)
            elif isinstance(node, ast.SelectStmt) and node.lockingClause:
                refs: list[ast.RangeVar] = []
                quals: list[Any] = []
                _ranges(node.fromClause, refs, quals)
                quals.extend(_conjuncts(node.whereClause))
                pinned = _pinned(refs, quals)
                for ref in refs:
                    if _distributed(ref, ctes) and id(ref) not in pinned:
                        problems.append(f"FOR UPDATE/SHARE over {ref.relname} not pinned to a user")
    # One statement may reach the same problem through two walks (a CTE is also under the root).
    return list(dict.fromkeys(problems))


def _on_conflict(node: ast.InsertStmt, not_immutable: frozenset[str]) -> list[str]:
    clause = node.onConflictClause
    if clause is None:
        return []
    problems = []
    table = node.relation.relname
    infer = clause.infer
    if infer is not None and infer.indexElems is not None:
        columns = {e.name for e in infer.indexElems if isinstance(e, ast.IndexElem)}
        if "user_id" not in columns:
            names = sorted(columns)
            problems.append(f"INSERT INTO {table}: ON CONFLICT target {names} lacks user_id")
    for target in clause.targetList or ():
        for call in _calls(target.val, not_immutable):
            problems.append(f"INSERT INTO {table}: {call} in DO UPDATE SET {target.name}")
    return problems


_KEYS = text(
    """
    SELECT c.relname AS table, i.relname AS index, x.indisprimary AS primary,
           array(SELECT a.attname FROM unnest(x.indkey) AS k(n)
                 JOIN pg_attribute AS a ON a.attrelid = c.oid AND a.attnum = k.n) AS columns
    FROM pg_index AS x
    JOIN pg_class AS c ON c.oid = x.indrelid
    JOIN pg_class AS i ON i.oid = x.indexrelid
    WHERE (x.indisunique OR x.indisprimary) AND c.relname = ANY(CAST(:tables AS text[]))
      AND c.relnamespace = 'public'::regnamespace
    """
)
_FOREIGN_KEYS = text(
    """
    SELECT f.conname AS name, c.relname AS table, p.relname AS parent,
           f.confdeltype::text AS on_delete,
           array(SELECT a.attname FROM unnest(f.conkey) WITH ORDINALITY AS k(n, i)
                 JOIN pg_attribute AS a ON a.attrelid = f.conrelid AND a.attnum = k.n
                 ORDER BY k.i) AS columns,
           array(SELECT a.attname FROM unnest(f.confkey) WITH ORDINALITY AS k(n, i)
                 JOIN pg_attribute AS a ON a.attrelid = f.confrelid AND a.attnum = k.n
                 ORDER BY k.i) AS parent_columns
    FROM pg_constraint AS f
    JOIN pg_class AS c ON c.oid = f.conrelid
    JOIN pg_class AS p ON p.oid = f.confrelid
    WHERE f.contype = 'f' AND c.relname = ANY(CAST(:tables AS text[]))
      AND c.relnamespace = 'public'::regnamespace
    """
)


async def schema_problems(conn: AsyncConnection) -> list[str]:
    """Why Citus would refuse to distribute the migrated schema by user_id (empty: it would not)."""
    tables = {"tables": list(DISTRIBUTED_TABLES)}
    problems = []
    for r in await conn.execute(_KEYS, tables):
        if "user_id" not in r.columns:
            kind = "primary key" if r.primary else "unique index"
            problems.append(f"{r.table}: {kind} {r.index} {list(r.columns)} lacks user_id")
    for r in await conn.execute(_FOREIGN_KEYS, tables):
        pairs = dict(zip(r.columns, r.parent_columns, strict=True))
        if pairs.get("user_id") != "user_id":
            problems.append(f"{r.table}: foreign key {r.name} does not match user_id to user_id")
        elif r.on_delete in ("n", "d"):
            action = "SET NULL" if r.on_delete == "n" else "SET DEFAULT"
            problems.append(f"{r.table}: foreign key {r.name} is ON DELETE {action} with user_id")
    return problems
