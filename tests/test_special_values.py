"""Special engine values survive scoring, and none of them passes a question it should not.

Evaluation notes section 8: an engine can return values Python's types cannot hold
(``'infinity'::TIMESTAMP``, ``-infinity`` dates, year 0 or 294247, NaN, Decimal(76), 10^60).
Each must become a canonical value without a conversion error; ``inf`` equals only the same-sign
``inf`` (``SELECT 1e999`` never passes a numeric gold); NaN equals NaN only under
``policy.nan_equal``; a scoring task that still raises on one item stores that item typed
(``inconclusive``/``compare_error``) and the rest of its batch; SQL too deep to analyse is
refused with one typed status on every path.

The pipeline test replays hostile predictions on the quickstart benchmark through the real sweep
(SQLite, DuckDB, PostgreSQL, chdb), then re-scores every stored row with ``score_sql``: same
verdict, reason and flags (one decision path).
"""
from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SERVERS, register_server_replication, server_reachable  # noqa: E402

from polysql_ray.comparison import ComparisonPolicy, GoldShape, compare  # noqa: E402
from polysql_ray.comparison.equivalence import score_sql  # noqa: E402
from polysql_ray.comparison.normalize import python_values, temporal_text  # noqa: E402

POLICY = ComparisonPolicy()


def _duck(sql: str) -> pa.Table:
    return duckdb.connect().sql(sql).to_arrow_table()


def _chdb(sql: str) -> pa.Table:
    """``sql`` on chdb through this process's one data path (chdb allows one per process: a
    bare ``chdb.query`` opens ``:memory:`` and fails once an engine has opened the path)."""
    import chdb

    from polysql_ray.engines.clickhouse import arrow_result, connection_string, process_data_path

    con = chdb.connect(connection_string(process_data_path(), {"readonly": 1}))
    try:
        return arrow_result(con.query(sql, "Arrow").bytes())
    finally:
        con.close()


# ----------------------------------------------------------------------------- canonical values
@pytest.mark.parametrize("sql,text", [
    ("SELECT 'infinity'::TIMESTAMP", "infinity"),
    ("SELECT '-infinity'::TIMESTAMP", "-infinity"),
    ("SELECT 'infinity'::DATE", "infinity"),
    ("SELECT '-infinity'::DATE", "-infinity"),
    ("SELECT 'infinity'::TIMESTAMPTZ", "infinity"),
    ("SELECT 'infinity'::TIMESTAMP_NS", "infinity"),
    ("SELECT 'infinity'::TIMESTAMP_S", "infinity"),
    ("SELECT '294247-01-10'::DATE", "294247-01-10"),
    ("SELECT '10000-01-01 12:30:00.5'::TIMESTAMP", "10000-01-01 12:30:00.5"),
    ("SELECT '0000-12-31'::DATE", "0000-12-31"),
    ("SELECT '-4713-01-01'::DATE", "-4713-01-01"),
    ("SELECT '2299-12-31 10:00:00+02'::TIMESTAMPTZ", "2299-12-31 08:00:00"),
])
def test_duckdb_special_dates_become_canonical_text_without_python_objects(sql, text):
    col = _duck(sql).column(0).combine_chunks()
    assert temporal_text(col).to_pylist() == [text]
    assert [str(v) if not isinstance(v, str) else v for v in python_values(col)][0].startswith(text[:4])
    # the same value compares equal to itself and to its ISO text, and never raises
    assert compare(_duck(sql), _duck(sql), GoldShape(), POLICY).match
    assert compare(pa.table({"a": [text]}), _duck(sql), GoldShape(), POLICY).match
    r = compare(_duck("SELECT 7::BIGINT"), _duck(sql), GoldShape(), POLICY)
    assert (r.match, r.reason) == (False, "values") and r.diff.extra_sample  # the diff sample is built


def test_temporal_column_mixing_special_and_ordinary_values_keeps_row_positions():
    sql = ("SELECT d FROM (VALUES ('2020-01-02'::DATE, 1), ('infinity'::DATE, 2), (NULL, 3), "
           "('10000-03-01'::DATE, 4), ('-infinity'::DATE, 5)) t(d, i) ORDER BY i")
    col = _duck(sql).column(0).combine_chunks()
    assert temporal_text(col).to_pylist() == ["2020-01-02", "infinity", None, "10000-03-01", "-infinity"]


