"""Soundness property: every structural ``equivalent`` agrees with execution.

Hypothesis draws a random predicate/expression over a small table ``t(a INTEGER, b INTEGER,
c TEXT)``, a random rewrite of it (sound ones: operand swaps, comparison flips, IN-list
shuffles, identifier/keyword casing, parentheses, alias renaming; unsound ones: ``p AND NOT p``
-> FALSE, dropped conjuncts, ``<`` -> ``<=``, re-association, swapped ``-``, changed literals)
and several random databases with NULLs. Whenever :class:`AstEquivalence` says ``equivalent``
(same-dialect SQLite, same-dialect DuckDB, and SQLite gold vs DuckDB prediction), both queries
are executed on every database (sqlite3 and duckdb in-memory) and must return the same bag of
rows (or both fail). A counterexample fails the test.
"""
from __future__ import annotations

import sqlite3
from collections import Counter

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polysql_ray.comparison.ast import AstEquivalence

AST = AstEquivalence()
SCHEMA = {"t": {"a": "INTEGER", "b": "INTEGER", "c": "TEXT"}}
STATS = Counter()

ints = st.one_of(st.none(), st.integers(-3, 3))
texts = st.one_of(st.none(), st.sampled_from(["a", "A", "b", "ab", "", "B "]))
rows = st.lists(st.tuples(ints, ints, texts), min_size=0, max_size=6)
databases = st.lists(rows, min_size=3, max_size=3)

int_col = st.sampled_from(["a", "b", "t.a", "t.b"])
int_lit = st.integers(-2, 3).map(str)


def int_expr():
    base = st.one_of(int_col, int_lit)
    return st.recursive(base, lambda e: st.tuples(e, st.sampled_from(["+", "-", "*"]), e)
                        .map(lambda x: f"({x[0]} {x[1]} {x[2]})"), max_leaves=3)


def predicate():
    cmp_ = st.tuples(int_expr(), st.sampled_from(["=", "<>", "<", ">", "<=", ">="]), int_expr()) \
        .map(lambda x: f"{x[0]} {x[1]} {x[2]}")
    text_cmp = st.tuples(st.sampled_from(["c"]), st.sampled_from(["=", "<>", "<", ">="]),
                         st.sampled_from(["'a'", "'A'", "'b'", "''"])).map(lambda x: f"{x[0]} {x[1]} {x[2]}")
    in_ = st.tuples(int_col, st.lists(int_lit, min_size=1, max_size=3)) \
        .map(lambda x: f"{x[0]} IN ({', '.join(x[1])})")
    isnull = st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["IS NULL", "IS NOT NULL"])) \
        .map(" ".join)
    leaf = st.one_of(cmp_, text_cmp, in_, isnull)
    return st.recursive(leaf, lambda p: st.one_of(
        st.tuples(p, st.sampled_from(["AND", "OR"]), p).map(lambda x: f"({x[0]} {x[1]} {x[2]})"),
        p.map(lambda x: f"(NOT {x})")), max_leaves=4)


def rewrite(sql: str, kind: str) -> str:
    """A random textual rewrite of ``sql`` (sound or not - the checker must tell)."""
    import re
    if kind == "swap_and":
        m = re.match(r"^\((.*) (AND|OR) (.*)\)$", sql)
        return f"({m.group(3)} {m.group(2)} {m.group(1)})" if m else sql
    if kind == "flip_first_cmp":
        flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "<>": "<>"}
        m = re.search(r"([\w.']+) (<=|>=|<>|=|<|>) ([\w.'-]+)", sql)
        if not m:
            return sql
        return sql[:m.start()] + f"{m.group(3)} {flip[m.group(2)]} {m.group(1)}" + sql[m.end():]
    if kind == "upper_idents":
        return re.sub(r"\b([abt])\b", lambda m: m.group(1).upper(), sql)
    if kind == "reverse_in":
        return re.sub(r"IN \(([^)]*)\)", lambda m: "IN (" + ", ".join(reversed(m.group(1).split(", "))) + ")", sql)
    if kind == "swap_plus":
        return re.sub(r"\(([\w.-]+) \+ ([\w.-]+)\)", r"(\2 + \1)", sql, count=1)
    if kind == "swap_minus":
        return re.sub(r"\(([\w.-]+) - ([\w.-]+)\)", r"(\2 - \1)", sql, count=1)
    if kind == "reassoc":
        return re.sub(r"\(\(([\w.-]+) \+ ([\w.-]+)\) \+ ([\w.-]+)\)", r"(\1 + (\2 + \3))", sql, count=1)
    if kind == "lt_to_le":
        return sql.replace(" < ", " <= ", 1)
    if kind == "and_not_self":
        return f"({sql} AND NOT {sql})"
    if kind == "drop_right":
        m = re.match(r"^\((.*) (AND|OR) (.*)\)$", sql)
        return m.group(1) if m else sql
    if kind == "literal_change":
        return re.sub(r"\b1\b", "2", sql, count=1)
    if kind == "not_not":
        return f"(NOT (NOT {sql}))"
    if kind == "dup_and":
        return f"({sql} AND {sql})"
    if kind == "upper_text":
        return sql.replace("'a'", "'A'", 1)
    return sql


