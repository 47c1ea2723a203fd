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

ORDER BY keys written over select aliases (``ORDER BY CASE WHEN total IS NULL THEN 1 END``
where ``total`` is an output alias) are appended to the probe with the alias replaced by its
expression, so the probe runs on every engine. When the probe cannot run the comparison
flags ``tie_probe_unavailable`` (rows then compare strictly in order).

Determinism (:func:`determinism_flags`, stored in ``flags``): ``time_dependent_gold`` (the
result depends on the clock: ``'now'``, ``current_date`` ...), ``nondeterministic_gold``
(random/uuid functions, LIMIT without ORDER BY at any depth, ORDER BY ... LIMIT inside a
subquery whose cut may fall in a tie: the top-level cut is checked on the data by the probe).
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
            ``limit_without_order``, ``nondeterministic_gold``, ``time_dependent_gold``).
        order_by_anywhere: the gold text contains ``order by`` (any depth; test-suite's rule
            for list comparison, ``policy.order = order_by_anywhere``).
        ties_probe_sql: one-row query telling, for each ORDER BY ... LIMIT below the top level,
            whether the cut falls in a tie, and whether a top-level ungrouped column takes
            several values in one group (:func:`nested_ties_probe`); None when neither applies.
        nested_cuts: number of ORDER BY ... LIMIT cuts below the top level.
    """

    ordered: bool = False
    order_keys: tuple[int, ...] = ()
    keys_complete: bool = True
    limit: int | None = None
    probe_sql: str | None = None
    probe_keys: tuple[int, ...] = ()
    flags: tuple[str, ...] = ()
    order_by_anywhere: bool = False
    ties_probe_sql: str | None = None
    nested_cuts: int = 0

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
    anywhere = "order by" in (gold_sql or "").lower()
    try:
        tree = sqlglot.parse_one(gold_sql, read=dialect)
    except Exception:  # sqlglot raises ParseError/TokenError and occasionally others
        return GoldShape(flags=("unparsed_gold",), order_by_anywhere=anywhere)
    try:
        det, cuts = _scan(tree)
        ties_probe = nested_ties_probe(tree, dialect, cuts)
        shape = _analyze_tree(tree, dialect, tie_window)
    except RecursionError:  # a tree deeper than Python's stack: bag semantics, flagged
        return GoldShape(flags=("unparsed_gold",), order_by_anywhere=anywhere)
    return GoldShape(shape.ordered, shape.order_keys, shape.keys_complete, shape.limit, shape.probe_sql,
                     shape.probe_keys, tuple(dict.fromkeys(shape.flags + det)), anywhere, ties_probe,
                     len(cuts))


#: sqlglot node classes whose value depends on the clock.
CLOCK_NODES = ("CurrentTimestamp", "CurrentDate", "CurrentTime", "CurrentDatetime", "CurrentTimestampLTZ",
               "Localtime", "Localtimestamp", "UnixSeconds")
#: Function names (lower case) whose value depends on the clock.
CLOCK_FUNCTIONS = frozenset({"now", "current_timestamp", "current_date", "current_time", "localtime",
                             "localtimestamp", "sysdate", "curdate", "curtime", "unix_timestamp",
                             "utc_timestamp", "utc_date", "utc_time", "today", "get_current_time",
                             "clock_timestamp", "statement_timestamp", "transaction_timestamp"})
#: Literals that SQLite date functions read as the current time (``strftime('%Y', 'now')``).
CLOCK_LITERALS = frozenset({"now"})
#: Function names / node classes returning a random or unique value.
RANDOM_FUNCTIONS = frozenset({"random", "rand", "randomblob", "uuid", "gen_random_uuid",
                              "uuid_generate_v4", "newid"})
RANDOM_NODES = ("Rand", "Randn", "Randstr", "Uuid", "TableSample")


def determinism_flags(tree: exp.Expression, skip: exp.Expression | None = None) -> tuple[str, ...]:
    """``time_dependent_gold`` / ``nondeterministic_gold`` for a parsed query (module docstring).

    Static: random or clock functions and LIMIT without ORDER BY at any depth. ORDER BY ...
    LIMIT below the top level is decided on the data (:func:`nested_ties_probe`): a tie at such a
    cut is invisible in the gold's result, so the chosen row may vary between engines and runs.
    ``skip``: a node of ``tree`` read as if it were absent, with all below it (the prediction's
    top-level LIMIT, :func:`analyze_prediction`), so the tree is not copied to drop it.
    """
    return _determinism(tree, skip)[0]


# What a node's class alone tells determinism_flags (one entry per sqlglot node class: bounded).
_K_NONE, _K_TIME, _K_RANDOM, _K_ANON, _K_CALL, _K_LITERAL, _K_COLUMN, _K_LIMIT, _K_SELECT = range(9)
_KINDS: dict[type, int] = {}


def _kind(cls: type) -> int:
    """The :func:`determinism_flags` branch a node of class ``cls`` takes, decided from the class
    where the class decides it (its name, a function's SQL name), in the order of the checks."""
    name = cls.__name__
    if name in CLOCK_NODES:
        return _K_TIME
    if issubclass(cls, exp.Func):
        if issubclass(cls, exp.Anonymous):
            return _K_ANON  # the name is the node's own
        try:
            fname = cls.sql_name().lower()
        except Exception:  # noqa: BLE001 - no SQL name of its own: raises per node, as before
            return _K_CALL
        if fname in CLOCK_FUNCTIONS:
            return _K_TIME
        return _K_RANDOM if (fname in RANDOM_FUNCTIONS or name in RANDOM_NODES) else _K_NONE
    if name in RANDOM_NODES:
        return _K_RANDOM
    if issubclass(cls, exp.Literal):
        return _K_LITERAL
    if issubclass(cls, exp.Column):
        return _K_COLUMN
    if issubclass(cls, exp.Limit):
        return _K_LIMIT
    return _K_SELECT if issubclass(cls, exp.Select) else _K_NONE


_CLOCK_COLUMNS = frozenset({"current_timestamp", "current_date", "current_time"})


def _determinism(tree: exp.Expression, skip: exp.Expression | None = None) \
        -> tuple[tuple[str, ...], list[exp.Select]]:
    """(:func:`determinism_flags`, the SELECT nodes of ``tree`` outside ``skip`` in
    ``find_all`` order), from one walk of the tree."""
    flags: list[str] = []
    selects: list[exp.Select] = []
    kinds = _KINDS
    for node in tree.walk(prune=None if skip is None else (lambda n: n is skip)):
        if node is skip:
            continue
        cls = type(node)
        kind = kinds.get(cls)
        if kind is None:
            kind = kinds[cls] = _kind(cls)
        if kind == _K_NONE:
            continue
        if kind == _K_TIME:
            flags.append("time_dependent_gold")
        elif kind == _K_RANDOM:
            flags.append("nondeterministic_gold")
        elif kind == _K_SELECT:
            selects.append(node)
        elif kind == _K_ANON or kind == _K_CALL:
            fname = (node.name if kind == _K_ANON else node.sql_name()).lower()
            if fname in CLOCK_FUNCTIONS:
                flags.append("time_dependent_gold")
            elif fname in RANDOM_FUNCTIONS or cls.__name__ in RANDOM_NODES:
                flags.append("nondeterministic_gold")
        elif kind == _K_LITERAL:
            if node.is_string and node.this.strip().lower() in CLOCK_LITERALS:
                flags.append("time_dependent_gold")
        elif kind == _K_COLUMN:
            if not node.table and not node.this.quoted and node.name.lower() in _CLOCK_COLUMNS:
                flags.append("time_dependent_gold")
        else:  # _K_LIMIT
            query = node.parent
            if not isinstance(query, exp.Query) or not query.args.get("order"):
                flags.append("nondeterministic_gold")
    return tuple(dict.fromkeys(flags)), selects


def _scan(tree: exp.Expression, skip: exp.Expression | None = None) \
        -> tuple[tuple[str, ...], list[tuple[exp.Select, int]]]:
    """``(determinism_flags(tree, skip), _nested_cuts(tree))`` from one walk of the tree (a
    second walk only when ``skip`` holds a SELECT, which the first does not visit)."""
    flags, selects = _determinism(tree, skip)
    if skip is not None and skip.find(exp.Select) is not None:
        return flags, _nested_cuts(tree)
    return flags, _cuts_of(tree, selects)


def _nested_cuts(tree: exp.Expression) -> list[tuple[exp.Select, int]]:
    """(SELECT, cut position) of every ORDER BY ... LIMIT k [OFFSET o] below the top level."""
    return _cuts_of(tree, tree.find_all(exp.Select))


def _cuts_of(tree: exp.Expression, selects) -> list[tuple[exp.Select, int]]:
    """:func:`_nested_cuts` of ``tree`` from its SELECT nodes ``selects`` (in ``find_all`` order)."""
    top = tree
    while isinstance(top, (exp.Subquery, exp.Paren)):
        top = top.this
    out = []
    for node in selects:
        limit = node.args.get("limit")
        if node is top or not isinstance(limit, exp.Limit) or not node.args.get("order"):
            continue
        k = _literal_int(limit.expression)
        off = node.args.get("offset")
        o = _literal_int(off.expression) if isinstance(off, exp.Offset) else 0
        out.append((node, (k + o) if (k is not None and o is not None) else -1))
    return out


def nested_ties_probe(tree: exp.Expression, dialect: str,
                      cuts: list[tuple[exp.Select, int]] | None = None) -> str | None:
    """A one-row query with two columns per nested ORDER BY ... LIMIT cut (``n<i>``, ``d<i>``):
    the cut's last kept row and the next row are fetched as ORDER BY key tuples; ``n<i> = 2`` and
    ``d<i> = 1`` (two rows, one distinct key tuple: NULLs compare equal) means the cut falls in a
    tie. A nested query that cannot run on its own (correlated, in a CTE, SELECT DISTINCT,
    non-literal LIMIT) makes the probe fail to run, which counts as a possible tie
    (``nondeterministic_gold``).

    When the top-level SELECT aggregates and outputs a column that is neither grouped nor
    aggregated (SQLite and MySQL take it from an arbitrary row of the group; SQLite from the
    min()/max() row when there is one such aggregate), column ``g`` counts the groups where that
    column holds more than one distinct non-NULL value (flag ``ungrouped_column``). When that
    SELECT's one aggregate is min() or max(), column ``x`` counts the groups where rows with
    different bare values tie on the extreme: SQLite then takes the bare columns from any one of
    them (sqlite.org/lang_select.html, "bare columns"), so the result is not a function of the
    data (``nondeterministic_gold``). None when neither check applies. ``cuts``:
    :func:`_nested_cuts` of ``tree`` when the caller has them already."""
    cuts = _nested_cuts(tree) if cuts is None else cuts
    found = _bare_columns(tree)  # read by both checks below: found once
    bare = _ungrouped_check(tree, found)
    if not cuts and bare is None:
        return None
    # every node below is built here or copied from the tree once: no builder copies it again
    cols = [exp.alias_(exp.Subquery(this=bare), "g", copy=False)] if bare is not None else []
    tie = _extreme_tie_check(tree, found) if bare is not None else None
    if tie is not None:
        cols.append(exp.alias_(exp.Subquery(this=tie), "x", copy=False))
    for i, (sel, cut) in enumerate(cuts):
        if cut < 1 or sel.args.get("distinct"):
            return "SELECT no_tie_probe_possible"  # fails on every engine: conservative flag
        selects = list(sel.selects)
        keys = []
        for o in sel.args["order"].expressions:
            k = o.this if isinstance(o, exp.Ordered) else o
            pos = _literal_int(k)
            if pos is not None:  # ORDER BY 2: the second output expression
                if not 1 <= pos <= len(selects) or isinstance(selects[pos - 1], exp.Star):
                    return "SELECT no_tie_probe_possible"
                k = selects[pos - 1].this if isinstance(selects[pos - 1], exp.Alias) else selects[pos - 1]
            keys.append(_inline_aliases(k, selects))
        inner = sel.copy()
        inner.set("expressions", [exp.alias_(k.copy(), f"k{j}", copy=False) for j, k in enumerate(keys)])
        inner.set("order", exp.Order(expressions=[
            exp.Ordered(this=k.copy(), desc=o.args.get("desc") if isinstance(o, exp.Ordered) else None,
                        nulls_first=o.args.get("nulls_first") if isinstance(o, exp.Ordered) else None)
            for k, o in zip(keys, sel.args["order"].expressions)]))
        inner.set("limit", exp.Limit(expression=exp.Literal.number(2)))
        inner.set("offset", exp.Offset(expression=exp.Literal.number(cut - 1)))
        n = exp.select(_count_star()).from_(exp.Subquery(this=inner.copy(), alias=exp.TableAlias(this=exp.to_identifier(f"t{i}"))))
        dist = exp.select(exp.Star()).distinct().from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(f"u{i}"))))
        d = exp.select(_count_star()).from_(exp.Subquery(this=dist, alias=exp.TableAlias(this=exp.to_identifier(f"v{i}"))))
        cols += [exp.alias_(exp.Subquery(this=n), f"n{i}", copy=False),
                 exp.alias_(exp.Subquery(this=d), f"d{i}", copy=False)]
    try:
        return exp.select(*cols).sql(dialect=dialect, copy=False)
    except Exception:  # noqa: BLE001 - cannot render: conservative flag
        return "SELECT no_tie_probe_possible"