def test_clickhouse_datetime64_past_2262_and_decimal256_compare_exactly():
    t = _chdb("SELECT toDateTime64('2299-12-31', 3) AS a")
    assert temporal_text(t.column(0).combine_chunks()).to_pylist() == ["2299-12-31 00:00:00"]
    assert compare(pa.table({"a": ["2299-12-31 00:00:00"]}), t, GoldShape(), POLICY).match
    big = _chdb("SELECT toDecimal256('1e60', 0) AS a")
    assert big.column(0).type == pa.decimal256(76, 0)
    assert compare(big, _chdb("SELECT toDecimal256('1e60', 0) + 0 AS a"), GoldShape(), POLICY).match
    r = compare(big, _chdb("SELECT toDecimal256('1e60', 0) + 1 AS a"), GoldShape(), POLICY)
    assert (r.match, r.reason) == (False, "values")  # 10^60 + 1 is exact, not a float
    assert compare(_chdb("SELECT toDecimal256('1.5', 40) AS a"), _duck("SELECT 1.5::DOUBLE"), GoldShape(),
                   POLICY).match


def test_postgres_infinity_and_year_10000_are_fetched_as_values():
    if not server_reachable(*SERVERS["postgres"][:2]):
        pytest.skip("PostgreSQL unreachable")
    from polysql_ray.engines.base import Limits
    from polysql_ray.engines.postgres import PostgresEngine

    eng = PostgresEngine({"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": "postgres"})
    try:
        r = eng.execute("postgres/public", "SELECT d FROM (VALUES ('infinity'::date, 1), ('2020-01-02'::date, 2), "
                        "('10000-01-01'::date, 3), ('-infinity'::timestamp::date, 4)) t(d, i) ORDER BY i", Limits())
        assert r.ok, r.error
        assert r.table.column(0).to_pylist() == ["infinity", "2020-01-02", "10000-01-01", "-infinity"]
        ts = eng.execute("postgres/public", "SELECT 'infinity'::timestamptz AS a, '-infinity'::timestamp AS b",
                         Limits())
        assert ts.ok and ts.table.to_pylist() == [{"a": "infinity", "b": "-infinity"}]
        # DuckDB's and PostgreSQL's infinity are the same canonical value
        assert compare(_duck("SELECT 'infinity'::DATE"), r.table.slice(0, 1), GoldShape(), POLICY).match
    finally:
        eng.close()


# ----------------------------------------------------------------------------- inf and NaN
def test_infinity_is_never_within_the_tolerance_of_a_number():
    shape = GoldShape()
    for gold in ("SELECT 5::BIGINT", "SELECT 5.5::DOUBLE", "SELECT 1e308::DOUBLE", "SELECT 0::DOUBLE"):
        for pred in ("SELECT 1e999", "SELECT '-inf'::DOUBLE", "SELECT 'nan'::DOUBLE"):
            r = compare(_duck(gold), _duck(pred), shape, POLICY)
            assert (r.match, r.reason) == (False, "values"), (gold, pred)
    assert compare(_duck("SELECT 'inf'::DOUBLE"), _duck("SELECT 1e999"), shape, POLICY).match
    assert not compare(_duck("SELECT 'inf'::DOUBLE"), _duck("SELECT -1e999"), shape, POLICY).match
    assert not compare(_duck("SELECT NULL::DOUBLE"), _duck("SELECT 'nan'::DOUBLE"), shape, POLICY).match
    # several float columns (bipartite matching) and a tolerance-matched multiset
    g = _duck("SELECT * FROM (VALUES (1.0::DOUBLE, 2.0::DOUBLE), (3.0, 'inf')) t(a, b)")
    assert compare(g, _duck("SELECT * FROM (VALUES (3.0::DOUBLE, 'inf'::DOUBLE), (1.0000001, 2.0)) t(a, b)"),
                   shape, POLICY).match
    assert not compare(g, _duck("SELECT * FROM (VALUES (3.0::DOUBLE, 4.0::DOUBLE), (1.0, 2.0)) t(a, b)"),
                       shape, POLICY).match


