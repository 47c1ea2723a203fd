"""Suite EX in the pipeline (polysql_ray/pipeline/suite_stage.py): the quickstart with
``suite.enabled=true`` on real SQLite and DuckDB, through Ray.

* the ``rewritten`` model (right queries written differently) stays 100% suite-correct on
  sqlite; the ``flawed`` model has exactly its two wrong-but-lucky items passing EX and
  failing suite EX; the gold is suite-correct against itself on sqlite;
* early exit: only predictions that pass on the original database run on the suite;
* gold executions on a suite database are shared by every model (fewer unique than asked);
* the suite settings are part of the cell key (suites off: the keys of before);
* stores written before the suite columns existed still read, count and compact;
* the run's EX table and the leaderboard show suite EX beside EX, with the gap.
"""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import run
from polysql_ray.suites import SUITE_VERSION

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite_run(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("qs_suite")
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false", "suite.enabled=true",
                                 "suite.size=4", "suite.candidates=12"])
    stats, table = run(cfg, loader, text)
    return out, cfg, loader, text, stats, table


def _rows(out):
    import duckdb

    return duckdb.connect().sql(f"SELECT * FROM read_parquet('{out}/scores/**/*.parquet', union_by_name=true)"
                                ).to_arrow_table().to_pylist()


def _cell(table, model, dialect):
    (row,) = [r for r in table.to_pylist() if r["model"] == model and r["dialect"] == dialect]
    return row


def test_rewritten_stays_suite_correct_and_flawed_luck_is_caught(suite_run):
    out, *_, stats, table = suite_run
    assert not stats.errors
    rewritten, gold, flawed = (_cell(table, m, "sqlite") for m in ("rewritten", "gold", "flawed"))
    assert (rewritten["correct"], rewritten["suite_ex"], rewritten["suite_gap"]) == (34, 100.0, 0.0)
    assert (gold["correct"], gold["suite_ex"]) == (34, 100.0)  # the gold against itself, on its own dialect
    lucky = sorted(r["question_id"] for r in _rows(out) if r["model"] == "flawed" and r["dialect"] == "sqlite"
                   and r["verdict"] == "pass" and r["suite_verdict"] == "fail")
    assert lucky == ["school_01", "school_04"]  # flawed.jsonl: "suite": "fail"
    assert flawed["suite_gap"] == pytest.approx(100 * 2 / 34, abs=0.01)
    for r in _rows(out):
        if r["verdict"] == "pass" and r["suite_verdict"] == "fail":
            assert r["suite_failed_db"].startswith(r["db_id"] + "_") and r["suite_reason"] and r["suite_dbs"] >= 1


def test_early_exit_and_gold_results_shared(suite_run):
    out, *_, stats, _ = suite_run
    rows = _rows(out)
    for r in rows:
        assert r["suite_key"].startswith(SUITE_VERSION + ":")
        if r["verdict"] != "pass":  # never run on the suite: its suite verdict is its verdict
            assert (r["suite_verdict"], r["suite_dbs"], r["suite_reason"]) == (r["verdict"], 0, "original")
    f = stats.suite.summary()
    assert f["rows"] == len(rows) == 6 * 34
    assert f["rows_on_suite"] == sum(r["verdict"] == "pass" and r["basis"] != "proven" for r in rows)
    # the gold (and its probes) on each suite database run once per question, not once per model
    assert f["exec_unique"]["sqlite"] < f["exec_requested"]["sqlite"]
    # bounded: per suite database at most gold + 3 probes per question and prediction + 2 probes per row
    size = max(len(s.databases) for s in stats.suite.suites.values())
    assert sum(f["exec_unique"].values()) <= size * (4 * 34 + 3 * f["rows_on_suite"])
    summary = json.loads(next((out / "runs").glob("*/summary.json")).read_text())
    assert summary["suite"]["rows_on_suite"] == f["rows_on_suite"]