def nested_ties(probe, nested_cuts: int = 1) -> tuple[str, ...]:
    """Flags from a :func:`nested_ties_probe` result (an Arrow table, or None when it did not
    run): ``nondeterministic_gold`` when a nested cut falls in a tie or cannot be excluded from
    one (``nested_cuts > 0`` and no result), or when bare columns come from a tied min()/max()
    row (``x > 0``); ``ungrouped_column`` when ``g > 0``."""
    row = probe.to_pylist()[0] if (probe is not None and probe.num_rows == 1) else None
    flags = []
    if nested_cuts:
        if row is None or any(row.get(f"n{i}") == 2 and row.get(f"d{i}") == 1 for i in range(nested_cuts)):
            flags.append("nondeterministic_gold")
    if row is not None and (row.get("g") or 0) > 0:
        flags.append("ungrouped_column")
    if row is not None and (row.get("x") or 0) > 0 and "nondeterministic_gold" not in flags:
        flags.append("nondeterministic_gold")
    return tuple(flags)


@dataclass(frozen=True)
class PredShape:
    """Whether a predicted query's result can be other than a function of the data, as far as
    its text tells (:func:`analyze_prediction`); the data decides the rest (verdict.py).

    Attributes:
        static: random/uuid functions, TABLESAMPLE, or LIMIT without ORDER BY below the top
            level: the result may change between runs whatever the data.
        limit: the top-level literal ``LIMIT k`` (with or without ORDER BY), else None.
        cut_probe_sql: the prediction with ``LIMIT k + TIE_WINDOW`` (and its ORDER BY keys that
            are not output columns appended, as the gold probe does): run on the target engine,
            it shows the rows tied at the prediction's own cut, any of which the engine may
            return. None without a top-level literal LIMIT, or when no probe can be built.
        cut_keys: positions of the ORDER BY keys in the cut probe (negative = from the end);
            ``()`` for LIMIT without ORDER BY (every row is tied).
        ties_probe_sql: :func:`nested_ties_probe` of the prediction (nested ORDER BY ... LIMIT
            cuts and ungrouped output columns), None when neither applies.
        nested_cuts: number of nested ORDER BY ... LIMIT cuts.
        constant_columns: positions of the top-level SELECT's output columns that are
            constants of the text (:func:`constant_columns`): with extra predicted columns such
            a column never stands for a gold column (``policy.max_extra_pred_columns``).
    """

    static: bool = False
    limit: int | None = None
    cut_probe_sql: str | None = None
    cut_keys: tuple[int, ...] = ()
    ties_probe_sql: str | None = None
    nested_cuts: int = 0
    constant_columns: tuple[int, ...] = ()


