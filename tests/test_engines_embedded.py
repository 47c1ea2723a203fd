"""Embedded engines (SQLite, DuckDB): sandbox, typed statuses, row cap, result types.

Every test runs the real engine on a small database built in ``tmp_path`` (the DuckDB one is
made by the replication stage from the SQLite one), and checks the database file is
byte-identical afterwards where a statement tried to change something.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import ExecStatus, Limits, make_engine
from polysql_ray.engines.guard import check_statement
from polysql_ray.replication import replicate

RUNAWAY = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"


def sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def dbs(tmp_path_factory):
    """{'sqlite': path, 'duckdb': path} holding table t(id, name, score) with 50 rows."""
    d = tmp_path_factory.mktemp("engines")
    src = d / "toy.sqlite"
    con = sqlite3.connect(src)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, score REAL)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)",
                    [(i, f"n{i}", i * 0.1) for i in range(50)])
    con.execute('CREATE TABLE "Mixed Case" ("Val" NUMERIC)')
    con.executemany('INSERT INTO "Mixed Case" VALUES (?)', [(1,), ("x",), (2.5,), (None,)])
    con.commit()
    con.close()
    rep = replicate(SourceDatabase("toy", "toy", "sqlite", str(src)), "duckdb", d / "replicas")
    return {"sqlite": str(src), "duckdb": rep.location}


@pytest.fixture(scope="module", params=["sqlite", "duckdb"])
def engine(request, dbs):
    e = make_engine(request.param)
    yield e, dbs[request.param]
    e.close()


LIMITS = Limits(timeout_s=1.0, row_cap=20)

HOSTILE = {
    "delete": "DELETE FROM t",
    "multi": "SELECT 1; DELETE FROM t",
    "multi_trailing_semicolon": "SELECT 1; DELETE FROM t;",
    "attach": "ATTACH DATABASE '/tmp/polysql_evil.db' AS evil",
    "copy": "COPY t TO '/tmp/polysql_evil.csv'",
    "drop": "DROP TABLE t",
    "update_cte": "WITH x AS (SELECT 1) UPDATE t SET name = 'z'",
}
FILE_READS = {
    "sqlite": ["SELECT load_extension('/tmp/nothing')", "SELECT * FROM pragma_table_info('t')"],
    "duckdb": ["SELECT * FROM read_text('/etc/passwd')", "SELECT * FROM read_csv('/etc/passwd')"],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_statement_rejected_and_file_unchanged(engine, kind):
    e, loc = engine
    before = sha(loc)
    r = e.execute(loc, HOSTILE[kind], LIMITS)
    assert r.status in (ExecStatus.REJECTED, ExecStatus.SYNTAX), (kind, r)
    if kind != "update_cte":
        assert r.status is ExecStatus.REJECTED, r
    assert r.table is None and r.error
    assert sha(loc) == before
    assert not os.path.exists("/tmp/polysql_evil.csv")
    assert e.execute(loc, "SELECT count(*) AS n FROM t", LIMITS).table.column(0).to_pylist() == [50]


def test_file_reads_refused(engine):
    e, loc = engine
    for sql in FILE_READS[e.name]:
        r = e.execute(loc, sql, LIMITS)
        assert r.status is ExecStatus.REJECTED, (sql, r)
        assert "root:" not in (r.error or "")


def test_runaway_query_is_interrupted(engine):
    e, loc = engine
    before = sha(loc)
    r = e.execute(loc, RUNAWAY, Limits(timeout_s=0.5, row_cap=10))
    assert r.status is ExecStatus.TIMEOUT, r
    assert sha(loc) == before
    # the connection is usable after the interrupt
    assert e.execute(loc, "SELECT 42", LIMITS).table.column(0).to_pylist() == [42]


@pytest.mark.parametrize("sql,status", [
    ("SELEC id FROM t", ExecStatus.SYNTAX),
    ("SELECT id FROM t WHERE", ExecStatus.SYNTAX),
    ("SELECT 'abc FROM t", ExecStatus.SYNTAX),
    ("SELECT nope FROM t", ExecStatus.SCHEMA),
    ("SELECT * FROM nope", ExecStatus.SCHEMA),
    # an unknown function is the dialect lacking it, not schema linking
    ("SELECT no_such_fn(id) FROM t", ExecStatus.SYNTAX),
    ("", ExecStatus.EMPTY),
    (" ;; ", ExecStatus.EMPTY),
])
def test_error_typing(engine, sql, status):
    e, loc = engine
    r = e.execute(loc, sql, LIMITS)
    assert r.status is status, r


def test_runtime_error(engine):
    e, loc = engine
    sql = {"sqlite": "SELECT abs(-9223372036854775807 - 1)",
           "duckdb": "SELECT CAST(name AS INTEGER) FROM t"}[e.name]
    assert e.execute(loc, sql, LIMITS).status is ExecStatus.RUNTIME


def test_row_cap(engine):
    e, loc = engine
    assert e.execute(loc, "SELECT * FROM t", LIMITS).status is ExecStatus.TOO_LARGE
    r = e.execute(loc, "SELECT id FROM t ORDER BY id LIMIT 20;", LIMITS)
    assert r.ok and r.table.num_rows == 20


def test_missing_database_unavailable(engine, tmp_path):
    e, _ = engine
    r = e.execute(str(tmp_path / "absent.db"), "SELECT 1", LIMITS)
    assert r.status is ExecStatus.UNAVAILABLE


def test_result_values_and_duplicate_names(engine):
    e, loc = engine
    r = e.execute(loc, "SELECT id, id, score FROM t WHERE id = 3", LIMITS)
    assert r.ok
    assert r.table.column_names == ["id", "id", "score"]
    assert r.table.schema.field(2).type == pa.float64()
    assert [c.to_pylist() for c in r.table.columns] == [[3], [3], [0.30000000000000004]]


def test_sqlite_mixed_column_is_union():
    from polysql_ray.engines.sqlite import rows_to_table

    t = rows_to_table(["a", "b", "c"], [(1, 1, None), ("x", 2.5, None), (None, None, None)])
    assert pa.types.is_union(t.schema.field("a").type)
    assert t.column("a").to_pylist() == [1, "x", None]
    assert t.schema.field("a").metadata == {b"polysql.sqlite_mixed": b"1"}
    assert t.schema.field("b").type == pa.float64() and t.column("b").to_pylist() == [1.0, 2.5, None]
    assert t.schema.field("c").type == pa.null()


def test_sqlite_engine_on_mixed_table(dbs):
    e = make_engine("sqlite")
    r = e.execute(dbs["sqlite"], 'SELECT "Val" FROM "Mixed Case"', LIMITS)
    assert r.ok and r.table.column(0).to_pylist() == [1, "x", 2.5, None]
    e.close()


@pytest.mark.parametrize("sql,action", [
    ("select 1;", "pass"), ("WITH a AS (SELECT 1) SELECT * FROM a;;", "pass"),
    ("(SELECT 1) UNION SELECT 2", "pass"), ("SELECT 'a;b'", "pass"),
    ("SELECT 1; SELECT 2", "reject"), ("PRAGMA writable_schema=1", "reject"),
    ("INSERT INTO t VALUES (1)", "reject"), ("SELECT 'unterminated", "defer"),
    ("selec 1", "defer"), ("-- only a comment\n;", "empty"),
])
def test_guard(sql, action):
    assert check_statement(sql, "sqlite").action == action


def test_guard_duckdb_from_first():
    assert check_statement("FROM t SELECT id", "duckdb").action == "pass"
    assert check_statement("FROM t SELECT id", "sqlite").action == "reject"


def test_registry():
    from polysql_ray.engines.registry import default_dialect, engine_for_dialect

    assert engine_for_dialect("duckdb") == "duckdb" and default_dialect("sqlite") == "sqlite"
    assert make_engine("duckdb", threads=2).threads == 2
    with pytest.raises(KeyError, match="known"):
        make_engine("oracle")
    with pytest.raises(KeyError, match="known"):
        engine_for_dialect("tsql")


def test_duckdb_binder_errors_are_typed_by_cause(tmp_path):
    """DuckDB reports unknown columns, GROUP BY strictness and type rules all as binder errors;
    only the first is schema linking."""
    import duckdb as _duckdb

    from polysql_ray.engines.duckdb import DuckDBEngine

    path = tmp_path / "b.duckdb"
    con = _duckdb.connect(str(path))
    con.execute("CREATE TABLE t (id BIGINT, name VARCHAR)")
    con.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    con.close()
    e = DuckDBEngine()
    cases = {
        "SELECT nope FROM t": ExecStatus.SCHEMA,
        "SELECT name, count(*) FROM t GROUP BY id": ExecStatus.SYNTAX,
        "SELECT strftime_nope(name) FROM t": ExecStatus.SYNTAX,
        "SELECT * FROM t WHERE name > 3": ExecStatus.RUNTIME,
    }
    got = {sql: e.execute(str(path), sql, LIMITS).status for sql in cases}
    e.close()
    assert got == cases


def test_one_huge_value_is_too_large(tmp_path):
    """A single enormous value (repeat('x', 1e7)) is as bad as too many rows: limits.max_bytes
    turns it into too_large before it travels to scoring (found by a hostile-user run)."""
    from polysql_ray.engines.duckdb import DuckDBEngine

    path = tmp_path / "h.duckdb"
    import duckdb as _duckdb

    _duckdb.connect(str(path)).close()
    e = DuckDBEngine()
    lim = Limits(timeout_s=10, row_cap=10, max_bytes=1_000_000)
    big = lim.enforce(e.execute(str(path), "SELECT repeat('x', 10000000) AS s", lim))
    small = lim.enforce(e.execute(str(path), "SELECT repeat('x', 1000) AS s", lim))
    e.close()
    assert big.status is ExecStatus.TOO_LARGE and "max_bytes" in big.error
    assert small.status is ExecStatus.OK
    assert Limits(timeout_s=2).fingerprint() != Limits().fingerprint()


def test_duckdb_spills_only_into_its_capped_private_temp_folder(tmp_path):
    """A query that must spill fails when the private temp folder reaches its cap, instead of
    filling the disk; the engine's settings are locked so the query cannot lift the cap."""
    import duckdb as _duckdb

    from polysql_ray.engines.base import ExecStatus, Limits
    from polysql_ray.engines.duckdb import DuckDBEngine

    db = tmp_path / "x.duckdb"
    _duckdb.connect(str(db)).close()
    eng = DuckDBEngine(memory_limit="64MB", max_temp_size="16MB")
    lim = Limits(timeout_s=60)
    # read on the engine's own connection: a prediction may not see the host path (refused)
    size, folder = eng.open(str(db), lim).execute("SELECT current_setting('max_temp_directory_size'), "
                                                  "current_setting('temp_directory')").fetchall()[0]
    assert folder == eng._temp_dir and size
    assert eng.execute(str(db), "SELECT current_setting('temp_directory')", lim).status is ExecStatus.REJECTED
    res = eng.execute(str(db), "SELECT count(*) FROM (SELECT range r, md5(range::VARCHAR) m FROM "
                               "range(20000000) ORDER BY m) t", lim)
    # past the memory limit and the temp cap: the statement's too_large (a limit, like the row cap)
    assert res.status is ExecStatus.TOO_LARGE and "max_temp_directory_size" in res.error
    assert eng.execute(str(db), "SET max_temp_directory_size = '100GB'", lim).status is ExecStatus.REJECTED
    eng.close()
    assert not Path(eng._temp_dir).exists()