KINDS = ["swap_and", "flip_first_cmp", "upper_idents", "reverse_in", "swap_plus", "swap_minus",
         "reassoc", "lt_to_le", "and_not_self", "drop_right", "literal_change", "not_not",
         "dup_and", "upper_text", "same"]


def _norm(v):
    if isinstance(v, bool):
        return int(v)
    return v


_SQLITE = sqlite3.connect(":memory:", check_same_thread=False)
_SQLITE.execute("CREATE TABLE t (a INTEGER, b INTEGER, c TEXT)")
_DUCK = duckdb.connect(":memory:")
_DUCK.execute("CREATE TABLE t (a INTEGER, b INTEGER, c VARCHAR)")


def _run_sqlite(data, sql):
    _SQLITE.execute("DELETE FROM t")
    _SQLITE.executemany("INSERT INTO t VALUES (?, ?, ?)", data)
    try:
        return Counter(tuple(_norm(v) for v in r) for r in _SQLITE.execute(sql).fetchall())
    except sqlite3.Error as e:
        return ("error", type(e).__name__)


def _run_duckdb(data, sql):
    _DUCK.execute("DELETE FROM t")
    if data:
        _DUCK.executemany("INSERT INTO t VALUES (?, ?, ?)", data)
    try:
        return Counter(tuple(_norm(v) for v in r) for r in _DUCK.execute(sql).fetchall())
    except duckdb.Error:
        return ("error", "duckdb")


RUNNERS = {"sqlite": _run_sqlite, "duckdb": _run_duckdb}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          database=None)
@given(pred=predicate(), expr=int_expr(), kind=st.sampled_from(KINDS),
       shape=st.sampled_from(["where", "select", "select_pred"]), dbs=databases)
def test_structural_equivalent_agrees_with_execution(pred, expr, kind, shape, dbs):
    if shape == "where":
        gold_body, pred_body = pred, rewrite(pred, kind)
        gold = f"SELECT a, c FROM t WHERE {gold_body}"
        guess = f"SELECT a, c FROM t AS x WHERE {pred_body}".replace("t.", "x.") if kind == "same" \
            else f"select A, C from t where {pred_body}" if kind == "upper_idents" \
            else f"SELECT a, c FROM t WHERE {pred_body}"
    elif shape == "select":
        gold = f"SELECT {expr} AS v FROM t"
        guess = f"SELECT {rewrite(expr, kind)} FROM t"
    else:
        gold = f"SELECT {pred} FROM t"
        guess = f"SELECT {rewrite(pred, kind)} AS p FROM t"
    STATS["cases"] += 1
    for gd, pd in (("sqlite", "sqlite"), ("duckdb", "duckdb"), ("sqlite", "duckdb")):
        r = AST.check(gold, gd, guess, pd, schema=SCHEMA if gd != pd else None)
        if not r.equivalent:
            continue
        STATS[f"proven_{gd}_{pd}"] += 1
        for data in dbs:
            g_res, p_res = RUNNERS[gd](data, gold), RUNNERS[pd](data, guess)
            STATS["executions"] += 2
            if isinstance(g_res, tuple) and isinstance(p_res, tuple):
                continue  # both failed: no observable difference
            assert g_res == p_res, f"counterexample {gd}->{pd}: {gold!r} vs {guess!r} on {data}"


def test_report_property_stats():
    """Prints the number of generated cases (run after the property test in file order)."""
    print(f"\nproperty cases: {dict(STATS)}")
    assert STATS["cases"] >= 100
    assert STATS["proven_sqlite_sqlite"] > 0 and STATS["proven_sqlite_duckdb"] > 0
