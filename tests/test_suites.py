"""Distilled database suites (polysql_ray/suites): generation keeps the schema and the type
decisions, neighbors are built, distillation keeps databases that tell neighbors from golds,
the same seed gives the same suite, and a suite database replicates like any source."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from polysql_ray.comparison.policy import ComparisonPolicy
from polysql_ray.comparison.shape import analyze_gold
from polysql_ray.comparison.verdict import decide
from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines.base import Limits
from polysql_ray.engines.registry import make_engine
from polysql_ray.suites import SuiteSettings, suite_for
from polysql_ray.suites.generate import content_fingerprint, type_decisions
from polysql_ray.suites.neighbors import neighbors

SPIDER = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "spider"

DDL = [
    "CREATE TABLE dept (dept_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, opened DATE)",
    "CREATE TABLE emp (emp_id INTEGER PRIMARY KEY, name VARCHAR(20) NOT NULL, age INT, "
    "badge INT, dept_id INTEGER REFERENCES dept(dept_id))",
]
GOLDS = [
    "SELECT name FROM emp WHERE age >= 30",
    "SELECT d.name, count(*) FROM emp AS e JOIN dept AS d ON e.dept_id = d.dept_id GROUP BY d.name",
    "SELECT max(age) FROM emp",
    "SELECT name FROM emp ORDER BY age DESC LIMIT 1",
    "SELECT DISTINCT dept_id FROM emp",
]


@pytest.fixture
def tiny(tmp_path) -> str:
    """Ages avoid the gold's boundary 30 (so `>` vs `>=` cannot be told apart on it); `badge`
    holds one text value, so its declared INT falls back to the storage type."""
    path = tmp_path / "tiny.sqlite"
    con = sqlite3.connect(path)
    for sql in DDL:
        con.execute(sql)
    con.executemany("INSERT INTO dept VALUES (?,?,?)",
                    [(1, "ops", "2001-02-03"), (2, "dev", "1999-12-31"), (3, "hr", None)])
    con.executemany("INSERT INTO emp VALUES (?,?,?,?,?)",
                    [(i, f"e{i}", age, "n/a" if i == 3 else i * 7, 1 + i % 3)
                     for i, age in enumerate([22, 41, 35, 28, 52, 33, 25, 47], 1)])
    con.commit()
    con.close()
    return str(path)


def test_neighbors_cover_the_rules():
    got = {(n.rule, n.sql) for n in neighbors(
        "SELECT DISTINCT a FROM t JOIN u ON t.id = u.id WHERE x >= 3 AND y = 'k' ORDER BY a LIMIT 2")}
    rules = {r for r, _ in got}
    assert {"strictness", "direction", "negation", "join_type", "drop_predicate", "and_or",
            "distinct", "order", "limit"} <= rules
    sqls = {s for _, s in got}
    assert "SELECT DISTINCT a FROM t JOIN u ON t.id = u.id WHERE x > 3 AND y = 'k' ORDER BY a LIMIT 2" in sqls
    assert "SELECT DISTINCT a FROM t LEFT JOIN u ON t.id = u.id WHERE x >= 3 AND y = 'k' ORDER BY a LIMIT 2" in sqls
    assert "SELECT DISTINCT a FROM t JOIN u ON t.id = u.id WHERE y = 'k' ORDER BY a LIMIT 2" in sqls
    assert "SELECT a FROM t JOIN u ON t.id = u.id WHERE x >= 3 AND y = 'k' ORDER BY a LIMIT 2" in sqls
    assert "SELECT DISTINCT a FROM t JOIN u ON t.id = u.id WHERE x >= 3 AND y = 'k' ORDER BY a DESC LIMIT 2" in sqls
    agg = {n.sql for n in neighbors("SELECT max(a), count(b) FROM t")}
    assert {"SELECT MIN(a), COUNT(b) FROM t", "SELECT MAX(a), COUNT(DISTINCT b) FROM t"} <= agg
    assert neighbors("SELEC nonsense (") == []


def test_suite_keeps_schema_and_types_and_tells_neighbors_apart(tiny, tmp_path):
    settings = SuiteSettings(candidates=12, size=4, max_rows=8)
    s = suite_for("tiny", tiny, 7, 4, GOLDS, tmp_path / "a", dataset="t", settings=settings)
    f = s.figures
    assert 1 <= f["kept"] == len(s.databases) <= 4
    assert f["rejected_type_drift"] == 0 and f["generated"] == 12
    assert f["golds_run_on_source"] == len(GOLDS)
    assert f["golds_nontrivial_some_kept"] == f["golds_nontrivial_source"] == len(GOLDS)
    # the boundary value 30 (a gold literal) reaches the suite: `age > 30` fails there, not on the source
    assert f["distinguished_suite"] > f["distinguished_source"]
    policy, limits, eng = ComparisonPolicy(), Limits(), make_engine("sqlite")
    gold, near = GOLDS[0], "SELECT name FROM emp WHERE age > 30"
    shape = analyze_gold(gold, "sqlite")

    def verdict(loc):
        return decide("ok", eng.execute(loc, gold, limits), None, eng.execute(loc, near, limits),
                      shape, policy, limits).verdict

    assert verdict(tiny) == "pass"
    assert "fail" in {verdict(d.path) for d in s.databases}
    src = sqlite3.connect(tiny)
    want_schema = src.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    src.close()
    for d in s.databases:
        con = sqlite3.connect(d.path)
        assert con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall() == want_schema
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        assert con.execute("SELECT count(*) FROM emp WHERE name IS NULL").fetchone()[0] == 0
        assert con.execute("SELECT count(*) - count(DISTINCT name) FROM dept").fetchone()[0] == 0
        con.close()
        assert type_decisions(d.path) == type_decisions(tiny)
        assert content_fingerprint(d.path) == d.fingerprint


def test_same_seed_same_suite_other_seed_other_suite(tiny, tmp_path):
    settings = SuiteSettings(candidates=6, size=3, max_rows=8)
    a = suite_for("tiny", tiny, 1, 3, GOLDS, tmp_path / "a", dataset="t", settings=settings)
    b = suite_for("tiny", tiny, 1, 3, GOLDS, tmp_path / "b", dataset="t", settings=settings)
    c = suite_for("tiny", tiny, 2, 3, GOLDS, tmp_path / "c", dataset="t", settings=settings)
    assert a.fingerprint == b.fingerprint and a.key() == b.key()
    assert [Path(d.path).read_bytes() for d in a.databases] == [Path(d.path).read_bytes() for d in b.databases]
    assert c.fingerprint != a.fingerprint
    again = suite_for("tiny", tiny, 1, 3, GOLDS, tmp_path / "a", dataset="t", settings=settings)
    assert again.figures.get("reused") and again.fingerprint == a.fingerprint


def test_suite_database_replicates_like_a_source(tiny, tmp_path):
    """A suite database is a SQLite source like any other: the replication stage copies and
    certifies it (DuckDB here; the job does PostgreSQL and MySQL), with the source's type
    decisions, and every gold returns the same result on the copy."""
    from polysql_ray.replication.base import replicate

    settings = SuiteSettings(candidates=4, size=2, max_rows=8)
    s = suite_for("tiny", tiny, 3, 2, GOLDS, tmp_path / "s", dataset="t", settings=settings)
    ref = replicate(SourceDatabase("t", "tiny", "sqlite", tiny), "duckdb", tmp_path / "rep")
    want = {(t.name, c.name): (c.logical_type, c.target_type) for t in ref.manifest.tables for c in t.columns}
    sq, dk, limits, policy = make_engine("sqlite"), make_engine("duckdb"), Limits(), ComparisonPolicy()
    for d in s.databases:
        r = replicate(SourceDatabase("t_suite", d.name, "sqlite", d.path), "duckdb", tmp_path / "rep")
        assert r.manifest.checksums
        assert {(t.name, c.name): (c.logical_type, c.target_type) for t in r.manifest.tables
                for c in t.columns} == want
        for g in GOLDS:
            v = decide("ok", sq.execute(d.path, g, limits), None, dk.execute(r.location, g, limits),
                       analyze_gold(g, "sqlite"), policy, limits)
            assert v.verdict == "pass", (d.name, g, v)
    dk.close()


def test_suite_settings_are_validated():
    from polysql_ray.config import validate
    from polysql_ray.errors import ConfigError

    assert SuiteSettings.from_config({"size": 3, "seed": 5}).size == 3
    for bad, key in (({"size": 0}, "suite.size"), ({"seed": "x"}, "suite.seed"),
                     ({"size": 9, "candidates": 4}, "suite.candidates"), ({"sise": 2}, "sise"),
                     ({"enabled": "yes"}, "suite.enabled")):
        with pytest.raises(ConfigError, match=key):
            validate({"suite": bad})


@pytest.mark.skipif(not (SPIDER / "database" / "pets_1" / "pets_1.sqlite").exists(),
                    reason="../shared Spider data not present")
def test_a_real_spider_database(tmp_path):
    import json

    golds = [e["query"] for e in json.loads((SPIDER / "dev.json").read_text()) if e["db_id"] == "pets_1"]
    settings = SuiteSettings(candidates=3, size=3, max_rows=10)
    s = suite_for("pets_1", SPIDER / "database" / "pets_1" / "pets_1.sqlite", 0, 3, golds, tmp_path,
                  settings=settings)
    f = s.figures
    assert f["generated"] == 3 and f["kept"] >= 1 and f["golds_run_on_source"] == len(golds)
    assert f["distinguished_source_or_suite"] > f["distinguished_source"]


@pytest.mark.parametrize("arg", ["size=0", "seed=abc", "candidates=2"])
def test_a_bad_suite_setting_is_one_line_and_exit_2(arg, capsys):
    from jobs.suites import PROG, main
    from polysql_ray.jobs_cli import run_job

    assert run_job(PROG, main, ["build", arg]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{PROG}: error: suite.")


@pytest.mark.skipif(not (SPIDER / "database" / "concert_singer" / "concert_singer.sqlite").exists(),
                    reason="../shared Spider data not present")
def test_jobs_build_passes_the_golds_a_sweep_passes():
    """concert_singer repeats golds in dev.json (45 questions, 26 distinct texts): jobs.suites must
    pass the distinct list a sweep passes, or its cache key (golds hash) misses the sweep's suite."""
    import json

    from jobs.suites import _golds
    from polysql_ray.datasets.registry import load_dataset
    from polysql_ray.suites.spec import suite_sources

    raw = [e["query"] for e in json.loads((SPIDER / "dev.json").read_text()) if e["db_id"] == "concert_singer"]
    path, golds = _golds(SPIDER, "spider", {"concert_singer"})["concert_singer"]
    assert len(raw) > len(set(raw)) and len(golds) == len(set(golds))
    sweep = suite_sources(load_dataset({"name": "spider", "layout": "spider", "root": str(SPIDER),
                                        "file": "dev.json", "db_dir": "database",
                                        "source_engine": "sqlite"}))["concert_singer"]
    assert (path, golds) == sweep