def analyze_prediction(pred_sql: str, dialect: str, tie_window: int = TIE_WINDOW) -> PredShape:
    """The determinism facts of a predicted query (:class:`PredShape`), the prediction-side
    counterpart of the gold's ``nondeterministic_gold``/``ungrouped_column`` checks. Never
    raises: SQL sqlglot cannot read (or too deep for it) gives an empty shape (nothing flagged;
    the engine decides what it means)."""
    try:
        tree = sqlglot.parse_one(pred_sql, read=dialect)
        if tree is None:
            return PredShape()
        top = tree
        while isinstance(top, (exp.Subquery, exp.Paren)):
            top = top.this
        limit_node = top.args.get("limit") if isinstance(top, exp.Query) else None
        k = _literal_int(limit_node.expression) if isinstance(limit_node, exp.Limit) else None
        # read, never changed, so never copied: the top-level cut is checked on the data (cut
        # probe), not as a static LIMIT
        det, cuts = _scan(tree, skip=limit_node)
        static = "nondeterministic_gold" in det
        ties_sql, constants = nested_ties_probe(tree, dialect, cuts), constant_columns(top)
        cut_sql, cut_keys = None, ()
        if k is not None and k >= 1:
            # last: the tree is this function's own parse, read by nothing after, so the cut probe
            # is built by changing it in place rather than a copy of it
            if top.args.get("order"):
                shape = _analyze_tree(top, dialect, tie_window, copy=False)
                cut_sql, cut_keys = shape.probe_sql, shape.probe_keys
            else:
                limit_node.set("expression", exp.Literal.number(k + tie_window))
                cut_sql = top.sql(dialect=dialect, copy=False)
        return PredShape(static, k, cut_sql, tuple(cut_keys), ties_sql, len(cuts), constants)
    except Exception:  # noqa: BLE001 - ParseError, RecursionError ...: nothing is flagged
        return PredShape()