def test_duckdb_path_probe_runs_once_per_installed_duckdb(tmp_path):
    """The host-path probe (a child DuckDB process, seconds of CPU) is answered from the cache
    by every later process: the second process finds the same names with its subprocesses made
    to fail, so only the cache can answer."""
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    root = str(Path(__file__).resolve().parents[1])
    probe = ("import sys; sys.path.insert(0, sys.argv[1])\n{setup}from polysql_ray.engines import guard\n"
             "print(sorted(guard.duckdb_path_functions()))")
    no_subprocess = ("import subprocess as sp\ndef run(*a, **k):\n    print('PROBED')\n    raise OSError('no probe')\n"
                     "sp.run = run\n")
    first = subprocess.run([sys.executable, "-c", probe.format(setup=""), root], env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "duckdb_databases" in first.stdout and "current_setting" in first.stdout
    [cache] = list((tmp_path / "polysql_ray").glob("duckdb-paths-*.json"))
    assert "duckdb_databases" in cache.read_text()
    second = subprocess.run([sys.executable, "-c", probe.format(setup=no_subprocess), root], env=env,
                            capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout and "PROBED" not in second.stdout
    # without the cache the same process probes (so the check above can fail)
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty")
    third = subprocess.run([sys.executable, "-c", probe.format(setup=no_subprocess), root], env=env,
                           capture_output=True, text=True, timeout=600)
    assert "PROBED" in third.stdout, third.stderr
