"""Verdicts a new user found wrong, on the real servers (PostgreSQL, MariaDB) and embedded engines.

Each case is checked both ways: the wrong verdict is gone, the right one still holds.

1. a structural proof of a prediction the target cannot run (``"StockQty"`` on PostgreSQL,
   ``1e999``);
2. MySQL integers beyond int64 (``BIGINT UNSIGNED``) arrived as text;
3. MySQL ``AVG`` as DECIMAL(.,4) (``div_precision_increment``) failed a correct answer;
5. MySQL 1142 (a table outside the copy) was a sandbox refusal, not a schema error;
6. a missing function has one status on every engine (and a missing column another);
7. a MySQL executable comment alone (``/*!50000 SELECT 1 */``) was "no SQL".
"""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import register_server_replication, require_servers  # noqa: E402

require_servers("postgres", "mysql")
register_server_replication()

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare, score_sql  # noqa: E402
from polysql_ray.comparison.equivalence import _replica, load_engine  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402

LIM = Limits(timeout_s=120.0, row_cap=50)
ENGINES = ("sqlite", "duckdb", "postgres", "mysql")


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """An SQLite source with mixed-case names, and its copies on every engine."""
    root = tmp_path_factory.mktemp("verdicts")
    path = root / "inventory.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE Items (id INTEGER PRIMARY KEY, Name TEXT, StockQty INTEGER, price REAL)")
    con.executemany("INSERT INTO Items VALUES (?, ?, ?, ?)",
                    [(1, "bolt", 10, 1.5), (2, "nut", 20, 2.25), (3, "gear", 5, 3.0)])
    con.commit()
    con.close()
    reps = root / "replicas"
    locs = {"sqlite": str(path)}
    for target in ENGINES[1:]:
        locs[target] = _replica(str(path), "sqlite", target, reps, {}, "verdicts")
    return {"db": str(path), "replicas": str(reps), "locs": locs}


def _score(shop, gold, pred, dialect):
    return score_sql(gold, pred, database=shop["db"], dialect=dialect, replicas_dir=shop["replicas"],
                     dataset="verdicts")


def _run(shop, engine, sql):
    eng = load_engine(engine)
    try:
        return LIM.enforce(eng.execute(shop["locs"][engine], sql, LIM))
    finally:
        eng.close()


# ------------------------------------------------------------------ 1. proofs that must also run
def test_quoted_source_spelling_is_executed_and_fails_on_postgres(shop):
    """The PostgreSQL copy stores StockQty as stockqty: a quoted "StockQty" cannot run there, so
    it is never proven (it was: pass/proven); the unquoted spelling is proven and passes."""
    r = _score(shop, "SELECT StockQty FROM Items", 'SELECT "StockQty" FROM "Items"', "postgres")
    assert (r.verdict, r.basis, r.reason) == ("fail", "observed", "pred_schema"), r
    r = _score(shop, "SELECT StockQty FROM Items WHERE id = 2", 'SELECT "StockQty" FROM items WHERE id = 2',
               "postgres")
    assert (r.verdict, r.reason) == ("fail", "pred_schema"), r
    for pred in ("SELECT stockqty FROM items", "SELECT StockQty FROM Items"):
        r = _score(shop, "SELECT StockQty FROM Items", pred, "postgres")
        assert (r.verdict, r.basis) == ("pass", "proven"), (pred, r)


def test_out_of_range_literal_is_executed_on_postgres(shop):
    """``price < 1e999``: inf in SQLite, an overflow against a double in PostgreSQL (22003)."""
    sql = "SELECT id FROM Items WHERE price < 1e999"
    r = _score(shop, sql, sql, "postgres")
    assert (r.verdict, r.basis, r.reason) == ("fail", "observed", "pred_runtime"), r
    ok = "SELECT id FROM Items WHERE price < 1000"
    r = _score(shop, ok, ok, "postgres")
    assert (r.verdict, r.basis) == ("pass", "proven"), r
    # on DuckDB 1e999 is a DOUBLE inf as in SQLite: the same rows, still proven
    r = _score(shop, sql, sql, "duckdb")
    assert (r.verdict, r.basis) == ("pass", "proven"), r


