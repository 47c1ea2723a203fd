"""Replicas that mean what the source means, on the real servers (PostgreSQL, MariaDB).

* names: ``SELECT name FROM singer`` and ``SELECT Name FROM Singer`` both resolve on the
  PostgreSQL replica of Spider's concert_singer, as on the SQLite source;
* declared types: a DATETIME column compares with a TIMESTAMP literal; INTEGER stays a 4-byte
  integer, so PostgreSQL's ``SUM(int)/COUNT(*)`` divides as integers; a BOOL column holding
  'T'/'F' stays text;
* namespaces: two runs (two replicas folders) never drop or overwrite each other's copies.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, register_server_replication, require_data, require_servers  # noqa: E402

require_servers("postgres", "mysql")
require_data(SPIDER / "database")
register_server_replication()

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.base import ExecStatus, Limits  # noqa: E402
from polysql_ray.engines.registry import make_engine  # noqa: E402
from polysql_ray.replication.base import drop_replicas, get_writer, replicate  # noqa: E402

LIM = Limits(timeout_s=10)


def _src(db):
    return SourceDatabase("meaning", db, "sqlite", str(SPIDER / "database" / db / f"{db}.sqlite"))


@pytest.fixture()
def rdir(tmp_path):
    yield tmp_path / "replicas"
    drop_replicas(tmp_path / "replicas")


def _run(engine, location, sql):
    res = engine.execute(location, sql, LIM)
    assert res.status is ExecStatus.OK, (sql, res.status, res.error)
    return [tuple(r.values()) for r in res.table.to_pylist()]


def _sqlite(db, sql):
    import sqlite3

    con = sqlite3.connect(f"file:{SPIDER / 'database' / db / (db + '.sqlite')}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_postgres_replica_resolves_names_in_any_case(rdir):
    rep = replicate(_src("concert_singer"), "postgres", rdir)
    eng = make_engine("postgres")
    try:
        lower = _run(eng, rep.location, "SELECT name FROM singer ORDER BY singer_id")
        mixed = _run(eng, rep.location, "SELECT Name FROM Singer ORDER BY Singer_ID")
        upper = _run(eng, rep.location, "SELECT NAME FROM SINGER ORDER BY SINGER_ID")
    finally:
        eng.close()
    expected = _sqlite("concert_singer", "SELECT Name FROM singer ORDER BY Singer_ID")
    assert lower == mixed == upper == [tuple(r) for r in expected]
    names = {(t.name, c.name): (t.target_name, c.target_name)
             for t in rep.manifest.tables for c in t.columns}
    assert names[("singer", "Singer_ID")] == ("singer", "singer_id")  # recorded mapping
    assert any("Singer_ID" in n for n in rep.manifest.names)


@pytest.mark.parametrize("target", ["postgres", "mysql", "duckdb"])
def test_datetime_column_compares_with_timestamp_literal(target, rdir):
    rep = replicate(_src("dog_kennels"), target, rdir)
    col = {(t.name, c.name): c for t in rep.manifest.tables for c in t.columns}[("Dogs", "date_of_birth")]
    assert col.logical_type == "TIMESTAMP" and col.fallback is None
    lit = {"postgres": "TIMESTAMP '2010-01-01 00:00:00'", "duckdb": "TIMESTAMP '2010-01-01 00:00:00'",
           "mysql": "TIMESTAMP '2010-01-01 00:00:00'"}[target]
    eng = make_engine(target)
    try:
        got = _run(eng, rep.location, f"SELECT count(*) FROM Dogs WHERE date_of_birth < {lit}")
        year = _run(eng, rep.location, "SELECT EXTRACT(YEAR FROM date_of_birth) AS y FROM Dogs "
                                       "ORDER BY dog_id LIMIT 1")
    finally:
        eng.close()
    want = _sqlite("dog_kennels", "SELECT count(*) FROM Dogs WHERE date_of_birth < '2010-01-01 00:00:00'")
    assert got[0][0] == want[0][0] > 0
    first = _sqlite("dog_kennels", "SELECT substr(date_of_birth, 1, 4) FROM Dogs ORDER BY dog_id LIMIT 1")
    assert int(year[0][0]) == int(first[0][0])


def test_integer_sum_divides_as_integers_on_postgres(rdir):
    rep = replicate(_src("concert_singer"), "postgres", rdir)
    col = {(t.name, c.name): c for t in rep.manifest.tables for c in t.columns}[("stadium", "Capacity")]
    assert col.target_type == "INTEGER"
    eng = make_engine("postgres")
    try:
        got = _run(eng, rep.location, "SELECT SUM(Capacity) / COUNT(*) FROM stadium")[0][0]
    finally:
        eng.close()
    total, n = _sqlite("concert_singer", "SELECT SUM(Capacity), COUNT(*) FROM stadium")[0]
    assert total % n != 0            # a case where exact division would differ
    assert got == total // n         # integer division, as a PostgreSQL INTEGER column gives


@pytest.mark.parametrize("target", ["postgres", "mysql"])
def test_bool_holding_letters_stays_text(target, rdir):
    rep = replicate(_src("concert_singer"), target, rdir)
    col = {(t.name, c.name): c for t in rep.manifest.tables for c in t.columns}[("singer", "Is_male")]
    assert col.logical_type == "VARCHAR" and col.fallback_count == 6
    assert set(col.fallback_examples) == {"'T'", "'F'"}
    eng = make_engine(target)
    try:
        got = _run(eng, rep.location, "SELECT count(*) FROM singer WHERE Is_male = 'T'")
    finally:
        eng.close()
    assert got[0][0] == _sqlite("concert_singer", "SELECT count(*) FROM singer WHERE Is_male = 'T'")[0][0]


@pytest.mark.parametrize("target", ["postgres", "mysql"])
def test_two_runs_never_touch_each_others_replicas(target, tmp_path):
    a, b = tmp_path / "run_a" / "replicas", tmp_path / "run_b" / "replicas"
    try:
        ra = replicate(_src("pets_1"), target, a)
        rb = replicate(_src("pets_1"), target, b)
        assert ra.location != rb.location
        writer = get_writer(target)
        fp = writer.fingerprint(ra.location)
        replicate(_src("pets_1"), target, b, force=True)       # run b rebuilds its copy
        replicate(_src("pets_1"), target, b, types="storage")  # and switches type mode
        assert writer.fingerprint(ra.location) == fp == ra.manifest.copy_fingerprint
        assert replicate(_src("pets_1"), target, a).reused
        # run b's superseded declared-types copy was dropped, run a's kept
        assert writer.fingerprint(rb.location) == ""
    finally:
        drop_replicas(a)
        drop_replicas(b)


@pytest.mark.parametrize("target", ["duckdb", "postgres", "mysql"])
def test_a_copied_results_folder_never_drops_the_originals_replicas(target, tmp_path):
    """``cp -r`` of a results folder carries its manifests, which name the original's copies;
    a run into the copy builds its own and leaves the original's in place (found by a new-user
    review: the original's DuckDB files were deleted and its PostgreSQL databases dropped)."""
    import shutil

    a, b = tmp_path / "run_a" / "replicas", tmp_path / "run_b" / "replicas"
    try:
        ra = replicate(_src("pets_1"), target, a)
        writer = get_writer(target)
        fp = writer.fingerprint(ra.location)
        shutil.copytree(a, b)
        rb = replicate(_src("pets_1"), target, b)
        assert rb.location != ra.location and not rb.reused
        assert writer.fingerprint(ra.location) == fp != ""
        assert replicate(_src("pets_1"), target, a).reused
        c = tmp_path / "run_c" / "replicas"      # a copy, cleaned up: only its own copies go
        shutil.copytree(a, c)
        assert drop_replicas(c) == [] and writer.fingerprint(ra.location) == fp
    finally:
        drop_replicas(a)
        drop_replicas(b)