@pytest.mark.parametrize("engine", ["duckdb", "clickhouse", "postgres"])
def test_nan_equals_nan_only_when_the_policy_says_so(engine):
    if engine == "duckdb":
        table = _duck("SELECT x AS a FROM (VALUES ('nan'::DOUBLE), (1.5::DOUBLE)) t(x)")
    elif engine == "clickhouse":
        table = _chdb("SELECT arrayJoin([nan, 1.5]) AS a")
    else:
        if not server_reachable(*SERVERS["postgres"][:2]):
            pytest.skip("PostgreSQL unreachable")
        from polysql_ray.engines.base import Limits
        from polysql_ray.engines.postgres import PostgresEngine

        eng = PostgresEngine({"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": "postgres"})
        try:
            r = eng.execute("postgres/public", "SELECT x AS a FROM (VALUES ('NaN'::float8), (1.5::float8)) t(x)",
                            Limits())
        finally:
            eng.close()
        assert r.ok, r.error
        table = r.table
    other = _duck("SELECT x AS a FROM (VALUES (1.5::DOUBLE), ('nan'::DOUBLE)) t(x)")
    assert compare(other, table, GoldShape(), ComparisonPolicy()).match  # default: nan_equal
    r = compare(other, table, GoldShape(), ComparisonPolicy(nan_equal=False))
    assert (r.match, r.reason, r.diff.missing_rows, r.diff.extra_rows) == (False, "values", 1, 1)
    # the identical-result fast path never lets a NaN through against the policy
    assert not compare(table, table, GoldShape(), ComparisonPolicy(nan_equal=False)).match
    # NaN never equals a number or NULL
    assert not compare(_duck("SELECT x AS a FROM (VALUES (1.5::DOUBLE), (2.0::DOUBLE)) t(x)"), table,
                       GoldShape(), ComparisonPolicy()).match
    assert not compare(_duck("SELECT x AS a FROM (VALUES (1.5::DOUBLE), (NULL::DOUBLE)) t(x)"), table,
                       GoldShape(), ComparisonPolicy()).match


def test_nan_equal_is_a_named_policy_field_with_a_documented_default():
    assert ComparisonPolicy().nan_equal is True
    assert ComparisonPolicy().fingerprint() != ComparisonPolicy(nan_equal=False).fingerprint()
    assert ComparisonPolicy.from_config({"nan_equal": False}).nan_equal is False
    with pytest.raises(ValueError, match="nan_equal must be a boolean"):
        ComparisonPolicy(nan_equal="no")


@pytest.fixture(scope="module")
def numbers_db(tmp_path_factory):
    d = tmp_path_factory.mktemp("numbers")
    path = d / "numbers.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x REAL)")
    con.executemany("INSERT INTO t VALUES (?, ?)", [(1, 5.0), (2, 1.25)])
    con.commit()
    con.close()
    return path, d / "replicas"


#: A positive infinity on each engine that can produce one (MariaDB cannot: it refuses an
#: out-of-range DOUBLE, a typed failure).
INFINITY = {"sqlite": "SELECT 1e999", "duckdb": "SELECT 1e999", "postgres": "SELECT 'Infinity'::float8",
            "clickhouse": "SELECT inf", "mysql": "SELECT 1e308 * 10"}


@pytest.mark.parametrize("dialect", list(INFINITY))
def test_select_infinity_never_passes_a_numeric_gold_on_any_engine(numbers_db, dialect):
    if dialect in ("postgres", "mysql"):
        if not server_reachable(*SERVERS[dialect][:2]):
            pytest.skip(f"{dialect} unreachable")
        register_server_replication()
    path, replicas = numbers_db
    kw = dict(database=str(path), dialect=dialect, replicas_dir=str(replicas), dataset="special_values")
    for gold in ("SELECT count(*) FROM t", "SELECT sum(x) FROM t", "SELECT max(x) FROM t"):
        r = score_sql(gold, INFINITY[dialect], **kw)
        assert r.verdict == "fail", (dialect, gold, r.verdict, r.explanation)
        assert r.reason == "values" or r.reason.startswith("pred_"), r.reason
    if dialect != "mysql":  # the gold's own infinity (SQLite: 1e999 is +inf) is matched, -inf is not
        assert score_sql("SELECT 1e999", INFINITY[dialect], **kw).passed
        assert not score_sql("SELECT -1e999", INFINITY[dialect], **kw).passed


