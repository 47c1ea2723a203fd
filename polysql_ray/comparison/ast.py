"""Sound structural (AST) equivalence of a gold SQL and a predicted SQL.

The check parses each query with sqlglot *in its own dialect*, rewrites both into one
canonical form with rewrites that are semantics-preserving, and compares the canonical trees
exactly. It answers only ``equivalent`` (proven) or ``unknown``; it never refutes
(soundness over completeness). Anything it cannot prove is left to dual execution.

Canonical rewrites (every one is sound under SQL three-valued logic; none comes from
sqlglot's ``simplify``, which folds ``p AND NOT p`` to FALSE although it is NULL when p is NULL):

* identifiers resolved by each dialect's rules (:func:`identifier_rule`): SQLite and DuckDB
  resolve all identifiers case-insensitively, PostgreSQL folds unquoted identifiers to lower
  case and keeps quoted ones, MySQL is kept exact (table-name case depends on the server's
  ``lower_case_table_names``). A *quoted* SQLite identifier in a column position stays exact
  and quoted, because SQLite reads ``"France"`` as a string when no such column exists;
* keyword casing, optional ``AS``, ``<>``/``!=``, redundant parentheses, ``INNER JOIN`` = ``JOIN``
  (the parser already gives one tree);
* consistent alpha-renaming of table aliases (``T1``/``a`` -> ``_t0``...), scope-aware
  (shadowing and correlated references handled);
* names of output columns of the outermost query dropped (results are compared by position),
  unless the alias is referenced inside the query;
* AND, OR, bitwise ``&``, ``|``, ``^`` flattened, sorted (and, except ``^``, de-duplicated, but
  never down to a single operand: ``a AND a`` yields 0/1 where ``a`` yields its value);
* ``+`` and ``*``: operands of each *binary* node sorted, but never re-associated:
  IEEE addition/multiplication are commutative but not associative, and re-association can
  move an integer overflow. Only in dialects declaring it (:func:`numeric_plus`) (``+`` is string
  concatenation in T-SQL);
* ``=``, ``<>`` operands sorted; ``1 < id`` -> ``id > 1`` (operands ordered, operator flipped).
  In SQLite a comparison of two *columns* is never flipped: the left column's collation wins
  (sqlite.org/datatype3.html section 7.1);
* IN-list items sorted and de-duplicated;
* integer literal arithmetic (``+ - *``) folded when the result fits in 32 bits.

Non-determinism (:data:`NONDETERMINISTIC_NODES`, :data:`NONDETERMINISTIC_FUNCTIONS`):
``random()``, ``now()``/``current_*``, ``uuid``, ``nextval``, ``TABLESAMPLE``, order-dependent
aggregates (``group_concat``, ``string_agg``, ``array_agg``, ``any_value``), window functions,
and every LIMIT/OFFSET/FETCH without ORDER BY give ``unknown``. ``ORDER BY ... LIMIT`` also gives
``unknown`` by default: rows tied on the ORDER BY keys at the cut are picked arbitrarily, and the
two engines (or two plans on one engine) may pick different ones; ``allow_ordered_limit=True``
accepts it for same-dialect pairs only.

Across dialects (gold on one engine, prediction on another) a proof additionally needs every
node of both trees in the explicit allowlist of the pair (:func:`cross_dialect_allowlist`, data
not branches). Allowed for sqlite/duckdb/postgres pairs: SELECT/FROM/JOIN/WHERE/GROUP BY/HAVING,
sub-queries, CTEs, UNION/INTERSECT/EXCEPT, columns, literals, NULL, TRUE/FALSE, AND/OR/NOT,
IS [NOT] NULL, ``=``, ``<>``, IN, EXISTS, COUNT, DISTINCT; plus ``<``, ``>``, ``<=``, ``>=``,
ORDER BY, MIN, MAX, SUM, AVG under a *type guard*: every comparison's operands must have the
same known type class (from ``schema``: implicit casts differ, ``text_col = 1`` works in SQLite
and fails in PostgreSQL), ordering comparisons only on the classes in
:func:`cross_dialect_ordered_classes` (PostgreSQL orders text by locale, SQLite/DuckDB by bytes),
aggregates SUM/AVG/MIN/MAX only on numbers. NULL ordering needs no rule: sqlglot writes each
dialect's default NULL placement into the tree, so ``ORDER BY x`` in SQLite (NULLs first) and in
DuckDB (NULLs last) do not match. NOT allowed (never proven across dialects): ``/`` (SQLite
integer division), ``+ - *`` (overflow: SQLite turns it into REAL, the others raise), LIKE
(case sensitivity), ``||`` (MySQL OR), CASE/CAST/functions, window functions, and every pair
involving MySQL (case- and accent-insensitive default collations change ``=``, GROUP BY and
DISTINCT on text). Identifiers across a case-sensitive dialect (PostgreSQL) are resolved
through ``schema`` (the source's exact names); without a schema such pairs are ``unknown``.
The type guard assumes the replica is type-exact (notes section 3) and that text columns are
TEXT/VARCHAR, not blank-padded CHAR(n) (declared CHAR(n) gives no class).

**A proof must also run.** A proven prediction is not executed, so a proof across dialects
also establishes that the prediction's text runs on its target wherever the gold runs on its
source (a prediction that cannot run there is not correct, whatever its structure):

* the prediction's names resolve against the names the *replica* stores
  (:func:`replica_names`, the one naming rule of replication): an SQLite source's
  ``StockQty`` is ``stockqty`` on PostgreSQL, so ``"StockQty"`` (42703) is never proven and
  ``stockqty`` / ``StockQty`` unquoted are;
* numeric literals mean the same number on both engines (:func:`portable_literal`, from each
  engine's ``double_literals``): ``1e999`` is ``inf`` in SQLite and an overflow (22003) against
  a double in PostgreSQL;
* no construct one engine refuses (:func:`_runs_alike`): a bare value as a condition
  (``WHERE stock``, 42804), ``IS`` other than ``IS NULL``, a scalar subquery that may return
  several rows (21000), an output alias outside ORDER BY (42703), a SELECT DISTINCT ordered by
  an unselected key (42P10), ``*`` in an aggregating SELECT (42803); plus the reserved-word and
  ungrouped-column checks.

What a proof still does not cover is the *cost* of running: a prediction the target would time
out on or refuse as too large (README, "Where the structural check pays").
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from polysql_ray.engines.declaration import EXACT_IDENTIFIERS, StructuralFacts, StructuralIdentifiers

Decision = Literal["equivalent", "unknown"]


@dataclass(frozen=True)
class StructuralResult:
    """Outcome of one structural check.

    Attributes:
        decision: ``equivalent`` (proven: same result on every database) or ``unknown``.
        reason: short machine-readable reason (``identical_canonical_form``, ``parse_error``,
            ``nondeterministic:<what>``, ``not_dialect_invariant:<node>``, ``different_structure``
            ...).
    """

    decision: Decision
    reason: str

    @property
    def equivalent(self) -> bool:
        """True when equivalence was proven."""
        return self.decision == "equivalent"


#: How a dialect resolves an identifier: declared by each engine (``structural.identifiers``).
IdentifierRule = StructuralIdentifiers
_EXACT_RULE = EXACT_IDENTIFIERS


def _facts(dialect: str) -> StructuralFacts:
    """The structural facts the engine of ``dialect`` declares (``engines/<name>.py``)."""
    from polysql_ray.engines.registry import structural_facts

    return structural_facts(dialect)


def identifier_rule(dialect: str) -> StructuralIdentifiers:
    """Identifier resolution of ``dialect`` (exact for an unknown dialect)."""
    return _facts(dialect).identifiers


def cross_dialect_allowlist(a: str, b: str) -> frozenset[str]:
    """sqlglot node classes with one meaning in both dialects: those both engines declare
    portable (``structural.portable_nodes``); empty when either declares none."""
    return _facts(a).portable_nodes & _facts(b).portable_nodes


def cross_dialect_ordered_classes(a: str, b: str) -> frozenset[str]:
    """Type classes on which ``< > <= >=``, MIN/MAX and ORDER BY agree in both dialects
    (SQLite and DuckDB compare text bytewise; PostgreSQL uses the locale's collation)."""
    return _facts(a).ordered_classes & _facts(b).ordered_classes


def schema_free_pair(a: str, b: str) -> bool:
    """True when the two dialects' identifier rules agree without knowing the schema (both
    resolve every name case-insensitively)."""
    return all(identifier_rule(d).schema_match == "ci" for d in (a, b))


def numeric_plus(dialects) -> bool:
    """True when ``+`` is numeric addition (commutative) in every dialect of ``dialects``."""
    return all(_facts(d).numeric_plus for d in dialects)


def left_collation(dialects) -> bool:
    """True when in some dialect of ``dialects`` the left column's collation decides a
    comparison of two columns (SQLite, sqlite.org/datatype3.html 7.1)."""
    return any(_facts(d).left_collation for d in dialects)


#: sqlglot node classes that make a query non-deterministic.
NONDETERMINISTIC_NODES: frozenset[str] = frozenset({
    "Rand", "Randn", "Randstr", "Uuid", "CurrentTimestamp", "CurrentDate", "CurrentTime",
    "CurrentDatetime", "CurrentTimestampLTZ", "Localtime", "Localtimestamp", "UnixSeconds",
    "TableSample", "GroupConcat", "ArrayAgg", "ArrayUniqueAgg", "AnyValue", "First", "Last",
    "Window", "NextValueFor", "StringAgg",
})

#: Function names (lower case, as written) that make a query non-deterministic.
NONDETERMINISTIC_FUNCTIONS: frozenset[str] = frozenset({
    "random", "rand", "randomblob", "uuid", "gen_random_uuid", "uuid_generate_v4", "now",
    "current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
    "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday", "sysdate",
    "curdate", "curtime", "unix_timestamp", "utc_timestamp", "utc_date", "utc_time", "nextval",
    "currval", "lastval", "setseed", "changes", "total_changes", "last_insert_rowid",
    "group_concat", "string_agg", "array_agg", "listagg", "any_value", "arbitrary", "first",
    "last", "list", "row_number", "rank", "dense_rank", "ntile", "lag", "lead",
    "connection_id", "version", "database", "user", "current_user", "session_user",
    "get_current_time", "epoch_ms", "today",
})

#: Declared column type -> type class (SQLite affinity rules, sqlite.org/datatype3.html 3.1);
#: first match wins; no match -> no class (the guard then refuses the comparison).
DECLARED_TYPE_CLASSES: tuple[tuple[str, str | None], ...] = (
    (r"INT", "num"),
    (r"^\s*N?CHAR\b|^\s*CHARACTER\s*\(", None),  # blank-padded CHAR(n): no class
    (r"CHAR|CLOB|TEXT|STRING", "text"),
    (r"REAL|FLOA|DOUB", "num"),
    (r"DEC|NUMERIC", "num"),
)

_COMMUTATIVE_FLAT = {exp.And: True, exp.Or: True, exp.BitwiseAnd: True, exp.BitwiseOr: True,
                     exp.BitwiseXor: False}  # value: duplicates may be dropped
_SWAP_ONLY = (exp.Add, exp.Mul)
_SYMMETRIC = (exp.EQ, exp.NEQ, exp.NullSafeEQ)
_FLIP = {exp.LT: exp.GT, exp.GT: exp.LT, exp.LTE: exp.GTE, exp.GTE: exp.LTE}
_INT_FOLD = {exp.Add: lambda a, b: a + b, exp.Sub: lambda a, b: a - b, exp.Mul: lambda a, b: a * b}
_INT_LIMIT = 2 ** 31


class _Unknown(Exception):
    """Internal: the canonicalizer met something it cannot prove; carries the reason."""


def _key(node) -> str:
    """Exact structural key of a (sub)tree: class names, all args, exact strings."""
    if isinstance(node, exp.Expression):
        parts = []
        for k in sorted(node.args):
            v = node.args[k]
            if v is None or v is False or v == []:
                continue
            parts.append(f"{k}={_key(v)}")
        return f"({type(node).__name__} {' '.join(parts)})"
    if isinstance(node, list):
        return "[" + ",".join(_key(x) for x in node) + "]"
    return repr(node)


class AstEquivalence:
    """Sound structural equivalence checker (see module docstring for the rules).

    Args:
        allow_ordered_limit: accept ``ORDER BY ... LIMIT`` for same-dialect pairs (rows tied at
            the cut may then differ between runs); default False (``unknown``).
    """

    def __init__(self, allow_ordered_limit: bool = False) -> None:
        self.allow_ordered_limit = allow_ordered_limit

    # ------------------------------------------------------------------ public
    def check(self, gold_sql: str, gold_dialect: str, pred_sql: str, pred_dialect: str,
              schema: Mapping[str, Mapping[str, str]] | None = None) -> StructuralResult:
        """Try to prove that gold and predicted SQL return the same result on every database.

        Args:
            gold_sql: gold SQL text (one statement) in ``gold_dialect``.
            gold_dialect: sqlglot dialect name (``sqlite``, ``duckdb``, ``postgres``, ``mysql``).
            pred_sql: predicted SQL text (one statement) in ``pred_dialect``.
            pred_dialect: sqlglot dialect name of the prediction.
            schema: optional ``{table: {column: declared_type}}`` with exact names; needed for
                cross-dialect proofs involving a case-sensitive dialect and for the type guard.

        Returns:
            :class:`StructuralResult`, ``equivalent`` or ``unknown``; never raises for bad SQL.
        """
        cross = gold_dialect != pred_dialect
        if cross and not cross_dialect_allowlist(gold_dialect, pred_dialect):
            return StructuralResult("unknown", f"no_allowlist:{gold_dialect}->{pred_dialect}")
        if cross and schema is None and not schema_free_pair(gold_dialect, pred_dialect):
            return StructuralResult("unknown", "schema_needed_for_identifiers")
        try:
            gold_key = self.canonical_key(gold_sql, gold_dialect, other=pred_dialect, schema=schema)
            # the prediction runs on the replica: its names are the copy's (folded on PostgreSQL)
            pred_key = self.canonical_key(pred_sql, pred_dialect, other=gold_dialect, schema=schema,
                                          copied_from=gold_dialect if cross else None)
        except _Unknown as e:
            return StructuralResult("unknown", str(e))
        except RecursionError:  # a syntax tree deeper than Python's stack (a 3,000-term chain)
            return StructuralResult("unknown", "too_deep")
        if gold_key == pred_key:
            return StructuralResult("equivalent", "identical_canonical_form")
        return StructuralResult("unknown", "different_structure")

    def nondeterministic_reason(self, sql: str, dialect: str) -> str | None:
        """Why executing ``sql`` may give different results on the same data, else None.

        Counts random/time/uuid/sequence functions, TABLESAMPLE, order-dependent aggregates,
        window functions and LIMIT/OFFSET without ORDER BY; ``ORDER BY ... LIMIT`` is *not*
        counted here (the result-set comparison flags ties at the cut). Unparseable SQL gives
        None (the engine decides).
        """
        try:
            tree = self._parse(sql, dialect)
            checker = AstEquivalence(allow_ordered_limit=True)
            checker._check_deterministic(tree, same_dialect=True)
        except _Unknown as e:
            reason = str(e)
            return reason if reason.startswith("nondeterministic:") else None
        return None

    def canonical_key(self, sql: str, dialect: str, other: str | None = None,
                      schema: Mapping[str, Mapping[str, str]] | None = None,
                      copied_from: str | None = None) -> str:
        """Canonical structural key of one query (raises the internal ``_Unknown`` on refusal).

        Args:
            sql: one SQL statement.
            dialect: its sqlglot dialect.
            other: the dialect of the query it will be compared with (None or equal: same-dialect).
            schema: see :meth:`check` (the *source's* exact names).
            copied_from: the source dialect when this query runs on a replica of the source
                (the prediction's side): its names resolve against the names the replica stores
                (:func:`replica_names`), not the source's. None: the schema's own dialect.
        """
        tree = self._parse(sql, dialect)
        cross = other is not None and other != dialect
        self._check_deterministic(tree, same_dialect=not cross)
        if cross:
            self._check_allowlist(tree, dialect, other, schema)
        names = None
        if cross and schema is not None:
            names = replica_names(schema, copied_from, dialect) if copied_from else _own_names(schema)
        self._normalize_identifiers(tree, dialect, names)
        self._rename_table_aliases(tree)
        self._drop_output_aliases(tree)
        tree = self._canon(tree, dialect if not cross else None, frozenset({dialect, other or dialect}))
        return _key(tree)

    # ------------------------------------------------------------------ steps
    @staticmethod
    def _parse(sql: str, dialect: str) -> exp.Expression:
        try:
            trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
        except (SqlglotError, ValueError, RecursionError) as e:
            raise _Unknown(f"parse_error:{type(e).__name__}") from None
        if len(trees) != 1:
            raise _Unknown("not_one_statement")
        tree = trees[0]
        if not isinstance(tree, exp.Query):
            raise _Unknown(f"not_a_query:{type(tree).__name__}")
        for node in tree.walk():
            node.comments = None
        return tree

    def _check_deterministic(self, tree: exp.Expression, same_dialect: bool) -> None:
        for node in tree.walk():
            name = type(node).__name__
            if name in NONDETERMINISTIC_NODES:
                raise _Unknown(f"nondeterministic:{name}")
            if isinstance(node, exp.Func):
                fname = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
                if fname in NONDETERMINISTIC_FUNCTIONS:
                    raise _Unknown(f"nondeterministic:{fname}")
            if isinstance(node, exp.Column) and not node.table and \
                    node.name.lower() in {"current_timestamp", "current_date", "current_time"} \
                    and not node.this.quoted:
                raise _Unknown(f"nondeterministic:{node.name.lower()}")
            if isinstance(node, (exp.Limit, exp.Offset, exp.Fetch)):
                query = node.parent
                if not isinstance(query, exp.Query) or not query.args.get("order"):
                    raise _Unknown("nondeterministic:limit_without_order_by")
                if not (self.allow_ordered_limit and same_dialect):
                    raise _Unknown("nondeterministic:order_by_limit_ties")

    def _check_allowlist(self, tree, dialect, other, schema) -> None:
        allowed = cross_dialect_allowlist(dialect, other)
        ordered_classes = cross_dialect_ordered_classes(dialect, other)
        rule = identifier_rule(dialect)
        for node in tree.walk():
            name = type(node).__name__
            if name not in allowed:
                raise _Unknown(f"not_dialect_invariant:{name}")
            if isinstance(node, exp.Join) and (node.args.get("kind") or "").upper() not in \
                    {"", "INNER", "LEFT", "CROSS"}:
                raise _Unknown(f"not_dialect_invariant:join_{node.args.get('kind')}")
            if isinstance(node, exp.Column) and isinstance(node.this, exp.Identifier) and node.this.quoted \
                    and rule.quoted_column_may_be_string \
                    and not _schema_has_column(schema, node.name):
                raise _Unknown("quoted_identifier_may_be_string")
            if isinstance(node, (exp.EQ, exp.NEQ, exp.LT, exp.GT, exp.LTE, exp.GTE)):
                classes = {_type_class(node.this, schema), _type_class(node.expression, schema)}
                if len(classes) != 1 or None in classes:
                    raise _Unknown(f"type_guard:{name}")
                if not isinstance(node, (exp.EQ, exp.NEQ)) and classes.pop() not in ordered_classes:
                    raise _Unknown(f"type_guard_order:{name}")
            if isinstance(node, exp.In):
                if node.args.get("query") is not None:
                    raise _Unknown("not_dialect_invariant:in_subquery")
                classes = {_type_class(x, schema) for x in [node.this, *node.expressions]}
                if len(classes) != 1 or None in classes:
                    raise _Unknown("type_guard:In")
            if isinstance(node, (exp.Min, exp.Max, exp.Sum, exp.Avg)):
                if _type_class(node.this, schema) != "num":
                    raise _Unknown(f"type_guard:{name}")
            if isinstance(node, exp.Ordered):
                if _type_class(node.this, schema) not in ordered_classes:
                    raise _Unknown("type_guard:Ordered")
            if isinstance(node, exp.Identifier) and not node.quoted and \
                    node.name.lower() in reserved_words(dialect):
                # `FROM show` parses in SQLite and in sqlglot's DuckDB dialect, but DuckDB's own
                # parser rejects the reserved word: the text would not run on the target.
                raise _Unknown(f"reserved_word_in_{dialect}:{node.name.lower()}")
            if isinstance(node, exp.Literal) and not node.is_string and \
                    not portable_literal(node.this, dialect, other):
                raise _Unknown(f"literal_not_portable:{node.this[:20]}")
            why = _runs_alike(node, schema)
            if why is not None:
                # the text may run on one engine and fail on the other: a prediction that cannot
                # run on its target is not correct, so such a pair is left to execution
                raise _Unknown(f"not_dialect_invariant:{why}")
            if isinstance(node, exp.Select) and _has_ungrouped_column(node):
                # SQLite and MySQL accept `SELECT title ... GROUP BY id` (a bare column), DuckDB
                # and PostgreSQL reject it: the prediction would not even run on the target.
                raise _Unknown("not_dialect_invariant:ungrouped_column")

    @staticmethod
    def _normalize_identifiers(tree, dialect, names: Mapping[str, str | None] | None) -> None:
        """Replace each identifier by its canonical form. ``names`` maps every name the database
        the query runs on stores to the source name it stands for (None when two source names
        share it), or is None without a schema."""
        rule = identifier_rule(dialect)
        for ident in list(tree.find_all(exp.Identifier)):
            raw, quoted = ident.this, bool(ident.args.get("quoted"))
            in_column_position = isinstance(ident.parent, exp.Column) and ident.arg_key == "this"
            if quoted and rule.quoted_column_may_be_string and in_column_position and names is None:
                ident.set("this", "\x00q:" + raw)  # exact; may be a string literal
                ident.set("quoted", False)
                continue
            folded = raw.lower() if (rule.fold_quoted if quoted else rule.fold_unquoted) else raw
            canon = folded
            if names is not None:
                if rule.schema_match == "ci":
                    hits = [n for n in names if n.lower() == raw.lower()]
                    if len(hits) == 1 and names[hits[0]] is not None:
                        canon = "\x00s:" + names[hits[0]]
                elif folded in names:
                    canon = "\x00s:" + names[folded] if names[folded] is not None else folded.lower()
                elif any(n.lower() == raw.lower() for n in names):
                    canon = "\x00mismatch:" + dialect + ":" + raw  # resolves to no stored object
            ident.set("this", canon)
            ident.set("quoted", False)

    @staticmethod
    def _rename_table_aliases(tree) -> None:
        counter = [0]

        def source_alias(src):
            alias = src.args.get("alias")
            return alias.this if isinstance(alias, exp.TableAlias) and alias.this else None

        def walk(node, env):
            if isinstance(node, exp.Select):
                sources = []
                if node.args.get("from_") is not None:
                    sources.append(node.args["from_"].this)
                sources += [j.this for j in node.args.get("joins") or []]
                inner_env = dict(env)
                for src in sources:
                    walk(src, env)  # derived tables see only the outer scope
                    ident = source_alias(src)
                    if ident is not None:
                        new = f"\x00t{counter[0]}"
                        counter[0] += 1
                        inner_env[ident.this] = new
                        ident.set("this", new)
                    elif isinstance(src, exp.Table):
                        inner_env[src.name] = src.name  # shadows an outer alias of that name
                for key, value in node.args.items():
                    items = value if isinstance(value, list) else [value]
                    for item in items:
                        if not isinstance(item, exp.Expression):
                            continue
                        if key == "from_":
                            continue
                        if key == "joins":
                            for k2, v2 in item.args.items():
                                if k2 != "this" and isinstance(v2, exp.Expression):
                                    walk(v2, inner_env)
                                elif k2 != "this" and isinstance(v2, list):
                                    for x in v2:
                                        if isinstance(x, exp.Expression):
                                            walk(x, inner_env)
                            continue
                        walk(item, inner_env)
                return
            if isinstance(node, exp.Column):
                table = node.args.get("table")
                if isinstance(table, exp.Identifier) and not node.args.get("db") \
                        and table.this in env:
                    table.set("this", env[table.this])
                return
            for value in list(node.args.values()):
                for item in (value if isinstance(value, list) else [value]):
                    if isinstance(item, exp.Expression):
                        walk(item, env)

        walk(tree, {})

    @staticmethod
    def _drop_output_aliases(tree) -> None:
        branches = [tree]
        while branches and isinstance(branches[-1], exp.SetOperation):
            top = branches.pop()
            branches += [top.this, top.expression]
        referenced = {c.name for c in tree.find_all(exp.Column) if not c.table}
        for sel in branches:
            if not isinstance(sel, exp.Select):
                continue
            new = []
            for e in sel.expressions:
                if isinstance(e, exp.Alias) and e.alias not in referenced:
                    e = e.this
                new.append(e)
            sel.set("expressions", new)

    def _canon(self, node, dialect: str | None, dialects: frozenset[str]):
        """Bottom-up canonical rewrite; ``dialect`` None means cross-dialect."""
        for k, v in list(node.args.items()):
            if isinstance(v, exp.Expression):
                node.set(k, self._canon(v, dialect, dialects))
            elif isinstance(v, list):
                node.set(k, [self._canon(x, dialect, dialects) if isinstance(x, exp.Expression)
                             else x for x in v])
        return self._rewrite(node, dialects)

    @staticmethod
    def _rewrite(node, dialects: frozenset[str]):
        if isinstance(node, exp.Paren):
            return node.this
        if isinstance(node, exp.Join) and (node.args.get("kind") or "").upper() == "INNER":
            node.set("kind", None)
        if isinstance(node, exp.Ordered) and node.args.get("desc") is False:
            node.set("desc", None)
        typ = type(node)
        if typ in _COMMUTATIVE_FLAT:
            operands = list(node.flatten()) if hasattr(node, "flatten") else [node.this, node.expression]
            keyed = sorted(((_key(o), o) for o in operands), key=lambda t: t[0])
            if _COMMUTATIVE_FLAT[typ]:
                seen, uniq = set(), []
                for k, o in keyed:
                    if k not in seen:
                        seen.add(k)
                        uniq.append((k, o))
                # keep two copies when everything was a duplicate: ``a AND a`` is 0/1 (or a
                # boolean), ``a`` is the raw value (found by the property test)
                keyed = uniq if len(uniq) > 1 else uniq * min(2, len(keyed))
            result = keyed[0][1]
            for _, o in keyed[1:]:
                result = typ(this=result, expression=o)
            return result
        if typ in _INT_FOLD and all(_int_literal(x) is not None for x in (node.this, node.expression)):
            value = _INT_FOLD[typ](_int_literal(node.this), _int_literal(node.expression))
            if -_INT_LIMIT < value < _INT_LIMIT:
                return exp.Literal.number(value) if value >= 0 else exp.Neg(this=exp.Literal.number(-value))
        if isinstance(node, _SWAP_ONLY) and numeric_plus(dialects):
            if _key(node.expression) < _key(node.this):
                node = typ(this=node.expression, expression=node.this)
            return node
        if isinstance(node, _SYMMETRIC) or typ in _FLIP:
            both_columns = isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Column)
            if both_columns and left_collation(dialects):
                return node
            if _key(node.expression) < _key(node.this):
                new_type = _FLIP.get(typ, typ)
                node = new_type(this=node.expression, expression=node.this)
            return node
        if isinstance(node, exp.In) and node.expressions:
            keyed = {}
            for item in node.expressions:
                keyed.setdefault(_key(item), item)
            node.set("expressions", [keyed[k] for k in sorted(keyed)])
        return node