def test_rerun_scores_nothing_and_suite_settings_key_the_cells(suite_run, tmp_path):
    from polysql_ray.pipeline.driver import build_grid

    out, cfg, loader, text, *_ = suite_run
    stats2, table2 = run(cfg, loader, text)
    assert stats2.items_scored == 0 and stats2.items_skipped == 6 * 34
    assert _cell(table2, "rewritten", "sqlite")["suite_ex"] == 100.0
    keys_on = {c.key for c in build_grid(cfg, loader).cells}
    off, loader_off, _ = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false"])
    other, loader_other, _ = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false",
                                      "suite.enabled=true", "suite.size=4", "suite.candidates=12", "suite.seed=1"])
    keys_off = {c.key for c in build_grid(off, loader_off).cells}
    keys_other = {c.key for c in build_grid(other, loader_other).cells}
    assert not keys_on & keys_off and not keys_on & keys_other


def test_leaderboard_shows_suite_ex_beside_ex(suite_run, tmp_path):
    from polysql_ray.reporting.snapshot import write_snapshot
    from polysql_ray.reporting.views import GOLD_ROW, leaderboard_view

    out = suite_run[0]
    snap = write_snapshot(out, tmp_path / "snap", figures=False)
    view = leaderboard_view(snap.stats, with_ci=False)
    assert {"sx:sqlite", "gap:sqlite", "sx:duckdb", "gap:duckdb"} <= {c.key for c in view.columns}
    by = {r["model"]: r for r in view.rows}
    assert by["rewritten"]["sx:sqlite"] == 1.0 and by["flawed"]["gap:sqlite"] == pytest.approx(100 * 2 / 34)
    assert by[GOLD_ROW]["sx:sqlite"] == 1.0  # the gold's own suite portability on its dialect
    md = (tmp_path / "snap" / "leaderboard.md").read_text()
    assert "Gold SQL suite EX %" in md and "sqlite suite" in md


def test_a_store_without_suite_columns_still_reads(tmp_path):
    from polysql_ray.pipeline.summary import ex_table as run_ex_table
    from polysql_ray.statistics.ex import ex_table
    from polysql_ray.statistics.load import load_scores
    from polysql_ray.statistics.synthetic import score_row
    from polysql_ray.store.parquet import ResultsStore
    from polysql_ray.store.schema import SCORE_SCHEMA, SUITE_COLUMNS

    old = pa.schema([f for f in SCORE_SCHEMA if f.name not in SUITE_COLUMNS])
    rows = [score_row("m", "d", "sqlite", "l", f"q{i}", "pass" if i % 2 else "values") for i in range(4)]
    folder = tmp_path / "scores" / "d" / "m"
    folder.mkdir(parents=True)
    for k in range(2):  # two parts of one cell: compaction merges them
        pq.write_table(pa.Table.from_pylist([{c: r[c] for c in old.names} for r in rows[2 * k:2 * k + 2]],
                                            schema=old), folder / f"part-{k}.parquet")
    (row,) = run_ex_table(tmp_path).to_pylist()
    assert (row["n"], row["correct"]) == (4, 2) and "suite_ex" not in row
    con, _ = load_scores(tmp_path)
    (st,) = ex_table(con)
    assert (st["suite_n"], st["correct"]) == (0, 2)
    store = ResultsStore(tmp_path)
    with store.lock("t"):
        store.compact()
    got = store.read()
    assert got.num_rows == 4 and got.column("suite_verdict").null_count == 4
    # a new row with a suite verdict beside old rows without: both count
    new = score_row("m", "d", "sqlite", "l", "q9", "pass", suite_verdict="fail", suite_dbs=3)
    pq.write_table(pa.Table.from_pylist([new], schema=SCORE_SCHEMA), folder / "part-9.parquet")
    (row,) = run_ex_table(tmp_path).to_pylist()
    assert (row["n"], row["correct"], row["suite_ex"], row["suite_gap"]) == (5, 3, 0.0, 100.0)