#: Node types a constant output column may consist of: literals and arithmetic on them (no
#: column, star, aggregate, window, subquery or function call, so the value is the same on every
#: row and independent of the data).
_CONSTANT_NODES = (exp.Literal, exp.Null, exp.Boolean, exp.Neg, exp.Paren, exp.Cast, exp.Add, exp.Sub,
                   exp.Mul, exp.Div, exp.Mod, exp.DPipe, exp.Alias, exp.DataType, exp.Identifier)


def constant_columns(top: exp.Expression) -> tuple[int, ...]:
    """Positions of the output columns of a top-level ``SELECT`` that may not stand for a gold
    column when the prediction has extra columns (``policy.max_extra_pred_columns``): ``()``
    for anything else (a UNION, ``SELECT *``) or when unsure.

    * constants of the text: literals and arithmetic on them (``SELECT 0, name, 'x' || 'y'`` ->
      ``(0, 2)``);
    * when two or more output columns read no column of the top query's own rows (functions of
      literals, ``count(*) * 0 + k``, uncorrelated scalar subqueries, ``row_number()``...): all
      of them. One such column is an answer (``SELECT count(*), 'x'``); a row of them is a
      list of guesses, one per column, for a one-row answer (``SELECT abs(0), abs(1), ...``,
      ``SELECT (SELECT name ... id = 1), (SELECT name ... id = 2), ...``), which EX must not
      pass by picking the column that happens to match."""
    if not isinstance(top, exp.Select) or any(e.is_star for e in top.expressions):  # t.* expands
        return ()
    literal = {i for i, e in enumerate(top.expressions)
               if all(isinstance(node, _CONSTANT_NODES) for node in e.walk())}
    free = {i for i, e in enumerate(top.expressions) if i not in literal and not _reads_top_rows(e, top)}
    return tuple(sorted(literal | (free if len(free) >= 2 else set())))


