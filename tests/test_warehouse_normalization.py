"""One normalization policy for the warehouse types: the same values from ClickHouse, Snowflake
and BigQuery compare equal to SQLite's and DuckDB's under the default comparison policy.

Each engine returns its own types for the same row: ClickHouse ``Decimal``/``Date32``/
``DateTime64``/``UInt64``/``Nullable``; Snowflake ``NUMBER(p,s)`` (``AVG`` of integers has scale
6), ``TIMESTAMP_TZ``; BigQuery ``NUMERIC``/``BIGNUMERIC``, ``TIMESTAMP`` (UTC) and ``DATETIME``.
The gold row comes from SQLite (numbers, ISO text) and from DuckDB (typed). A row that differs
in one value must *not* match, so each test can fail. Snowflake and BigQuery values come through
their real connectors from the stand-ins (fakesnow, bqemulator), which run DuckDB: the Python
and Arrow types are the connectors' own conversions of the wire types, but the server-side
typing rules (e.g. Snowflake's scale for ``AVG``) are spelled out with casts, not observed.
"""
from __future__ import annotations

import sqlite3

import pyarrow as pa
import pytest

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare
from polysql_ray.engines.base import Limits

LIMITS = Limits(timeout_s=10, row_cap=50)

#: The gold row: an integer count, a scaled number, Snowflake-AVG-like 3.5, a date, a timestamp,
#: a big decimal, NULL.
GOLD_SQLITE = ("SELECT 3 AS n, 1.5 AS d, 3.5 AS a, '2020-01-02' AS day, '2020-01-02 03:04:05' AS ts, "
               "12345678901234567890.5 AS big, NULL AS x")
GOLD_DUCKDB = ("SELECT 3::BIGINT AS n, 1.5::DECIMAL(10,3) AS d, 3.5::DOUBLE AS a, DATE '2020-01-02' AS day, "
               "TIMESTAMP '2020-01-02 03:04:05' AS ts, 12345678901234567890.5::DECIMAL(38,1) AS big, "
               "NULL::INTEGER AS x")

PRED = {
    "clickhouse": "SELECT toUInt64(3) AS n, toDecimal64(1.5, 3) AS d, toDecimal128(3.5, 6) AS a, "
                  "toDate32('2020-01-02') AS day, toDateTime64('2020-01-02 03:04:05', 6, 'UTC') AS ts, "
                  "toDecimal128('12345678901234567890.5', 1) AS big, CAST(NULL AS Nullable(Int64)) AS x",
    "snowflake": "SELECT 3::NUMBER(38,0) AS n, 1.5::NUMBER(10,3) AS d, 3.5::NUMBER(38,6) AS a, "
                 "TO_DATE('2020-01-02') AS day, TO_TIMESTAMP_TZ('2020-01-02 03:04:05 +00:00') AS ts, "
                 "12345678901234567890.5::NUMBER(38,1) AS big, NULL::NUMBER AS x",
    "bigquery": "SELECT 3 AS n, CAST('1.5' AS NUMERIC) AS d, CAST('3.5' AS BIGNUMERIC) AS a, DATE '2020-01-02' AS day, "
                "TIMESTAMP '2020-01-02 03:04:05+00' AS ts, CAST('12345678901234567890.5' AS BIGNUMERIC) AS big, "
                "CAST(NULL AS INT64) AS x",
}


def gold_tables() -> dict[str, pa.Table]:
    import duckdb

    con = sqlite3.connect(":memory:")
    cur = con.execute(GOLD_SQLITE)
    row = cur.fetchone()
    sqlite_t = pa.table({d[0]: pa.array([v]) for d, v in zip(cur.description, row)})
    return {"sqlite": sqlite_t, "duckdb": duckdb.connect().sql(GOLD_DUCKDB).to_arrow_reader(100).read_all()}


def check(engine, location: str, name: str) -> pa.Table:
    r = engine.execute(location, PRED[name], LIMITS)
    assert r.ok, r.error
    for source, gold in gold_tables().items():
        res = compare(gold, r.table, analyze_gold(GOLD_SQLITE, "sqlite"), ComparisonPolicy())
        assert res.match, (source, res, r.table.schema)
    wrong = engine.execute(location, PRED[name].replace("2020-01-02 03:04:05", "2020-01-02 03:04:06"), LIMITS)
    assert wrong.ok and not compare(gold_tables()["duckdb"], wrong.table, analyze_gold(GOLD_SQLITE, "sqlite"),
                                    ComparisonPolicy()).match
    return r.table


def test_clickhouse_types(tmp_path):
    pytest.importorskip("chdb")
    from polysql_ray.engines.registry import make_engine
    from polysql_ray.replication import replicate
    from tests.test_replication import make_source

    rep = replicate(make_source(tmp_path / "syn.sqlite"), "clickhouse", tmp_path / "r")
    e = make_engine("clickhouse")
    try:
        t = check(e, rep.location, "clickhouse")
        assert t.schema.types[0] == pa.uint64() and pa.types.is_decimal(t.schema.types[1])
        assert pa.types.is_date32(t.schema.types[3]) and t.schema.types[4].tz == "UTC"
    finally:
        e.close()


def test_snowflake_types(tmp_path):
    pytest.importorskip("snowflake.connector")
    from tests.warehouse_targets import warehouse

    with warehouse("snowflake", tmp_path) as t:
        table = check(t.engine, t.replica.location, "snowflake")
        assert pa.types.is_decimal(table.schema.types[1]) and table.schema.types[4].tz is not None


def test_bigquery_types(tmp_path):
    pytest.importorskip("google.cloud.bigquery")
    from tests.warehouse_targets import warehouse

    with warehouse("bigquery", tmp_path) as t:
        table = check(t.engine, t.replica.location, "bigquery")
        assert pa.types.is_decimal(table.schema.types[1]) and table.schema.types[4].tz is not None
