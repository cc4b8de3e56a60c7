"""Does a SQL statement pin every user-data table it touches to one user?

Parsed with Postgres' own parser (pglast = libpg_query), so CTEs, LATERAL, EXISTS, UNION and
casts are read as Postgres reads them. A reference to a table in USER_TABLES passes when its
query level has, as a top-level AND conjunct of WHERE or of a JOIN's ON, `ref.user_id = X` where X
is a bind parameter, a constant (possibly cast), or the user_id of another reference of the same
level that is itself pinned. That is both the isolation rule (one user's rows) and what Citus
needs to route the statement to the one shard of that user (`user_id` = the distribution column).

An INSERT into a user table must name its user_id column. Any other mention of a user table
(ANALYZE, CREATE INDEX, a table not covered by a DML scope) is reported: those are whole-table
statements and belong on a reviewed allow-list.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pglast import ast, enums, parse_sql

from app.roles import USER_TABLES


def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, (list, tuple)):
        yield from node
    elif isinstance(node, ast.Node):
        for slot in type(node).__slots__:
            value = getattr(node, slot, None)
            if isinstance(value, (ast.Node, list, tuple)):
                yield value


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Node):
            yield current
        stack.extend(_children(current))


def _conjuncts(expr: Any) -> list[Any]:
    """Top-level AND terms (an OR or NOT pins nothing)."""
    if expr is None:
        return []
    if isinstance(expr, ast.BoolExpr) and expr.boolop == enums.BoolExprType.AND_EXPR:
        out: list[Any] = []
        for arg in expr.args:
            out.extend(_conjuncts(arg))
        return out
    return [expr]


def _ranges(items: Any, ranges: list[ast.RangeVar], quals: list[Any]) -> None:
    """Table references of one query level (FROM / USING / JOIN trees) and the JOINs' ON quals.
    Subselects and functions in FROM are query levels (or no tables) of their own."""
    for item in items or ():
        if isinstance(item, ast.RangeVar):
            ranges.append(item)
        elif isinstance(item, ast.JoinExpr):
            _ranges([item.larg, item.rarg], ranges, quals)
            quals.extend(_conjuncts(item.quals))


def _name(ref: ast.RangeVar) -> str:
    return ref.alias.aliasname if ref.alias is not None else ref.relname


def _fields(expr: Any) -> tuple[str, ...] | None:
    if isinstance(expr, ast.ColumnRef) and all(isinstance(f, ast.String) for f in expr.fields):
        return tuple(f.sval for f in expr.fields)
    return None


def _constant(expr: Any) -> bool:
    while isinstance(expr, ast.TypeCast):
        expr = expr.arg
    return isinstance(expr, (ast.ParamRef, ast.A_Const))


def _user_id_of(expr: Any, refs: list[ast.RangeVar]) -> ast.RangeVar | None:
    """The reference whose user_id column `expr` is (unqualified only with one reference)."""
    fields = _fields(expr)
    if fields is None or fields[-1] != "user_id":
        return None
    if len(fields) == 1:
        return refs[0] if len(refs) == 1 else None
    return next((r for r in refs if _name(r) == fields[-2]), None)


def _pinned(refs: list[ast.RangeVar], quals: list[Any]) -> set[int]:
    """ids of the references pinned to one user by `user_id = constant` (and chains of them)."""
    pinned: set[int] = set()
    pairs: list[tuple[Any, Any]] = []
    for q in quals:
        if (
            isinstance(q, ast.A_Expr)
            and q.kind == enums.A_Expr_Kind.AEXPR_OP
            and [n.sval for n in q.name] == ["="]
        ):
            pairs.append((q.lexpr, q.rexpr))
    changed = True
    while changed:
        changed = False
        for left, right in pairs:
            for a, b in ((left, right), (right, left)):
                ref = _user_id_of(a, refs)
                if ref is None or id(ref) in pinned:
                    continue
                other = _user_id_of(b, refs)
                if _constant(b) or (other is not None and id(other) in pinned):
                    pinned.add(id(ref))
                    changed = True
    return pinned


def _cte_names(tree: Any) -> set[str]:
    return {n.ctename for n in _walk(tree) if isinstance(n, ast.CommonTableExpr)}


def _is_user_table(ref: ast.RangeVar, ctes: set[str]) -> bool:
    shadowed = ref.schemaname is None and ref.relname in ctes  # a CTE of the same name
    return ref.relname in USER_TABLES and not shadowed


def violations(sql: str) -> list[str]:
    """Why `sql` is not scoped to one user (empty when every user-table reference is)."""
    problems: list[str] = []
    for raw in parse_sql(sql):
        tree = raw.stmt
        ctes = _cte_names(tree)
        checked: set[int] = set()

        for node in _walk(tree):
            refs: list[ast.RangeVar] = []
            quals: list[Any] = []
            if isinstance(node, ast.SelectStmt):
                _ranges(node.fromClause, refs, quals)
                where = node.whereClause
            elif isinstance(node, ast.UpdateStmt):
                refs.append(node.relation)
                _ranges(node.fromClause, refs, quals)
                where = node.whereClause
            elif isinstance(node, ast.DeleteStmt):
                refs.append(node.relation)
                _ranges(node.usingClause, refs, quals)
                where = node.whereClause
            elif isinstance(node, ast.InsertStmt):
                if _is_user_table(node.relation, ctes):
                    checked.add(id(node.relation))
                    columns = {c.name for c in node.cols or ()}
                    if "user_id" not in columns:
                        problems.append(f"INSERT INTO {node.relation.relname} without user_id")
                continue
            else:
                continue
            quals.extend(_conjuncts(where))
            pinned = _pinned(refs, quals)
            for ref in refs:
                if not _is_user_table(ref, ctes):
                    continue
                checked.add(id(ref))
                if id(ref) not in pinned:
                    problems.append(f"{ref.relname} AS {_name(ref)}: no user_id = <value>")
        for node in _walk(tree):
            if (
                isinstance(node, ast.RangeVar)
                and _is_user_table(node, ctes)
                and id(node) not in checked
            ):
                kind = type(tree).__name__
                problems.append(f"{node.relname} in a {kind} (whole table)")
    return problems


def copy_violations(table: str, columns: tuple[str, ...]) -> list[str]:
    """COPY into a user table must carry user_id per row."""
    if table in USER_TABLES and "user_id" not in columns:
        return [f"COPY {table} without user_id"]
    return []