_KEYWORD_DIR = __import__("pathlib").Path(__file__).with_name("keywords")


@__import__("functools").lru_cache(maxsize=None)
def reserved_words(dialect: str) -> frozenset[str]:
    """Words an engine will not accept as an unquoted identifier, lower case.

    Data files ``comparison/keywords/<file>.txt`` named by the engine's declaration, read off the engines themselves:
    DuckDB ``duckdb_keywords()`` (every category but ``unreserved``), PostgreSQL
    ``pg_get_keywords()`` (catcode R, C, T), SQLite's keyword list (lang_keywords.html).
    An unknown dialect has none listed (cross-dialect pairs with it are refused elsewhere).
    """
    name = _facts(dialect).keywords  # declared by the dialect's engine (``structural.keywords``)
    path = _KEYWORD_DIR / name if name else None
    if path is None or not path.exists():
        return frozenset()
    return frozenset(w.strip().lower() for w in path.read_text().splitlines()
                     if w.strip() and not w.startswith("#"))


def _own_names(schema: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Every table and column name of ``schema`` -> itself (the source's own names)."""
    names = {t: t for t in schema}
    for cols in schema.values():
        names.update((c, c) for c in cols)
    return names


def replica_names(schema: Mapping[str, Mapping[str, str]], source_dialect: str,
                  target_dialect: str) -> dict[str, str | None]:
    """Every name a replica of ``schema`` stores -> the source name it stands for (None when a
    table and a column of different source names share one stored name).

    The names come from the one naming rule of replication
    (:func:`polysql_ray.engines.identifiers.replica_name_for`): on PostgreSQL an SQLite
    source's ``StockQty`` is stored ``stockqty``, so ``SELECT stockqty`` resolves there and
    ``SELECT "StockQty"`` does not (SQLSTATE 42703). Raises ``_Unknown`` when either dialect
    has no engine with identifier rules."""
    from polysql_ray.engines.identifiers import replica_name_for
    from polysql_ray.engines.registry import engine_for_dialect

    try:
        source, target = engine_for_dialect(source_dialect), engine_for_dialect(target_dialect)
        tables = list(schema)
        out: dict[str, str | None] = {}

        def put(stored: str, name: str) -> None:
            out[stored] = name if out.get(stored, name) == name else None

        for t in tables:
            put(replica_name_for(t, "table", source, target, tables)[0], t)
            cols = list(schema[t])
            for c in cols:
                put(replica_name_for(c, "column", source, target, cols)[0], c)
    except KeyError as e:
        raise _Unknown(f"no_identifier_rules:{e}") from None
    return out


#: Significant digits a decimal literal may have to mean the same number as an exact numeric
#: and as an 8-byte float (DBL_DIG: such decimals convert to distinct, order-preserving doubles).
PORTABLE_LITERAL_DIGITS = 15
#: Beyond this many significant digits DuckDB reads a decimal literal as DOUBLE (DECIMAL(38)).
EXACT_LITERAL_DIGITS = 38
_INT64 = 2 ** 63 - 1


def _literal_form(text: str) -> tuple[str, int, float | None]:
    """``(form, significant digits, value as float or None)`` of a numeric literal's text
    (form: ``integer`` within int64, ``big_integer``, ``decimal`` or ``exponent``)."""
    import decimal

    try:
        d = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return "unreadable", 0, None
    if not d.is_finite():
        return "unreadable", 0, None
    digits = len(d.normalize().as_tuple().digits)  # significant: 1.500 and 0.0015 have 2
    low = text.lower()
    if "e" in low:
        form = "exponent"
    elif "." in low:
        form = "decimal"
    else:
        form = "integer" if abs(int(d)) <= _INT64 else "big_integer"
    try:
        value = float(d)
    except OverflowError:
        value = None
    return form, digits, 0.0 if d.is_zero() else (value if value != 0.0 else None)


def portable_literal(text: str, a: str, b: str) -> bool:
    """True when the numeric literal ``text`` means the same number in dialects ``a`` and ``b``.

    Each dialect declares the literal forms it reads as an 8-byte float
    (``StructuralFacts.double_literals``); the rest it reads exactly. Read the same way in both
    (both float: the same correctly rounded double, even ``inf``; both exact, at most
    :data:`EXACT_LITERAL_DIGITS` digits): portable. Read differently: portable only with at most
    :data:`PORTABLE_LITERAL_DIGITS` significant digits and a magnitude a double holds as a normal
    number: ``1e999`` is ``inf`` in SQLite and overflows against a float column in PostgreSQL
    (22003), ``3.0000000000000001`` equals 3 in SQLite and not in PostgreSQL."""
    form, digits, value = _literal_form(text)
    if form == "unreadable":
        return False
    if form == "integer":
        return True
    as_double = {d: form in _facts(d).double_literals for d in (a, b)}
    if as_double[a] == as_double[b]:
        return as_double[a] or digits <= EXACT_LITERAL_DIGITS
    return digits <= PORTABLE_LITERAL_DIGITS and value is not None and (
        value == 0.0 or 1e-300 < abs(value) < 1e300)


#: Nodes that are a truth value in every portable dialect (PostgreSQL refuses any other
#: expression where a boolean is expected: ``WHERE stock`` is 42804, SQLite reads it as stock <> 0).
_PREDICATES = (exp.EQ, exp.NEQ, exp.LT, exp.GT, exp.LTE, exp.GTE, exp.Is, exp.In, exp.Exists,
               exp.Boolean, exp.And, exp.Or, exp.Not)


def _is_predicate(node) -> bool:
    while isinstance(node, exp.Paren):
        node = node.this
    return isinstance(node, _PREDICATES)


def _single_row(query) -> bool:
    """True when ``query`` returns at most one row on any data: an aggregating SELECT without
    GROUP BY (a scalar subquery with more rows is an error in PostgreSQL and DuckDB, and
    SQLite silently takes the first)."""
    while isinstance(query, exp.Subquery):
        query = query.this
    return isinstance(query, exp.Select) and query.args.get("group") is None and bool(query.expressions) \
        and all(any(isinstance(n, exp.AggFunc) for n in e.walk()) for e in query.expressions)


#: Parents under which a parenthesised query is a table or a query, not a scalar value.
_QUERY_PLACES = (exp.From, exp.Join, exp.SetOperation, exp.Subquery)


def _runs_alike(node, schema) -> str | None:
    """Why ``node`` (one node of a cross-dialect query) may run on one dialect and fail on the
    other, else None: a bare value where a truth value is expected, ``IS`` with anything but
    NULL (SQLite's ``IS`` is null-safe equality), a scalar subquery that may return several
    rows, a reference to an output alias outside ORDER BY (PostgreSQL resolves none), an
    ORDER BY key of a SELECT DISTINCT that is not selected, ``*`` in an aggregating SELECT."""
    conditions = []
    if isinstance(node, (exp.Where, exp.Having)):
        conditions.append(node.this)
    elif isinstance(node, exp.Join) and node.args.get("on") is not None:
        conditions.append(node.args["on"])
    elif isinstance(node, (exp.And, exp.Or)):
        conditions += [node.this, node.expression]
    elif isinstance(node, exp.Not):
        conditions.append(node.this)
    if any(not _is_predicate(c) for c in conditions):
        return "bare_value_as_condition"
    if isinstance(node, exp.Is) and not isinstance(node.expression, exp.Null):
        return "is_not_null_test"
    if isinstance(node, exp.Subquery) and not isinstance(node.parent, _QUERY_PLACES) \
            and not _single_row(node):
        return "scalar_subquery_rows"
    if isinstance(node, exp.Select):
        aliases = {e.alias.lower() for e in node.expressions if isinstance(e, exp.Alias)}
        for key in ("where", "having", "group"):
            part = node.args.get(key)
            if part is not None and aliases and any(
                    not c.table and c.name.lower() in aliases for c in part.find_all(exp.Column)):
                return "output_alias_reference"
        for j in node.args.get("joins") or []:
            on = j.args.get("on")
            if on is not None and aliases and any(
                    not c.table and c.name.lower() in aliases for c in on.find_all(exp.Column)):
                return "output_alias_reference"
        order = node.args.get("order")
        if node.args.get("distinct") is not None and order is not None:
            selected = {_key(e) for e in node.expressions} | {_key(e.this) for e in node.expressions
                                                              if isinstance(e, exp.Alias)}
            selected |= {_key(exp.column(a)) for a in aliases}
            if any(_key(o.this) not in selected for o in order.expressions):
                return "distinct_order_key_not_selected"
        if _aggregating(node) and any(isinstance(e, exp.Star) or (isinstance(e, exp.Column)
                                      and isinstance(e.this, exp.Star)) for e in node.expressions):
            return "star_in_aggregating_select"
    return None


def _aggregating(select: exp.Select) -> bool:
    return select.args.get("group") is not None or any(
        isinstance(n, exp.AggFunc) for e in select.expressions for n in e.walk())


def _column_key(col: exp.Column) -> str:
    return col.name.lower()


def _has_ungrouped_column(select: exp.Select) -> bool:
    """True when an aggregating SELECT (GROUP BY, or an aggregate without GROUP BY) uses a
    column outside any aggregate that is not a GROUP BY column (GROUP BY strictness differs
    between engines)."""
    group = select.args.get("group")
    aggregating = group is not None or any(
        isinstance(n, exp.AggFunc) for e in select.expressions for n in e.walk())
    if not aggregating:
        return False
    grouped = {_column_key(c) for e in (group.expressions if group else []) for c in e.find_all(exp.Column)}
    parts = list(select.expressions)
    for key in ("having", "order"):
        if select.args.get(key) is not None:
            parts.append(select.args[key])
    for part in parts:
        for col in part.find_all(exp.Column):
            inside_agg = False
            p = col.parent
            while p is not None and p is not select:
                if isinstance(p, (exp.AggFunc, exp.Subquery, exp.Select)):
                    inside_agg = True
                    break
                p = p.parent
            if not inside_agg and _column_key(col) not in grouped:
                return True
    return False


def _int_literal(node) -> int | None:
    """Python int of an integer literal (or its negation), else None."""
    if isinstance(node, exp.Neg):
        inner = _int_literal(node.this)
        return None if inner is None else -inner
    if isinstance(node, exp.Literal) and not node.is_string and re.fullmatch(r"\d+", node.this):
        return int(node.this)
    return None


def _schema_has_column(schema, name: str) -> bool:
    if not schema:
        return False
    return any(c == name for cols in schema.values() for c in cols)


def _declared_class(declared: str) -> str | None:
    for pattern, cls in DECLARED_TYPE_CLASSES:
        if re.search(pattern, declared or "", re.IGNORECASE):
            return cls
    return None


def _type_class(node, schema) -> str | None:
    """Type class (``num``/``text``) of an operand, or None when unknown (guard refuses)."""
    if isinstance(node, exp.Paren):
        return _type_class(node.this, schema)
    if isinstance(node, exp.Literal):
        return "text" if node.is_string else "num"
    if isinstance(node, exp.Neg):
        return _type_class(node.this, schema)
    if isinstance(node, exp.Count):
        return "num"
    if isinstance(node, (exp.Sum, exp.Avg, exp.Min, exp.Max)):
        return "num" if _type_class(node.this, schema) == "num" else None
    if isinstance(node, exp.Column) and schema:
        name = node.name
        table = node.table
        classes = set()
        for tname, cols in schema.items():
            for cname, declared in cols.items():
                if cname.lower() == name.lower():
                    classes.add(_declared_class(declared))
        return classes.pop() if len(classes) == 1 else None
    return None
