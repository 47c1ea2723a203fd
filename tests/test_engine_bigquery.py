"""BigQuery engine and writer against bqemulator (a loopback REST server; DuckDB underneath).

What this proves: the client path (ADC or anonymous-with-endpoint, dry run before execution,
default dataset, maximum_bytes_billed and job timeout sent, Arrow results over REST, typed
errors), the writer (dataset per (dataset, db_id), Parquet load from Arrow), certificate and
reuse, and the client-side refusals. What it cannot prove (bqemulator is liberal): GoogleSQL
strictness, server-side job timeouts and byte limits (its dry run reports 0 bytes), IAM
read-only; it runs DuckDB functions and reads local files, which the engine refuses first.
"""
from __future__ import annotations

import pytest

pytest.importorskip("google.cloud.bigquery")

from polysql_ray.engines import bigquery as bq  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402
from polysql_ray.engines.registry import make_engine  # noqa: E402
from polysql_ray.replication import replicate  # noqa: E402

from tests.standins import bqemulator_server  # noqa: E402
from polysql_ray.datasets.example import SourceDatabase  # noqa: E402

def make_source(path):
    """A source with regular identifiers only (bqemulator refuses table ids with spaces, which
    real BigQuery accepts), mixed case, REAL, BLOB, NULLs, keys."""
    import sqlite3

    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE Parent (Id INTEGER PRIMARY KEY, FullName TEXT NOT NULL);
        CREATE TABLE child (cid INT PRIMARY KEY, parentId INTEGER REFERENCES Parent(Id),
                            score REAL, blobby BLOB, note TEXT);
    """)
    con.executemany("INSERT INTO Parent VALUES (?,?)", [(1, "Ann"), (2, "Bob Lee"), (3, "Çé ü")])
    con.executemany("INSERT INTO child VALUES (?,?,?,?,?)", [
        (10, 1, 0.1, b"\x00\x01", "a"), (11, 2, 1e300, None, None), (12, None, 3.0, b"x", "c")])
    con.commit()
    con.close()
    return SourceDatabase("synthetic", "syn", "sqlite", str(path))

LIMITS = Limits(timeout_s=10, row_cap=50)


@pytest.fixture(scope="module")
def settings():
    with bqemulator_server() as (host, port):
        yield {"project": "polysql", "api_endpoint": f"http://{host}:{port}", "anonymous": True}


@pytest.fixture(scope="module")
def replica(settings, tmp_path_factory):
    d = tmp_path_factory.mktemp("bq")
    return replicate(make_source(d / "syn.sqlite"), "bigquery", d / "replicas", settings=settings)


@pytest.fixture(scope="module")
def engine(settings):
    e = make_engine("bigquery", **settings)
    yield e
    e.close()


def test_replica_verified_and_reused(replica, settings, tmp_path):
    assert replica.location.startswith("pq_synthetic_syn_")  # + content tag
    assert replica.manifest.checksums["child"].rows == 3
    again = replicate(make_source(tmp_path / "syn.sqlite"), "bigquery",
                      replica.manifest_path.parents[3], settings=settings)
    assert again.reused


def test_values_and_dry_run(engine, replica):
    r = engine.execute(replica.location, "SELECT cid, score, blobby FROM child ORDER BY cid", LIMITS)
    assert r.ok, r.error
    assert r.table.column(0).to_pylist() == [10, 11, 12]
    assert r.table.column(1).to_pylist() == [0.1, 1e300, 3.0]
    assert r.table.column(2).to_pylist() == [b"\x00\x01", None, b"x"]
    assert engine.last_dry_run_bytes is not None  # a dry run ran first


def test_byte_limit_refused_by_dry_run(settings, replica, monkeypatch):
    e = make_engine("bigquery", **{**settings, "maximum_bytes_billed": 0})
    import google.cloud.bigquery.job as job

    monkeypatch.setattr(job.QueryJob, "total_bytes_processed", property(lambda self: 10 ** 12))
    r = e.execute(replica.location, "SELECT * FROM child", LIMITS)
    assert r.status is S.TOO_LARGE and "dry run" in r.error


@pytest.mark.parametrize("sql,status", [
    ("SELECT * FROM read_text('/etc/hostname')", S.REJECTED),      # the emulator would read it
    ("SELECT * FROM EXTERNAL_QUERY('conn', 'SELECT 1')", S.REJECTED),
    ("DELETE FROM child WHERE true", S.REJECTED),
    ("DROP TABLE child", S.REJECTED),
    ("SELECT 1; DELETE FROM child WHERE true", S.REJECTED),
    ("SELECT x FROM UNNEST(GENERATE_ARRAY(1, 51)) AS x", S.TOO_LARGE),
    ("SELEC 1", S.SYNTAX),
    ("SELECT nosuch FROM child", S.SCHEMA),
    ("SELECT * FROM nosuch", S.SCHEMA),
    ("SELECT cid, score FROM child GROUP BY cid", S.SYNTAX),
    ("SELECT avg(note) FROM child", S.SYNTAX),                      # no matching signature
    ("SELECT 1/0", S.RUNTIME),
    ("", S.EMPTY),
])
def test_sandbox_and_errors(engine, replica, sql, status):
    r = engine.execute(replica.location, sql, LIMITS)
    assert r.status is status, (r.status, r.error)
    after = engine.execute(replica.location, "SELECT count(*) FROM child", LIMITS)
    assert after.ok and after.table.column(0).to_pylist() == [3]


def test_missing_dataset_unavailable(engine):
    r = engine.execute("pq_no_such", "SELECT * FROM t", LIMITS)
    assert r.status in (S.UNAVAILABLE, S.SCHEMA), r.error


def test_anonymous_needs_an_emulator():
    with pytest.raises(ValueError, match="api_endpoint"):
        bq.make_client({"anonymous": True, "project": "p"})


def test_error_tables_are_data():
    from google.api_core import exceptions as gexc

    assert bq.classify_error(gexc.BadRequest("Unrecognized name: foo at [1:8]",
                                             errors=[{"reason": "invalidQuery"}])) is S.SCHEMA
    assert bq.classify_error(gexc.BadRequest("Query exceeded limit for bytes billed",
                                             errors=[{"reason": "bytesBilledLimitExceeded"}])) is S.TOO_LARGE
    assert bq.classify_error(gexc.BadRequest("Job timed out", errors=[{"reason": "timeout"}])) is S.TIMEOUT
    assert bq.classify_error(gexc.InternalServerError("boom")) is S.UNAVAILABLE