# ----------------------------------------------------------------------------- one item, typed
def test_an_item_whose_comparison_raises_is_typed_and_its_batch_is_stored(ray_session):
    import ray

    from polysql_ray.engines.base import ExecStatus, ExecutionResult
    from polysql_ray.pipeline.actors import score_batch

    refs = [ray.put(ExecutionResult(ExecStatus.OK, pa.table({"a": [1]}))),
            ray.put(ExecutionResult(ExecStatus.OK, pa.table({"a": [2]})))]
    base = dict(cell_key="c", run_id="r", model="m", generator="g", generator_fingerprint="f", dataset="d",
                dialect="sqlite", source_engine="sqlite", target_engine="sqlite", instruction_level="-",
                question_id="q", db_id="db", gold_sql="SELECT 1", pred_sql="SELECT 1", gen_status="ok",
                _gold=0, _probe=None, _pred=0, _ties_probe=None, _gen_status="ok", _gold_error=None,
                _gold_dialect="sqlite", _structural="", _flags=())
    good = dict(base, key="good", _shape=GoldShape())
    # an ORDER BY key beyond the result's columns: compare() raises IndexError inside decide()
    bad_compare = dict(base, key="bad_compare", _pred=1, _shape=GoldShape(ordered=True, order_keys=(5,)))
    # a generation status nobody knows: decide() itself raises before comparing
    bad_item = dict(base, key="bad_item", _shape=GoldShape(), _gen_status="no-such-status")
    table = ray.get(score_batch.remote([good, bad_compare, bad_item], refs, POLICY))
    rows = {r["key"]: r for r in table.to_pylist()}
    assert rows["good"]["verdict"] == "pass"
    for key in ("bad_compare", "bad_item"):
        assert (rows[key]["verdict"], rows[key]["reason"], rows[key]["correct"]) == \
            ("inconclusive", "compare_error", False), rows[key]
    assert rows["bad_compare"]["pred_error"].startswith("IndexError")
    assert rows["bad_item"]["pred_error"].startswith("ValueError")


# ----------------------------------------------------------------------------- over-deep SQL
def test_over_deep_sql_is_refused_with_a_typed_status_not_a_recursion_error(numbers_db):
    path, replicas = numbers_db
    deep = "SELECT " + "(" * 3000 + "1" + ")" * 3000
    chain = "SELECT " + " + ".join(["x"] * 3000) + " FROM t"
    for dialect in ("sqlite", "duckdb"):
        kw = dict(database=str(path), dialect=dialect, replicas_dir=str(replicas), dataset="special_values")
        r = score_sql("SELECT count(*) FROM t", deep, **kw)
        assert (r.verdict, r.reason) == ("fail", "pred_rejected") and "nested 3000 levels" in r.explanation
        r = score_sql(deep, "SELECT 1", **kw)
        assert (r.verdict, r.reason) == ("gold_error", "gold_rejected")
        r = score_sql("SELECT count(*) FROM t", chain, **kw)  # no recursion error: the engine decides
        assert r.verdict == "fail" and r.reason in ("values", "pred_runtime", "pred_syntax"), (dialect, r.explanation)


# ----------------------------------------------------------------------------- the real sweep
#: question -> hostile prediction; the quickstart gold of each is one number or one short list.
HOSTILE = {
    "shop_01": "SELECT 1e999",                                  # count(*): +inf on SQLite/DuckDB
    "shop_17": "SELECT 'infinity'::TIMESTAMP",                  # DuckDB/PostgreSQL infinity
    "shop_10": "SELECT 'infinity'::date",                       # PostgreSQL fetched it as text
    "school_10": "SELECT toDateTime64('2299-12-31', 3)",        # ClickHouse past the ns range
    "school_05": "SELECT inf",                                  # ClickHouse +inf vs avg()
    "school_14": "SELECT 'NaN'::float8",                        # NaN vs a percentage
    "shop_12": "SELECT '-infinity'::TIMESTAMP, '294247-01-10'::DATE, 10::HUGEINT ^ 60",
    "school_02": "SELECT toDecimal256('1e60', 0)",              # Decimal(76) on ClickHouse
    "shop_04": "SELECT " + "(" * 3000 + "1" + ")" * 3000,       # over-deep
    "shop_03": "SELECT name FROM customers WHERE email IS NULL",  # a right answer: still passes
}
DIALECTS = ["sqlite", "duckdb", "postgres", "clickhouse"]


