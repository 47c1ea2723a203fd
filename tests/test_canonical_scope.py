"""The canonical forms of a scoring batch (:func:`polysql_ray.comparison.normalize.canonical_scope`):
one gold result compared with many predictions, and each failed comparison's re-checks, read
the canonical columns of one table once; every comparison's outcome is the one it has outside
a scope. Result sets come from DuckDB (its drivers' real Arrow types)."""
from __future__ import annotations

import dataclasses

import duckdb
import pytest

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare, compare_batch
from polysql_ray.comparison.normalize import canonical_columns, canonical_scope

POLICY = ComparisonPolicy()
GOLD = "SELECT name, n, score, ok FROM t ORDER BY n"
PREDS = [
    GOLD,                                                            # identical
    "SELECT n, name, score, ok FROM t ORDER BY n",                   # columns reordered
    "SELECT name, n, score, ok FROM t ORDER BY n DESC",              # order
    "SELECT upper(name), n, score, ok FROM t ORDER BY n",            # collation flag
    "SELECT name, n, score::DECIMAL(9,1), ok FROM t ORDER BY n",     # decimal scale
    "SELECT name, n, score, ok::INT FROM t ORDER BY n",              # bool vs int
    "SELECT name, n, score, ok FROM t UNION ALL SELECT name, n, score, ok FROM t ORDER BY n",  # duplicates
    "SELECT name || ' ', n, score, ok FROM t ORDER BY n",            # trailing spaces
    "SELECT name, n + 1, score, ok FROM t ORDER BY n",               # values
    "SELECT name, n FROM t ORDER BY n",                              # column count
]


@pytest.fixture(scope="module")
def results():
    con = duckdb.connect()
    con.execute("CREATE TABLE t (name VARCHAR, n INTEGER, score DOUBLE, ok BOOLEAN)")
    con.execute("INSERT INTO t VALUES ('Ann', 1, 7.25, true), ('bob', 2, 8.5, false), ('Cid', 3, NULL, true),"
                " ('Dee', 4, 9.75, NULL)")
    return con.sql(GOLD).to_arrow_table(), [con.sql(sql).to_arrow_table() for sql in PREDS]


@pytest.mark.parametrize("policy", [POLICY, dataclasses.replace(POLICY, trim_trailing_spaces=True),
                                    dataclasses.replace(POLICY, bool_as_int=False, order="bag")])
def test_batch_in_a_scope_decides_as_each_comparison_alone(results, policy):
    gold, preds = results
    shape = analyze_gold(GOLD, "duckdb")
    alone = [compare(gold, p, shape, policy) for p in preds]
    assert len({(c.match, c.reason, c.flags) for c in alone}) >= 5  # the pairs differ in outcome
    assert compare_batch([(gold, p, shape, None) for p in preds], policy) == alone


def test_policies_that_change_canonical_forms_do_not_share_them(results):
    gold, preds = results
    shape = analyze_gold(GOLD, "duckdb")
    trim = dataclasses.replace(POLICY, trim_trailing_spaces=True)
    spaced = preds[PREDS.index("SELECT name || ' ', n, score, ok FROM t ORDER BY n")]
    with canonical_scope():
        assert canonical_columns(gold, POLICY) is canonical_columns(gold, POLICY)  # computed once
        assert canonical_columns(gold, POLICY) is not canonical_columns(gold, trim)
        exact, trimmed = compare(gold, spaced, shape, POLICY), compare(gold, spaced, shape, trim)
    assert not exact.match and trimmed.match
    assert (exact, trimmed) == (compare(gold, spaced, shape, POLICY), compare(gold, spaced, shape, trim))
    assert canonical_columns(gold, POLICY) is not canonical_columns(gold, POLICY)  # no scope: nothing kept