def _reads_top_rows(e: exp.Expression, top: exp.Select) -> bool:
    """Whether ``e`` names a column whose nearest enclosing SELECT is ``top`` (a column of the
    top query's own rows, not one read inside a subquery)."""
    for col in e.find_all(exp.Column):
        p = col.parent
        while p is not None and not isinstance(p, exp.Select):
            p = p.parent
        if p is None or p is top:
            return True
    return False


def _bare_columns(tree: exp.Expression) -> tuple[exp.Select, list, dict[str, exp.Column]] | None:
    """``(top SELECT, its GROUP BY expressions, its bare output columns by SQL text)`` when the
    top-level SELECT aggregates or groups and outputs columns that are neither grouped nor inside
    an aggregate or subquery; None otherwise (and for ``SELECT *``)."""
    top = tree
    while isinstance(top, (exp.Subquery, exp.Paren)):
        top = top.this
    if not isinstance(top, exp.Select):
        return None
    group = top.args.get("group")
    selects = list(top.selects)
    if group is None and not any(isinstance(n, exp.AggFunc) for s in selects for n in s.walk()):
        return None
    keys = list(group.expressions) if group else []
    grouped = {c.name.lower() for e in keys for c in e.find_all(exp.Column)}
    bare: dict[str, exp.Column] = {}
    for s in selects:
        if isinstance(s, exp.Star):
            return None
        for col in s.find_all(exp.Column):
            p, inside = col.parent, False
            while p is not None and p is not top:
                if isinstance(p, (exp.AggFunc, exp.Subquery, exp.Select)):
                    inside = True
                    break
                p = p.parent
            if not inside and col.name.lower() not in grouped and not isinstance(col.this, exp.Star):
                bare.setdefault(col.sql(), col)
    return (top, keys, bare) if bare else None