@pytest.mark.slow
def test_hostile_values_sweep_finishes_with_every_item_typed(ray_session, tmp_path):
    from polysql_ray.config import compose
    from polysql_ray.datasets.registry import dataset_sources
    from polysql_ray.engines.base import Limits
    from polysql_ray.pipeline.driver import run
    from polysql_ray.store.schema import VERDICTS

    if not server_reachable(*SERVERS["postgres"][:2]):
        pytest.skip("PostgreSQL unreachable")
    register_server_replication()
    preds = tmp_path / "hostile.jsonl"
    preds.write_text("".join(json.dumps({"question_id": q, "pred_sql": s}) + "\n" for q, s in HOSTILE.items()))
    out = tmp_path / "r"
    cfg, loader, text = compose(["model=replay", "model.name=hostile", f"model.predictions={preds}",
                                 "model.allow_partial=true", f"dialects=[{','.join(DIALECTS)}]",
                                 f"results_dir={out}", "progress=false"])
    stats, _ = run(cfg, loader, text)
    assert stats.items_scored == stats.items_total == 34 * len(DIALECTS)
    rows = duckdb.connect().sql(f"SELECT * FROM read_parquet('{out}/scores/**/*.parquet')").to_arrow_table().to_pylist()
    assert len(rows) == 34 * len(DIALECTS) and len({r["key"] for r in rows}) == len(rows)
    got = {(r["dialect"], r["question_id"]): r for r in rows}
    for r in rows:
        assert r["verdict"] in VERDICTS and r["reason"], r
    hostile = {k: r for k, r in got.items() if k[1] in HOSTILE and k[1] != "shop_03"}
    assert all(r["verdict"] == "fail" for r in hostile.values()), \
        [(k, r["verdict"], r["reason"]) for k, r in hostile.items() if r["verdict"] != "fail"]
    # the values that crashed the scoring task or passed before: now ordinary, failing values
    expect = {("duckdb", "shop_17"): "values", ("postgres", "shop_17"): "values",
              ("duckdb", "shop_10"): "row_count", ("postgres", "shop_10"): "row_count",
              ("clickhouse", "school_10"): "row_count", ("clickhouse", "school_05"): "values",
              ("sqlite", "shop_01"): "values", ("duckdb", "shop_01"): "values",
              ("duckdb", "school_14"): "values", ("postgres", "school_14"): "values",
              ("clickhouse", "school_02"): "values"}
    for key, reason in expect.items():
        assert (got[key]["pred_status"], got[key]["reason"]) == ("ok", reason), (key, got[key]["reason"],
                                                                                 got[key]["pred_error"])
    assert all(got[(d, "shop_04")]["reason"] == "pred_rejected" for d in DIALECTS)
    assert all(got[(d, "shop_03")]["verdict"] == "pass" for d in DIALECTS)
    # one decision path: score_sql gives every hostile row the verdict the sweep stored
    policy, limits = ComparisonPolicy.from_config(cfg["policy"]), Limits(**cfg["limits"])
    sources = {s.db_id: s for s in dataset_sources(cfg["dataset"])}
    for (dialect, q), r in sorted(got.items()):
        if q not in HOSTILE:
            continue
        src = sources[r["db_id"]]
        one = score_sql(r["gold_sql"], r["pred_sql"], database=src.location, engine=src.engine, dialect=dialect,
                        replicas_dir=cfg["replication"]["dir"], dataset=r["dataset"], policy=policy, limits=limits)
        assert (one.verdict, one.reason, tuple(one.flags)) == \
            (r["verdict"], r["reason"], tuple(f for f in r["flags"].split(",") if f)), (dialect, q)
