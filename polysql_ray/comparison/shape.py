"""What the gold SQL says about the shape of its result: ordering keys, LIMIT, the probe query.

:func:`analyze_gold` parses the gold SQL with sqlglot (in the gold's dialect) and returns a
:class:`GoldShape`, used by :func:`polysql_ray.comparison.result_set.compare`:

* ``ordered``: the gold has a **top-level** ORDER BY (on the outermost SELECT or set operation;
  ORDER BY inside subqueries, CTEs or window functions does not order the result).
* ``order_keys``: the gold output positions of the ORDER BY keys that are output columns, found
  by positional reference (``ORDER BY 2``), alias (``ORDER BY cnt``) or identical expression
  (``ORDER BY count(*)`` with ``count(*)`` selected). Columns after a ``*`` are never resolved
  by position (the star's width is unknown statically).
* ``limit``: the literal LIMIT k, if any.

Sound behaviour when an ORDER BY key is not an output column, and for LIMIT ties: we build
``probe_sql``, a rewrite of the gold that appends the missing key expressions as trailing output
columns (aliased ``__polysql_key<i>``) and, under LIMIT k, uses ``LIMIT k + tie_window``. The
pipeline runs it once on the gold's engine and passes the table to ``compare`` as ``probe``;
its first columns are the gold columns, ``probe_keys`` locate every ORDER BY key in it
(negative = counted from the end). From it ``compare`` finds which gold rows are tied (rows
with equal keys compare as a multiset) and whether rows beyond the cut tie with the last kept
row (flag ``ties_at_limit``). A probe is not built where appending columns would change the
rows: a ``SELECT DISTINCT`` or a set operation with unresolved keys (flag
``order_keys_unknown``; then rows compare strictly in order). If sqlglot cannot parse the gold,
the shape is bag semantics with flag ``unparsed_gold``.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp

TIE_WINDOW = 100  # extra rows fetched by the probe beyond LIMIT k (the tied rows past the cut)


@dataclass(frozen=True)
class GoldShape:
    """Result-shape facts about one gold query (see module docstring).

    Attributes:
        ordered: top-level ORDER BY present.
        order_keys: gold output positions (0-based) of the ORDER BY keys that are output
            columns, in ORDER BY order.
        keys_complete: every ORDER BY key is an output column (``order_keys`` is the full key).
        limit: LIMIT k when it is a literal, else None.
        probe_sql: gold rewrite to run on the gold engine (None when not needed/possible).
        probe_keys: positions of all ORDER BY keys in the probe table (negative = from end).
        flags: caveats copied into every comparison (``unparsed_gold``, ``order_keys_unknown``,
            ``limit_without_order``).
    """

    ordered: bool = False
    order_keys: tuple[int, ...] = ()
    keys_complete: bool = True
    limit: int | None = None
    probe_sql: str | None = None
    probe_keys: tuple[int, ...] = ()
    flags: tuple[str, ...] = ()

    @classmethod
    def unparsed(cls) -> "GoldShape":
        """Safe default when the gold cannot be parsed: bag semantics, flagged."""
        return cls(flags=("unparsed_gold",))


def _literal_int(node: exp.Expression | None) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            return int(node.this)
        except ValueError:
            return None
    return None


def _resolve_key(key: exp.Expression, selects: list[exp.Expression]) -> int | None:
    """Output position of ORDER BY key ``key`` among ``selects`` (before any star), else None."""
    width = next((i for i, s in enumerate(selects) if isinstance(s, exp.Star)
                  or (isinstance(s, exp.Column) and isinstance(s.this, exp.Star))), len(selects))
    pos = _literal_int(key)
    if pos is not None:
        return pos - 1 if 1 <= pos <= width else None
    if isinstance(key, exp.Column) and not key.table:
        for i, s in enumerate(selects[:width]):
            if isinstance(s, exp.Alias) and s.alias.lower() == key.name.lower():
                return i
    for i, s in enumerate(selects[:width]):
        if (s.this if isinstance(s, exp.Alias) else s) == key:
            return i
    return None


def analyze_gold(gold_sql: str, dialect: str, tie_window: int = TIE_WINDOW) -> GoldShape:
    """Analyse gold SQL (sqlglot, dialect ``dialect``) into a :class:`GoldShape`.

    Args:
        gold_sql: one gold statement.
        dialect: sqlglot dialect name of the gold (``sqlite``, ``mysql`` ...).
        tie_window: extra rows the probe fetches past LIMIT k (to see the tied rows at the cut).
    Returns:
        the shape; never raises (unparseable gold gives :meth:`GoldShape.unparsed`).
    """
    try:
        tree = sqlglot.parse_one(gold_sql, read=dialect)
    except Exception:  # sqlglot raises ParseError/TokenError and occasionally others
        return GoldShape.unparsed()
    while isinstance(tree, (exp.Subquery, exp.Paren)) and not tree.args.get("order") \
            and not tree.args.get("limit"):
        tree = tree.this
    if not isinstance(tree, exp.Query):
        return GoldShape.unparsed()
    limit_node = tree.args.get("limit")
    limit = _literal_int(limit_node.expression) if isinstance(limit_node, exp.Limit) else None
    order = tree.args.get("order")
    if not order or not order.expressions:
        return GoldShape(limit=limit, flags=("limit_without_order",) if limit_node else ())
    selects = list(tree.selects)
    keys = [o.this if isinstance(o, exp.Ordered) else o for o in order.expressions]
    resolved = [_resolve_key(k, selects) for k in keys]
    missing = [k for k, r in zip(keys, resolved) if r is None]
    order_keys = tuple(r for r in resolved if r is not None)
    flags: list[str] = []
    can_extend = isinstance(tree, exp.Select) and not tree.args.get("distinct")
    if missing and not can_extend:
        flags.append("order_keys_unknown")
        return GoldShape(True, order_keys, False, limit, None, (), tuple(flags))
    if not missing and limit is None:
        return GoldShape(True, order_keys, True, limit, None, order_keys, ())
    probe = tree.copy()
    for i, k in enumerate(missing):
        probe = probe.select(exp.alias_(k.copy(), f"__polysql_key{i}"), append=True, copy=False)
    if limit is not None:
        probe.args["limit"].set("expression", exp.Literal.number(limit + tie_window))
    probe_keys, j = [], -len(missing)
    for r in resolved:
        if r is None:
            probe_keys.append(j)
            j += 1
        else:
            probe_keys.append(r)
    try:
        probe_sql = probe.sql(dialect=dialect)
    except Exception:
        return GoldShape(True, order_keys, not missing, limit, None, (), ("order_keys_unknown",))
    return GoldShape(True, order_keys, not missing, limit, probe_sql, tuple(probe_keys), ())