def _count_star() -> exp.Count:
    """``COUNT(*)`` as sqlglot parses it (``exp.select("COUNT(*)")`` would parse the text each
    time a probe is built)."""
    return exp.Count(this=exp.Star(), big_int=True)


def _copy_except(node: exp.Expression, drop: tuple[str, ...]) -> exp.Expression:
    """``node.copy()`` followed by ``set(key, None)`` for each key of ``drop`` (and an empty
    ``expressions`` list, in its place, for the caller to set), without copying what is dropped
    (the output columns and clauses a probe replaces)."""
    from copy import deepcopy

    out = node.__class__()
    if node.comments is not None:
        out.comments = deepcopy(node.comments)
    if node._type is not None:
        out._type = deepcopy(node._type)
    if node._meta is not None:
        out._meta = deepcopy(node._meta)
    for k, vs in node.args.items():
        if k == "expressions":
            out.args[k] = []
        elif k in drop:
            continue
        elif isinstance(vs, exp.Expression):
            out.set(k, vs.copy())
        elif type(vs) is list:
            out.args[k] = []
            for v in vs:
                out.append(k, v.copy() if isinstance(v, exp.Expression) else v)
        else:
            out.args[k] = vs
    return out


def _ungrouped_check(tree: exp.Expression, found) -> exp.Select | None:
    """``SELECT COUNT(*) FROM (<the top SELECT's groups with count(DISTINCT bare column) per
    ungrouped output column>) WHERE b0 > 1 OR ...``, None when no such column. ``found``:
    :func:`_bare_columns` of ``tree`` (its caller reads it for both checks)."""
    if found is None:
        return None
    top, _, bare = found
    selects = list(top.selects)
    inner = _copy_except(top, ("order", "limit", "offset", "distinct"))
    inner.set("expressions", [exp.alias_(exp.Count(this=exp.Distinct(expressions=[c.copy()])), f"b{j}", copy=False)
                              for j, c in enumerate(bare.values())])
    if inner.args.get("having") is not None:
        inner.set("having", exp.Having(this=_inline_aliases(inner.args["having"].this, selects)))
    cond = exp.or_(*[exp.GT(this=exp.column(f"b{j}"), expression=exp.Literal.number(1)) for j in range(len(bare))])
    return exp.select(_count_star()).from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("w"))),
                                        copy=False).where(cond, copy=False)