# ------------------------------------------------------------------ 2. integers beyond int64
def test_mysql_unsigned_bigint_is_a_number(shop):
    res = _run(shop, "mysql", "SELECT CAST(18446744073709551615 AS UNSIGNED) AS v, "
                              "CAST(9223372036854775808 AS UNSIGNED) + 0 AS w")
    assert res.ok and res.table.schema.field("v").type == pa.uint64(), res.table.schema
    assert res.table.to_pylist() == [{"v": 18446744073709551615, "w": 9223372036854775808}]
    duck = load_engine("duckdb")
    try:
        same = duck.execute(shop["locs"]["duckdb"], "SELECT 18446744073709551615::UBIGINT, "
                                                    "9223372036854775808::UBIGINT", LIM).table
        other = duck.execute(shop["locs"]["duckdb"], "SELECT 18446744073709551614::UBIGINT, "
                                                     "9223372036854775808::UBIGINT", LIM).table
    finally:
        duck.close()
    shape = analyze_gold("SELECT 1", "duckdb")
    assert compare(same, res.table, shape, ComparisonPolicy()).match
    r = compare(other, res.table, shape, ComparisonPolicy())
    assert not r.match and r.reason == "values", r  # was "types": text against a number


# ------------------------------------------------------------------ 3. DECIMAL scale of AVG
def test_mysql_avg_at_its_decimal_scale_passes_and_other_scales_fail(shop):
    """MariaDB's AVG(int) is DECIMAL(.,4) (11.6667 for 35/3): the right answer at the engine's
    scale, flagged; rounding to 2 digits yourself is another answer."""
    gold = "SELECT avg(StockQty) FROM Items"
    r = _score(shop, gold, "SELECT AVG(StockQty) FROM Items", "mysql")
    assert (r.verdict, r.reason) == ("pass", "match") and "decimal_scale" in r.flags, r
    r = _score(shop, gold, "SELECT ROUND(AVG(StockQty), 2) FROM Items", "mysql")
    assert (r.verdict, r.reason) == ("fail", "values"), r
    r = _score(shop, gold, "SELECT AVG(StockQty) + 0.0001 FROM Items", "mysql")
    assert r.verdict == "fail", r


# ------------------------------------------------------------------ 5. MySQL 1142
def test_mysql_table_outside_the_copy_is_a_schema_error(shop):
    for sql in ("SELECT * FROM otherdb.t", "SELECT * FROM mysql.user"):
        res = _run(shop, "mysql", sql)
        assert res.status is S.SCHEMA and "[1142]" in res.error, (sql, res.status, res.error)
        # the same text is a schema error on the other engines too
        assert _run(shop, "postgres", sql).status is S.SCHEMA
    r = _score(shop, "SELECT count(*) FROM Items", "SELECT count(*) FROM otherdb.Items", "mysql")
    assert (r.verdict, r.reason) == ("fail", "pred_schema"), r
    assert _run(shop, "mysql", "SELECT count(*) FROM Items").ok  # its own copy stays readable
    # a refusal of the sandbox stays one
    assert _run(shop, "mysql", "SELECT * FROM Items INTO OUTFILE '/tmp/polysql_verdicts'").status is S.REJECTED


# ------------------------------------------------------------------ 6. one status per kind of error
@pytest.mark.parametrize("engine", ENGINES)
def test_missing_function_has_one_status_on_every_engine(shop, engine):
    """A function the dialect lacks is ``syntax`` (the dialect-syntax family of the README's
    error taxonomy) on every engine: SQLite "no such function", DuckDB "Catalog Error: Scalar
    Function with name ... does not exist", PostgreSQL 42883, MariaDB 1305/1370; a missing
    column stays ``schema``."""
    res = _run(shop, engine, "SELECT nosuchfn(id) FROM Items")
    assert res.status is S.SYNTAX, (engine, res.status, res.error)
    res = _run(shop, engine, "SELECT nosuchcol FROM Items")
    assert res.status is S.SCHEMA, (engine, res.status, res.error)


# ------------------------------------------------------------------ 7. executable comment alone
@pytest.mark.parametrize("engine", ENGINES)
def test_lone_executable_comment_is_refused_on_mysql_and_empty_elsewhere(shop, engine):
    res = _run(shop, engine, "/*!50000 SELECT 1 */")
    if engine == "mysql":  # MariaDB would run it: a refused statement, not a missing prediction
        assert res.status is S.REJECTED and "executable comment" in res.error, (res.status, res.error)
    else:  # a comment and nothing else
        assert res.status is S.EMPTY, (engine, res.status, res.error)
    assert _run(shop, engine, "/* a comment */ SELECT 1").ok
