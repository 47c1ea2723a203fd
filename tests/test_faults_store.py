"""Exactly once in the results store: one writer per results_dir, commit by rename, crash-safe
compaction, quarantine of damaged parts, unavailable rows kept apart, bad input one line."""
from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polysql_ray.store.parquet import BufferedWriter, ResultsStore, StoreError, dedup, score_key
from polysql_ray.store.schema import SCORE_SCHEMA
from tests.store_helpers import second_writer_order


def _rows(cell: str, ids, verdict: str = "pass", when: dt.datetime | None = None) -> pa.Table:
    now = when or dt.datetime.now(dt.timezone.utc)
    rows = [{f.name: None for f in SCORE_SCHEMA} | {
        "key": score_key(cell, str(i)), "cell_key": cell, "model": "m", "dataset": "d", "dialect": "sqlite",
        "instruction_level": "-", "question_id": str(i), "correct": verdict == "pass", "verdict": verdict,
        "reason": "pred_unavailable" if verdict == "unavailable" else "match", "scored_at": now}
        for i in ids]
    return pa.Table.from_pylist(rows, schema=SCORE_SCHEMA)


def _raw(store: ResultsStore) -> tuple[int, int]:
    """(rows, distinct keys) as a raw DuckDB reader of scores/**/*.parquet sees them."""
    files = [str(f) for f in sorted(store.scores_dir.rglob("*.parquet"))]
    if not files:
        return 0, 0
    return duckdb.sql(f"SELECT count(*), count(DISTINCT key) FROM read_parquet({files})").fetchall()[0]


def test_second_writer_waits_for_the_first(tmp_path, capsys):
    first, second = ResultsStore(tmp_path), ResultsStore(tmp_path)
    with first.lock("run-1"):
        with pytest.raises(StoreError, match="run run-1"):
            with second.lock("run-2", wait=False):
                pass
    assert second_writer_order(first, second, capsys) == ["first done", "second"]


def test_per_batch_commit_then_compaction_keeps_one_row_per_key(tmp_path):
    store = ResultsStore(tmp_path)
    with store.lock("r"):
        with BufferedWriter(store, flush_rows=1) as w:
            for b in range(6):
                w.add(pa.concat_tables([_rows("cellA", range(10 * b, 10 * b + 10)),
                                        _rows("cellB", range(10 * b, 10 * b + 10))]))
        assert len(store.files()) == 12  # every batch on disk as it arrived
        removed = store.compact()
    assert removed == 12 and len(store.files()) == 2
    assert _raw(store) == (120, 120)
    assert store.read().num_rows == 120


def test_compaction_interrupted_by_a_crash_is_finished_by_the_next_lock(tmp_path):
    store = ResultsStore(tmp_path)
    store.append(_rows("cellA", range(5)))
    store.append(_rows("cellA", range(5, 10)))
    parts = store.files()
    # crash between the merged file's rename and the deletes: journal + merged + old parts
    merged_rows = store._concat(parts)
    import json
    merged = parts[0].parent / "part-merged-c.parquet"
    pq.write_table(merged_rows, merged)
    (store.scores_dir / ".compact-crash.json").write_text(json.dumps(
        {"merged": str(merged), "replaces": [str(p) for p in parts]}))
    assert _raw(store) == (20, 10)           # the window a raw reader could see
    assert store.read().num_rows == 10       # the store's own reader never does
    with store.lock("next"):
        pass
    assert _raw(store) == (10, 10) and store.files() == [merged]


def test_dedup_keeps_the_newest_row():
    old = _rows("c", [1], "fail", dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc))
    new = _rows("c", [1], "pass", dt.datetime(2021, 1, 1, tzinfo=dt.timezone.utc))
    out = dedup(pa.concat_tables([new, old]))
    assert out.num_rows == 1 and out.column("verdict")[0].as_py() == "pass"


def test_truncated_part_is_quarantined_and_its_keys_rescored(tmp_path, capsys):
    store = ResultsStore(tmp_path)
    store.append(_rows("cellA", range(10)))
    bad = store.append(_rows("cellB", range(10)))[0]
    with open(bad, "r+b") as fh:
        fh.truncate(bad.stat().st_size // 2)
    keys = store.existing_keys()
    assert keys == {score_key("cellA", str(i)) for i in range(10)}  # cellB's keys: to rescore
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged part file" in err[0] and "rescored" in err[0]
    assert not bad.exists() and (tmp_path / "quarantine").is_dir()
    assert store.read().num_rows == 10  # readers (EX, stats) no longer trip on it
    from polysql_ray.statistics.load import load_scores
    _, summary = load_scores(tmp_path)
    assert summary.rows_kept == 10


def test_stats_job_skips_a_damaged_part_with_one_line(tmp_path, capsys):
    from polysql_ray.statistics.load import load_scores

    store = ResultsStore(tmp_path)
    store.append(_rows("cellA", range(4)))
    bad = store.append(_rows("cellB", range(4)))[0]
    bad.write_bytes(b"PAR1 not really")
    _, summary = load_scores(tmp_path)
    assert summary.rows_kept == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged part file" in err[0]


def test_unavailable_rows_live_apart_and_leave_once_scored(tmp_path):
    store = ResultsStore(tmp_path)
    with store.lock("r1"):
        store.append(pa.concat_tables([_rows("c", range(5)), _rows("c", range(5, 8), "unavailable")]))
        store.compact()
    assert len(store.existing_keys()) == 5          # the 3 unavailable keys are pending work
    assert _raw(store) == (5, 5)
    both = store.read(unavailable=True)
    assert both.num_rows == 8 and sorted(set(both.column("verdict").to_pylist())) == ["pass", "unavailable"]
    with store.lock("r2"):                           # the next run scores them
        store.append(_rows("c", range(5, 8)))
        store.compact()
    assert store.read(unavailable=True).num_rows == 8
    assert "unavailable" not in store.read(unavailable=True).column("verdict").to_pylist()
    assert not store.unavailable_files()


def test_unwritable_results_dir_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="set results_dir=<writable folder>"):
        ResultsStore(blocker / "sub")


def test_lone_surrogate_is_stored_escaped():
    from polysql_ray.store.parquet import storable_text

    assert storable_text("SELECT '\ud800'") == "SELECT '\\ud800'"
    assert storable_text("SELECT 'é'") == "SELECT 'é'"
    pa.Table.from_pylist([{"pred_sql": storable_text("x\udfff")}])  # encodable now
