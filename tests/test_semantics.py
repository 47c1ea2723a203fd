"""Dialect semantics as data (issue 20, item 2): every engine declares its result-changing facts
(``Semantics``: integer division, LIKE/= case rules, NULL placement per ORDER BY direction,
aggregates over no rows, string-number comparison), and each fact raises its flag on every one
of the seven dialects, by dual execution on the real engines (PostgreSQL, MariaDB servers; chdb;
Snowflake and BigQuery through their stand-ins, fakesnow and bqemulator).

For each (dialect, fact) the gold runs on a source engine whose fact *differs* from the target's:
SQLite where SQLite differs, else DuckDB (same data, a DuckDB source file). A fact on which no
source engine differs from the target (``SUM`` over no rows is NULL everywhere but ClickHouse) is
tested in the other direction: no flag, and the prediction passes.
"""
from __future__ import annotations

import contextlib
import os
import sqlite3

import duckdb
import pytest

from polysql_ray.comparison.equivalence import score_sql
from polysql_ray.engines.declaration import STRING_NUMBER_RULES, Semantics
from polysql_ray.engines.registry import SEMANTICS

from tests.conftest_servers import SERVERS, register_server_replication, server_reachable

DIALECTS = ("sqlite", "duckdb", "postgres", "mysql", "clickhouse", "snowflake", "bigquery")
ROWS = [(1, "Ann", 30, 7, None), (2, "Bob", 40, 8, 3), (3, "Cid", 30, 6, 1), (4, "Dee", 52, 9, None),
        (5, "Eve", 41, 5, 2)]
DDL = ("CREATE TABLE t (id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL, age INTEGER NOT NULL, "
       "score INTEGER NOT NULL, rnk INTEGER)")

#: The documented table (README "Dialect semantics"); a change to a declaration must change both.
EXPECTED = {
    #            int_div nulls ASC/DESC     ci_eq  ci_like empty_sum_null string_number
    "sqlite":     (True,  "first", "last",  False, True,  True,  "affinity"),
    "mysql":      (False, "first", "last",  True,  True,  True,  "number"),
    "postgres":   (True,  "last",  "first", False, False, True,  "literal"),
    "duckdb":     (False, "last",  "last",  False, False, True,  "cast"),
    "clickhouse": (False, "last",  "last",  False, False, False, "literal"),
    "snowflake":  (False, "last",  "first", False, False, True,  "cast"),
    "bigquery":   (False, "first", "last",  False, False, True,  "error"),
}


def test_every_dialect_declares_every_fact():
    for name in DIALECTS:
        sem = SEMANTICS[name]
        assert isinstance(sem, Semantics), name
        assert (sem.integer_division, sem.nulls_asc, sem.nulls_desc, sem.ci_equals, sem.ci_like,
                sem.empty_sum_null, sem.string_number) == EXPECTED[name], name
        assert sem.string_number in STRING_NUMBER_RULES
    # DuckDB's NULLS LAST in both directions is not SQLite's "NULL smallest" in either one bit
    assert SEMANTICS["duckdb"].nulls(desc=True) == SEMANTICS["sqlite"].nulls(desc=True) == "last"
    assert SEMANTICS["duckdb"].nulls(desc=False) != SEMANTICS["sqlite"].nulls(desc=False)
    with pytest.raises(ValueError):
        Semantics(True, "top", "last", False, False, True, "cast")
    with pytest.raises(ValueError):
        Semantics(True, "first", "last", False, False, True, "magic")