def _extreme_tie_check(tree: exp.Expression, found) -> exp.Select | None:
    """For a top SELECT whose only aggregate is ``min(x)`` or ``max(x)`` and that outputs bare
    columns (SQLite's documented bare-column rule: they come from the row holding the extreme):
    ``SELECT COUNT(*)`` of the groups where two rows with different bare values both hold it.
    None for any other shape (HAVING, several aggregates, DISTINCT or FILTER inside it).
    ``found``: :func:`_bare_columns` of ``tree`` (its caller reads it for both checks)."""
    if found is None:
        return None
    top, keys, bare = found
    if top.args.get("having") is not None:
        return None
    aggs = [n for s in top.selects for n in s.walk() if isinstance(n, exp.AggFunc)]
    if len(aggs) != 1 or not isinstance(aggs[0], (exp.Min, exp.Max)) or aggs[0].expressions \
            or isinstance(aggs[0].this, exp.Distinct) or aggs[0].find_ancestor(exp.Window, exp.Filter):
        return None
    agg = aggs[0]
    extreme = type(agg)(this=agg.this.copy())
    window = exp.Window(this=extreme, partition_by=[k.copy() for k in keys]) if keys else exp.Window(this=extreme)
    inner = _copy_except(top, ("group", "having", "order", "limit", "offset", "distinct"))
    inner.set("expressions", [exp.alias_(agg.this.copy(), "a", copy=False), exp.alias_(window, "m", copy=False)]
              + [exp.alias_(k.copy(), f"k{i}", copy=False) for i, k in enumerate(keys)]
              + [exp.alias_(c.copy(), f"c{j}", copy=False) for j, c in enumerate(bare.values())])
    held = exp.select(*[exp.column(f"k{i}") for i in range(len(keys))],
                      *[exp.alias_(exp.Count(this=exp.Distinct(expressions=[exp.column(f"c{j}")])), f"b{j}")
                        for j in range(len(bare))]) \
        .from_(exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("r"))), copy=False) \
        .where(exp.EQ(this=exp.column("a"), expression=exp.column("m")), copy=False)
    if keys:
        held = held.group_by(*[exp.column(f"k{i}") for i in range(len(keys))], copy=False)
    cond = exp.or_(*[exp.GT(this=exp.column(f"b{j}"), expression=exp.Literal.number(1)) for j in range(len(bare))])
    return exp.select(_count_star()).from_(exp.Subquery(this=held, alias=exp.TableAlias(this=exp.to_identifier("h"))),
                                        copy=False).where(cond, copy=False)


def _inline_aliases(key: exp.Expression, selects: list[exp.Expression]) -> exp.Expression:
    """``key`` with unqualified column references to output aliases replaced by the aliased
    expressions (ORDER BY may name an alias; a select-list expression may not)."""
    aliases = {s.alias.lower(): s.this for s in selects if isinstance(s, exp.Alias) and s.alias}
    if not aliases:
        return key
    key = key.copy()

    def repl(node):
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in aliases:
            return exp.paren(aliases[node.name.lower()].copy(), copy=False)
        return node
    return key.transform(repl, copy=False)


def _analyze_tree(tree: exp.Expression, dialect: str, tie_window: int, copy: bool = True) -> GoldShape:
    """The order facts and probe of ``tree`` (:class:`GoldShape`, module docstring); ``copy=False``:
    the probe is built by changing ``tree`` itself (a caller that reads it no more)."""
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
    probe = tree.copy() if copy else tree
    for i, k in enumerate(missing):
        probe = probe.select(exp.alias_(_inline_aliases(k, selects), f"__polysql_key{i}"), append=True,
                             copy=False)
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
        probe_sql = probe.sql(dialect=dialect, copy=False)  # probe: a copy of the tree
    except Exception:
        return GoldShape(True, order_keys, not missing, limit, None, (), ("order_keys_unknown",))
    return GoldShape(True, order_keys, not missing, limit, probe_sql, tuple(probe_keys), ())
