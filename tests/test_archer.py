"""Archer: the dataset config, clock-dependent gold detection, and that a score computed
under another clock value is never reused (real Spider databases, real pipeline on Ray)."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from polysql_ray.datasets import archer
from polysql_ray.datasets.archer import TIME_DEPENDENT_GOLD, clock_granularity, clock_value

ROOT = Path(__file__).resolve().parents[1]
ARCHER = ROOT / ".." / "shared" / "data" / "archer" / "dev.json"
SPIDER_DB = ROOT / ".." / "shared" / "data" / "spider" / "database" / "world_1" / "world_1.sqlite"
needs_archer = pytest.mark.skipif(not (ARCHER.exists() and SPIDER_DB.exists()),
                                  reason="shared Archer / Spider data absent (../shared/data)")


@pytest.mark.parametrize("sql, granularity", [
    ('SELECT Name, Age - strftime ( "%Y" , "now" ) FROM singer', "year"),
    ("SELECT strftime('%Y-%m', 'now')", "month"),
    ("SELECT * FROM t WHERE d < date('now')", "day"),
    ("SELECT CURRENT_DATE", "day"),
    ("SELECT datetime('now', '-1 day')", "second"),
    ("SELECT strftime('%Y', 'now'), time('now')", "second"),  # the finest wins
    ("SELECT name FROM now_playing WHERE note = 'snow'", None),
    ("SELECT count(*) FROM singer", None),
])
def test_clock_granularity(sql, granularity):
    assert clock_granularity(sql) == granularity


def test_clock_value_renders_utc():
    t = dt.datetime(2031, 12, 31, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-2)))
    assert clock_value("year", t) == "2032" and clock_value("day", t) == "2032-01-01"


@needs_archer
def test_archer_config_loads_104_questions_24_clock_dependent():
    from polysql_ray.config import compose
    from polysql_ray.datasets.registry import load_dataset

    cfg, _, _ = compose(["dataset=archer"])
    examples = load_dataset(cfg["dataset"])
    assert len(examples) == 104
    assert {e.db_id for e in examples} == {"concert_singer", "world_1"}
    assert all(e.database.exists for e in examples)
    timed = [e for e in examples if TIME_DEPENDENT_GOLD in e.extra.get("flags", ())]
    assert len(timed) == 24
    assert {e.extra["clock_granularity"] for e in timed} == {"year"}
    assert examples[0].extra["reasoning_type"]


@needs_archer
@pytest.mark.slow
def test_clock_dependent_golds_are_rescored_under_a_new_clock(ray_session, tmp_path, monkeypatch):
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    args = ["dataset=archer", "model=gold", "dialects=[sqlite]", f"results_dir={tmp_path}",
            "progress=false", "dataset.db_ids=[concert_singer]"]
    monkeypatch.setattr(archer, "_utcnow", lambda: dt.datetime(2030, 6, 1, tzinfo=dt.timezone.utc))
    cfg, loader, text = compose(args)
    stats, table = run(cfg, loader, text)
    (row,) = table.to_pylist()
    assert stats.items_scored == 52 and row["ex"] == 100.0
    con = duckdb.connect()
    flagged = con.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/scores/**/*.parquet') "
                      f"WHERE flags LIKE '%{TIME_DEPENDENT_GOLD}%'").fetchall()[0][0]
    assert 0 < flagged < 52
    # same clock: everything is reused
    stats, _ = run(cfg, loader, text)
    assert (stats.items_scored, stats.items_skipped) == (0, 52)
    # a new year: only the clock-dependent golds are scored again, and EX counts each question once
    monkeypatch.setattr(archer, "_utcnow", lambda: dt.datetime(2031, 1, 2, tzinfo=dt.timezone.utc))
    stats, table = run(cfg, loader, text)
    assert (stats.items_scored, stats.items_skipped) == (flagged, 52 - flagged)
    (row,) = table.to_pylist()
    assert (row["n"], row["correct"]) == (52, 52)