# ----------------------------------------------------------------------------- real engines
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The same table as a SQLite and as a DuckDB source file."""
    d = tmp_path_factory.mktemp("semantics")
    lite = d / "sem.sqlite"
    con = sqlite3.connect(lite)
    con.execute(DDL)
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", ROWS)
    con.commit()
    con.close()
    duck = d / "sem.duckdb"
    con = duckdb.connect(str(duck))
    con.execute(DDL)
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", ROWS)
    con.close()
    return {"sqlite": str(lite), "duckdb": str(duck), "replicas": str(d / "replicas")}


@pytest.fixture(scope="module")
def settings():
    """``get(dialect) -> engine_settings`` for score_sql; starts a stand-in on first use, skips a
    dialect whose server or driver is missing."""
    from tests.standins import bqemulator_server, fakesnow_server
    from tests.warehouse_targets import DRIVERS, GRACE_S

    with contextlib.ExitStack() as stack:
        cache: dict = {}

        def get(dialect: str) -> dict:
            if dialect in cache:
                return cache[dialect]
            if dialect in SERVERS:
                if not server_reachable(*SERVERS[dialect][:2]):
                    pytest.skip(f"{dialect} unreachable")
                register_server_replication()
                cache[dialect] = {}
            elif dialect in DRIVERS:
                pytest.importorskip(DRIVERS[dialect])
                if dialect == "snowflake":
                    os.environ.setdefault("POLYSQL_TEST_FAKESNOW_PW", "fakesnow-accepts-any")  # never a real secret
                    host, port = stack.enter_context(fakesnow_server())
                    cache[dialect] = {"snowflake": {
                        "host": host, "port": port, "protocol": "http", "account": "fakesnow", "user": "fake",
                        "admin_user": "fake", "password_env": "POLYSQL_TEST_FAKESNOW_PW",
                        "admin_password_env": "POLYSQL_TEST_FAKESNOW_PW", "client_grace_s": GRACE_S,
                        "pool_size": 1}}
                elif dialect == "bigquery":
                    host, port = stack.enter_context(bqemulator_server())
                    cache[dialect] = {"bigquery": {"project": "polysql", "api_endpoint": f"http://{host}:{port}",
                                                   "anonymous": True, "client_grace_s": GRACE_S}}
                else:
                    cache[dialect] = {}
            else:
                cache[dialect] = {}
            return cache[dialect]

        yield get


def score(sources, settings, gold_engine, dialect, gold, pred):
    return score_sql(gold, pred, database=sources[gold_engine], engine=gold_engine, dialect=dialect,
                     replicas_dir=sources["replicas"], engine_settings=settings(dialect) or None,
                     dataset=f"semantics_{gold_engine}")


def gold_engine_for(dialect: str, differs) -> str:
    """SQLite when its fact differs from ``dialect``'s, else DuckDB (asserted to differ)."""
    for source in ("sqlite", "duckdb"):
        if source != dialect and differs(SEMANTICS[source], SEMANTICS[dialect]):
            return source
    raise AssertionError(f"no source engine differs from {dialect}")


