"""Gold-shape analysis (sqlglot): top-level ORDER BY, key positions, LIMIT, the probe query.

Probe queries are executed on a real SQLite database (and a MySQL-dialect one is parsed back)
to check they are valid SQL with the gold columns first and the keys where ``probe_keys`` says.
"""
from __future__ import annotations

import sqlite3

import pytest
import sqlglot

from polysql_ray.comparison import analyze_gold


@pytest.fixture(scope="module")
def con():
    c = sqlite3.connect(":memory:")
    c.execute("CREATE TABLE t(a INTEGER, b TEXT, c REAL)")
    c.executemany("INSERT INTO t VALUES (?,?,?)", [(1, "x", 0.5), (2, "y", 0.5), (3, "x", 0.25), (4, "z", 0.5)])
    return c


@pytest.mark.parametrize("sql, ordered", [
    ("SELECT a FROM t ORDER BY a", True),
    ("SELECT a FROM t", False),
    ("SELECT a FROM (SELECT a FROM t ORDER BY a)", False),           # subquery order: no
    ("SELECT a, row_number() OVER (ORDER BY c) FROM t", False),      # window order: no
    ("WITH s AS (SELECT a FROM t ORDER BY a) SELECT a FROM s", False),
    ("SELECT a FROM t UNION SELECT a FROM t ORDER BY 1", True),      # compound ORDER BY counts
    ("SELECT a FROM t WHERE a IN (SELECT a FROM t ORDER BY a LIMIT 2)", False),
])
def test_top_level_order_by_only(sql, ordered):
    assert analyze_gold(sql, "sqlite").ordered is ordered


def test_key_positions_by_position_alias_and_expression():
    s = analyze_gold("SELECT b, count(*) AS n, max(c) FROM t GROUP BY b ORDER BY n DESC, 1, max(c)", "sqlite")
    assert s.order_keys == (1, 0, 2) and s.keys_complete and s.probe_sql is None
    s = analyze_gold("SELECT b AS name FROM t ORDER BY a", "sqlite")  # a is not an output column
    assert s.order_keys == () and not s.keys_complete and s.probe_keys == (-1,)
    s = analyze_gold("SELECT * FROM t ORDER BY 1", "sqlite")  # position after a star: unknown width
    assert not s.keys_complete


def test_probe_appends_missing_keys_and_widens_limit(con):
    s = analyze_gold("SELECT b FROM t ORDER BY c DESC, a LIMIT 2", "sqlite", tie_window=10)
    assert s.limit == 2 and s.probe_keys == (-2, -1)
    probe = con.execute(s.probe_sql).fetchall()
    assert len(probe) == 4 and [len(r) for r in probe] == [3] * 4
    assert [r[1] for r in probe] == [0.5, 0.5, 0.5, 0.25] and [r[2] for r in probe] == [1, 2, 4, 3]
    gold = con.execute("SELECT b FROM t ORDER BY c DESC, a LIMIT 2").fetchall()
    assert [r[:1] for r in probe[:2]] == gold  # gold columns first, same rows


def test_probe_for_complete_keys_only_widens_limit(con):
    s = analyze_gold("SELECT a, c FROM t ORDER BY c LIMIT 1 OFFSET 1", "sqlite", tie_window=5)
    assert s.keys_complete and s.probe_keys == (1,)
    assert len(con.execute(s.probe_sql).fetchall()) == 3  # LIMIT 6 OFFSET 1 kept the offset
    assert analyze_gold("SELECT a FROM t ORDER BY a", "sqlite").probe_sql is None


def test_mysql_limit_offset_form_survives():
    s = analyze_gold("SELECT b FROM t ORDER BY a LIMIT 1, 2", "mysql", tie_window=3)
    assert s.limit == 2 and s.probe_sql is not None
    probe = sqlglot.parse_one(s.probe_sql, read="mysql")
    assert probe.args["limit"].expression.this == "5" and "1" in probe.sql("mysql")


def test_no_probe_where_appending_changes_rows():
    s = analyze_gold("SELECT DISTINCT b FROM t ORDER BY a", "sqlite")
    assert s.ordered and s.probe_sql is None and "order_keys_unknown" in s.flags
    s = analyze_gold("SELECT a FROM t UNION SELECT a FROM t ORDER BY c", "sqlite")
    assert s.probe_sql is None and "order_keys_unknown" in s.flags


def test_unparsed_gold_falls_back_to_bag_and_limit_without_order_flagged():
    s = analyze_gold("SELEC a FRM t WHERE", "sqlite")
    assert not s.ordered and "unparsed_gold" in s.flags
    assert "limit_without_order" in analyze_gold("SELECT a FROM t LIMIT 3", "sqlite").flags
    assert analyze_gold("(SELECT a FROM t ORDER BY a)", "sqlite").ordered


@pytest.mark.parametrize("sql", [
    "SELECT a FROM t WHERE b IN (SELECT b FROM u ORDER BY c LIMIT 2) LIMIT 1",
    "SELECT a FROM t ORDER BY a LIMIT (SELECT count(*) FROM (SELECT x FROM u ORDER BY x LIMIT 3))",
    "SELECT random(), now(), strftime('%Y', 'now'), current_date FROM t LIMIT 4",
    "(SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 5) ORDER BY a)",
])
def test_one_walk_scan_is_the_flags_and_the_nested_cuts(sql):
    """_scan (one walk) gives determinism_flags and _nested_cuts, with and without the top-level
    LIMIT skipped, a SELECT inside that LIMIT included."""
    from sqlglot import exp

    from polysql_ray.comparison.shape import _nested_cuts, _scan, determinism_flags

    tree = sqlglot.parse_one(sql, read="sqlite")
    top = tree
    while isinstance(top, (exp.Subquery, exp.Paren)):
        top = top.this
    for skip in (None, top.args.get("limit")):
        flags, cuts = _scan(tree, skip)
        assert flags == determinism_flags(tree, skip)
        assert [(id(s), c) for s, c in cuts] == [(id(s), c) for s, c in _nested_cuts(tree)]
