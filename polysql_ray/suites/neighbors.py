"""Neighbor queries: near-miss mutations of a gold query, built with sqlglot.

Zhong, Yu and Klein (EMNLP 2020, section 3.1) distill a suite so that queries *near* the gold
(one small edit away) return a different result on at least one database. Each rule below
rewrites one node of the gold's syntax tree and yields one neighbor; :func:`neighbors` returns
every distinct neighbor (text different from the gold), tagged with its rule:

| rule          | edit                                                                  |
|---------------|-----------------------------------------------------------------------|
| strictness    | ``>`` <-> ``>=``, ``<`` <-> ``<=``                                     |
| direction     | ``>`` <-> ``<``, ``>=`` <-> ``<=``                                     |
| negation      | ``=`` <-> ``<>``, ``IN`` <-> ``NOT IN``, ``LIKE`` <-> ``NOT LIKE``     |
| join_type     | INNER JOIN -> LEFT JOIN, LEFT JOIN -> INNER JOIN                       |
| drop_predicate| one conjunct / disjunct of a WHERE or HAVING removed (or the clause)   |
| and_or        | ``AND`` <-> ``OR``                                                      |
| aggregate     | MAX <-> MIN, SUM <-> AVG, COUNT(x) <-> COUNT(DISTINCT x)               |
| distinct      | SELECT DISTINCT added / removed                                        |
| order         | one ORDER BY key's direction flipped                                   |
| limit         | LIMIT k -> k + 1; LIMIT removed                                        |
| set_op        | UNION <-> UNION ALL, INTERSECT <-> EXCEPT                              |
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import sqlglot
from sqlglot import exp


@dataclass(frozen=True)
class Neighbor:
    """One mutated query: ``rule`` (table above) and the SQL text (gold dialect)."""

    rule: str
    sql: str


_STRICT = {exp.GT: exp.GTE, exp.GTE: exp.GT, exp.LT: exp.LTE, exp.LTE: exp.LT}
_DIRECTION = {exp.GT: exp.LT, exp.LT: exp.GT, exp.GTE: exp.LTE, exp.LTE: exp.GTE}
_NEGATE = {exp.EQ: exp.NEQ, exp.NEQ: exp.EQ}
_AGG = {exp.Max: exp.Min, exp.Min: exp.Max, exp.Sum: exp.Avg, exp.Avg: exp.Sum}


def _binary(table: dict) -> Callable[[exp.Expression], exp.Expression | None]:
    def edit(node: exp.Expression) -> exp.Expression | None:
        cls = table.get(type(node))
        return cls(this=node.this.copy(), expression=node.expression.copy()) if cls else None
    return edit


def _negation(node: exp.Expression) -> exp.Expression | None:
    if type(node) in _NEGATE:
        return _binary(_NEGATE)(node)
    if isinstance(node, (exp.In, exp.Like)):
        if isinstance(node.parent, exp.Not):
            return None  # handled at the Not
        return exp.Not(this=node.copy())
    if isinstance(node, exp.Not) and isinstance(node.this, (exp.In, exp.Like)):
        return node.this.copy()
    return None


def _join_type(node: exp.Expression) -> exp.Expression | None:
    if not isinstance(node, exp.Join) or node.args.get("kind") in ("CROSS",):
        return None
    side = (node.args.get("side") or "").upper()
    new = node.copy()
    if side == "LEFT":
        new.set("side", None)
    elif not side and node.args.get("on") is not None:
        new.set("side", "LEFT")
        new.set("kind", None)
    else:
        return None
    return new


def _aggregate(node: exp.Expression) -> exp.Expression | None:
    cls = _AGG.get(type(node))
    if cls is not None:
        return cls(this=node.this.copy())
    if isinstance(node, exp.Count) and not isinstance(node.this, exp.Star):
        inner = node.this
        if isinstance(inner, exp.Distinct):
            if len(inner.expressions) == 1:
                return exp.Count(this=inner.expressions[0].copy())
            return None
        if inner is not None:
            return exp.Count(this=exp.Distinct(expressions=[inner.copy()]))
    return None


def _and_or(node: exp.Expression) -> exp.Expression | None:
    if isinstance(node, exp.And):
        return exp.Or(this=node.this.copy(), expression=node.expression.copy())
    if isinstance(node, exp.Or):
        return exp.And(this=node.this.copy(), expression=node.expression.copy())
    return None


def _set_op(node: exp.Expression) -> exp.Expression | None:
    if isinstance(node, exp.Union):
        new = node.copy()
        new.set("distinct", not node.args.get("distinct"))
        return new
    if isinstance(node, exp.Intersect):
        return exp.Except(this=node.this.copy(), expression=node.expression.copy(),
                          distinct=node.args.get("distinct"))
    if isinstance(node, exp.Except):
        return exp.Intersect(this=node.this.copy(), expression=node.expression.copy(),
                             distinct=node.args.get("distinct"))
    return None


def _order(node: exp.Expression) -> exp.Expression | None:
    if isinstance(node, exp.Ordered):
        new = node.copy()
        new.set("desc", not node.args.get("desc"))
        new.set("nulls_first", None)
        return new
    return None


#: rule -> node edit (returns the replacement node, or None when the rule does not apply).
NODE_RULES: dict[str, Callable[[exp.Expression], exp.Expression | None]] = {
    "strictness": _binary(_STRICT),
    "direction": _binary(_DIRECTION),
    "negation": _negation,
    "join_type": _join_type,
    "aggregate": _aggregate,
    "and_or": _and_or,
    "set_op": _set_op,
    "order": _order,
}


def _replacements(tree: exp.Expression) -> Iterator[tuple[str, exp.Expression]]:
    """(rule, mutated copy of the whole tree) for every node edit of :data:`NODE_RULES`."""
    nodes = list(tree.walk())
    for i, node in enumerate(nodes):
        for rule, edit in NODE_RULES.items():
            new = edit(node)
            if new is None:
                continue
            copy = tree.copy()
            target = list(copy.walk())[i]
            if target is copy:
                yield rule, new
            else:
                target.replace(new)
                yield rule, copy


def _structural(tree: exp.Expression) -> Iterator[tuple[str, exp.Expression]]:
    """Clause-level edits: dropped predicates, DISTINCT, LIMIT."""
    nodes = list(tree.walk())
    for i, node in enumerate(nodes):
        if isinstance(node, (exp.Where, exp.Having)):
            parts = list(node.this.flatten()) if isinstance(node.this, exp.Connector) else [node.this]
            for k in range(len(parts)):
                copy = tree.copy()
                clause = list(copy.walk())[i]
                if len(parts) == 1:
                    clause.pop()
                else:
                    keep = [p.copy() for j, p in enumerate(parts) if j != k]
                    cls = type(node.this)
                    cond = keep[0]
                    for p in keep[1:]:
                        cond = cls(this=cond, expression=p)
                    clause.set("this", cond)
                yield "drop_predicate", copy
        if isinstance(node, exp.Select):
            copy = tree.copy()
            sel = list(copy.walk())[i]
            sel.set("distinct", None if node.args.get("distinct") else exp.Distinct())
            yield "distinct", copy
        if isinstance(node, exp.Limit):
            n = node.expression
            if isinstance(n, exp.Literal) and not n.is_string:
                copy = tree.copy()
                lim = list(copy.walk())[i]
                lim.set("expression", exp.Literal.number(int(n.this) + 1))
                yield "limit", copy
                copy = tree.copy()
                list(copy.walk())[i].pop()
                yield "limit", copy


def neighbors(gold_sql: str, dialect: str = "sqlite", max_neighbors: int = 60) -> list[Neighbor]:
    """The distinct neighbor queries of ``gold_sql`` (module table), in a fixed order, at most
    ``max_neighbors`` (the first ones). Unparsable gold SQL gives ``[]``."""
    try:
        tree = sqlglot.parse_one(gold_sql, read=dialect)
    except Exception:  # noqa: BLE001 - unreadable gold: no neighbors
        return []
    if tree is None:
        return []
    gold_text = tree.sql(dialect=dialect)
    seen = {gold_text}
    out: list[Neighbor] = []
    for rule, new in list(_replacements(tree)) + list(_structural(tree)):
        try:
            sql = new.sql(dialect=dialect)
        except Exception:  # noqa: BLE001 - a mutation sqlglot cannot print: skipped
            continue
        if sql not in seen:
            seen.add(sql)
            out.append(Neighbor(rule, sql))
        if len(out) >= max_neighbors:
            break
    return out