#: fact -> (does the fact differ, gold SQL, predicted SQL, flag)
FACTS = {
    "integer_division": (lambda g, p: g.integer_division != p.integer_division,
                         "SELECT id, score / age AS r FROM t", "SELECT id, score / age AS r FROM t"),
    "null_order": (lambda g, p: g.nulls_asc != p.nulls_asc,
                   "SELECT id, rnk FROM t ORDER BY rnk", "SELECT id, rnk FROM t ORDER BY rnk"),
    "collation": (lambda g, p: g.ci_like != p.ci_like,
                  "SELECT id FROM t WHERE name LIKE 'e%'", "SELECT id FROM t WHERE name LIKE 'e%'"),
    "string_number": (lambda g, p: g.string_number != p.string_number,
                      "SELECT id FROM t WHERE age = '30'", "SELECT id FROM t WHERE age = '30'"),
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("flag", list(FACTS))
def test_flag_fires_where_the_fact_differs(sources, settings, dialect, flag):
    differs, gold, pred = FACTS[flag]
    source = gold_engine_for(dialect, differs)
    r = score(sources, settings, source, dialect, gold, pred)
    assert r.verdict != "unavailable", r.explanation
    assert flag in r.flags, (source, dialect, r.verdict, r.reason, r.flags, r.explanation)
    # and never where the engines agree: the same SQL on the source's own engine
    same = score(sources, settings, source, source, gold, pred)
    assert same.passed and flag not in same.flags, (same.verdict, same.flags)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_empty_aggregate(sources, settings, dialect):
    """SUM over no rows: NULL on every source; ClickHouse's 0 fails with ``empty_aggregate`` (and
    its own ``SETTINGS aggregate_functions_null_for_empty = 1`` passes); everywhere else the
    prediction passes without the flag."""
    gold = "SELECT sum(score) AS s FROM t WHERE age > 100"
    r = score(sources, settings, "sqlite", dialect, gold, gold)
    if SEMANTICS[dialect].empty_sum_null:
        assert r.passed and "empty_aggregate" not in r.flags, (r.verdict, r.reason, r.flags, r.explanation)
    else:
        assert (r.verdict, r.reason) == ("fail", "values") and "empty_aggregate" in r.flags, r.explanation
        fixed = score(sources, settings, "sqlite", dialect, gold,
                      gold + " SETTINGS aggregate_functions_null_for_empty = 1")
        assert fixed.passed and "empty_aggregate" not in fixed.flags, (fixed.verdict, fixed.explanation)
        wrong = score(sources, settings, "sqlite", dialect, gold, "SELECT 5 AS s")  # not an empty-input 0
        assert wrong.verdict == "fail" and "empty_aggregate" not in wrong.flags


@pytest.mark.parametrize("dialect", DIALECTS)
def test_null_order_per_direction(sources, settings, dialect):
    """``ORDER BY rnk DESC`` on a SQLite gold (NULLs last): flagged exactly on the dialects whose
    DESC default puts NULLs first (PostgreSQL, Snowflake); DuckDB and ClickHouse, NULLS LAST in
    both directions, agree with SQLite here although they disagree under ASC."""
    gold = "SELECT id, rnk FROM t ORDER BY rnk DESC"
    r = score(sources, settings, "sqlite", dialect, gold, gold)
    assert r.verdict != "unavailable", r.explanation
    if SEMANTICS[dialect].nulls_desc == SEMANTICS["sqlite"].nulls_desc:
        assert r.passed and "null_order" not in r.flags, (r.verdict, r.reason, r.flags, r.explanation)
    else:
        assert r.verdict == "fail" and "null_order" in r.flags, (r.verdict, r.reason, r.flags, r.explanation)


# ----------------------------------------------------------------------------- the rules alone
def test_string_number_flag_from_the_sql_text():
    from polysql_ray.comparison.verdict import Pair, semantic_flags

    def flags(sql, target="bigquery", source="sqlite"):
        return semantic_flags(Pair(sql, sql, source, target, source, target))

    assert "string_number" in flags("SELECT id FROM t WHERE age = '30'")
    assert "string_number" in flags("SELECT id FROM t WHERE age IN ('30', '41')")
    assert "string_number" in flags("SELECT 1 WHERE '5' = 5", target="duckdb")
    assert "string_number" not in flags("SELECT id FROM t WHERE name = 'Ann'")   # no number in sight
    assert "string_number" not in flags("SELECT id FROM t WHERE age = 30")
    assert "string_number" not in flags("SELECT id FROM t WHERE age = '30'", target="sqlite")  # same rules
    assert "string_number" not in flags("SELECT id FROM t WHERE age = '30'", target="snowflake",
                                        source="duckdb")  # DuckDB and Snowflake both cast


def test_empty_aggregate_needs_an_aggregate_and_a_zero():
    import pyarrow as pa

    from polysql_ray.comparison import ComparisonPolicy, analyze_gold
    from polysql_ray.comparison.verdict import Pair, decide
    from polysql_ray.engines.base import ExecStatus, ExecutionResult
    from polysql_ray.generation.base import GenStatus

    def verdict(gold_sql, gold, pred, target="clickhouse"):
        ok = lambda t: ExecutionResult(ExecStatus.OK, t)  # noqa: E731
        return decide(GenStatus.OK, ok(gold), None, ok(pred), analyze_gold(gold_sql, "sqlite"), ComparisonPolicy(),
                      pair=Pair(gold_sql, gold_sql, "sqlite", "clickhouse", "sqlite", target))

    agg = "SELECT g, sum(x) FROM t GROUP BY g"
    gold = pa.table({"g": [1, 2], "s": pa.array([None, 5], pa.int64())})
    zero = pa.table({"g": [1, 2], "s": pa.array([0, 5], pa.int64())})
    assert "empty_aggregate" in verdict(agg, gold, zero).flags
    assert "empty_aggregate" not in verdict(agg, gold, zero, target="duckdb").flags  # both NULL engines
    assert "empty_aggregate" not in verdict("SELECT g, x FROM t", gold, zero).flags  # no aggregate
    assert "empty_aggregate" not in verdict(agg, gold, pa.table({"g": [1, 2], "s": [3, 5]})).flags  # not a 0
    nan = pa.table({"g": [1, 2], "s": pa.array([float("nan"), 5.0])})  # ClickHouse avg() of no rows
    assert "empty_aggregate" in verdict("SELECT g, avg(x) FROM t GROUP BY g", gold, nan).flags
