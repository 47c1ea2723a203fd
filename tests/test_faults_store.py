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


# ---------------------------------------------------------------- checksums, damaged parts

def _damage(path, where: str, n: int = 16) -> None:
    """Zero ``n`` bytes of ``path`` in place (same size): at its start, middle or footer."""
    size = path.stat().st_size
    at = {"start": 0, "middle": size // 2, "footer": size - 8 - n}[where]
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(b"\0" * n)


def test_every_part_carries_the_checksum_of_its_data():
    from polysql_ray.store.parquet import CHECKSUM_KEY, parquet_bytes

    data = parquet_bytes(_rows("cellA", range(50)))
    meta = pq.read_metadata(pa.BufferReader(data))
    assert len(meta.metadata[CHECKSUM_KEY]) == 64


@pytest.mark.parametrize("where", ["start", "middle", "footer"])
def test_part_with_16_bytes_zeroed_is_quarantined_and_rescored(tmp_path, capsys, where):
    store = ResultsStore(tmp_path)
    store.append(_rows("cellA", range(10)))
    bad = store.append(_rows("cellB", range(200)))[0]
    size = bad.stat().st_size
    _damage(bad, where)
    assert bad.stat().st_size == size  # same size: only a checksum can tell
    keys = ResultsStore(tmp_path).existing_keys()
    assert keys == {score_key("cellA", str(i)) for i in range(10)}  # cellB's keys: rescored
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "damaged part file" in err[0] and "rescored" in err[0], err
    assert not bad.exists() and list((tmp_path / "quarantine").rglob("*.parquet"))


def test_damage_after_a_part_was_read_is_still_found(tmp_path, capsys):
    """A part damaged in place after this store instance verified it is verified again."""
    store = ResultsStore(tmp_path)
    bad = store.append(_rows("cellB", range(200)))[0]
    assert len(store.existing_keys()) == 200
    _damage(bad, "middle")
    import os
    os.utime(bad, ns=(bad.stat().st_atime_ns, bad.stat().st_mtime_ns + 1_000_000))
    assert store.existing_keys() == set()
    assert "damaged part file" in capsys.readouterr().err


def _job(module: str, *args: str):
    import importlib

    return importlib.import_module(module).main(list(args))


def test_every_job_reading_the_store_survives_a_damaged_part_with_one_warning(tmp_path, capsys):
    from polysql_ray.pipeline.summary import ex_table
    from polysql_ray.statistics import load

    store = ResultsStore(tmp_path / "r")
    for cell, ids in (("cellA", range(30)), ("cellC", range(100, 130))):
        store.append(_rows(cell, ids))
    bad = store.append(_rows("cellB", range(200)))[0]
    _damage(bad, "middle")
    capsys.readouterr()
    for module, args in (("jobs.stats", [f"results_dir={tmp_path / 'r'}"]),
                         ("jobs.leaderboard", [f"results_dir={tmp_path / 'r'}", f"out={tmp_path / 'snap'}",
                                               "figures=false"])):
        load._WARNED.clear()  # each job is its own process on the command line
        assert _job(module, *args) == 0
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(err) == 1 and "damaged part file" in err[0], (module, err)
    load._WARNED.clear()
    table = ex_table(ResultsStore(tmp_path / "r"))  # the run's EX table
    assert table.num_rows == 1 and table.column("n").to_pylist() == [60]
    assert len([ln for ln in capsys.readouterr().err.splitlines() if "damaged part file" in ln]) == 1
    assert _job("jobs.compact", f"results_dir={tmp_path / 'r'}") == 0  # quarantines it
    assert not bad.exists() and list((tmp_path / "r" / "quarantine").rglob("*.parquet"))
    assert ResultsStore(tmp_path / "r").read().num_rows == 60


def test_compaction_job_quarantines_a_damaged_part_with_one_warning(tmp_path, capsys):
    store = ResultsStore(tmp_path)
    store.append(_rows("cellA", range(30)))
    store.append(_rows("cellA", range(30, 60)))
    bad = store.append(_rows("cellA", range(60, 260)))[0]
    _damage(bad, "middle")
    assert _job("jobs.compact", f"results_dir={tmp_path}") == 0
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "damaged part file" in err[0]
    assert ResultsStore(tmp_path).read().num_rows == 60 and len(store.files()) == 1


# ---------------------------------------------------------------- a full or read-only folder

@pytest.mark.parametrize("code", ["ENOSPC", "EROFS"])
def test_a_full_or_read_only_folder_stops_writes_with_one_error_and_loses_nothing(tmp_path, monkeypatch, code):
    from polysql_ray.store import parquet

    store = ResultsStore(tmp_path)
    with store.lock("r"):
        with BufferedWriter(store, flush_rows=1) as w:
            w.add(_rows("cellA", range(10)))
            w.add(_rows("cellA", range(10, 20)))
            before = sorted(p.name for p in store.files())
            monkeypatch.setenv(parquet.FAULT_ENV, f"store.write:{code}")
            with pytest.raises(StoreError) as err:
                w.add(_rows("cellA", range(20, 30)))
            msg = str(err.value)
            assert "\n" not in msg and "cannot write to results_dir" in msg and "rerun" in msg
            assert store.failed == msg
            w.add(_rows("cellA", range(30, 40)))  # a failed store takes nothing more, quietly
            w.flush()
        assert store.compact() == 0  # parts stay as they are
    assert w.dropped == 20
    monkeypatch.delenv(parquet.FAULT_ENV)
    assert not list(tmp_path.rglob("*.tmp"))  # no half file
    assert sorted(p.name for p in ResultsStore(tmp_path).files()) == before
    assert ResultsStore(tmp_path).read().num_rows == 20  # what was stored is intact


def _cli(*args: str, cwd, env: dict | None = None):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), **(env or {})}
    return subprocess.run([sys.executable, "-m", "polysql_ray", "progress=false", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_results_dir_that_fills_mid_run_ends_with_one_line_and_a_rerun_finishes(tmp_path):
    """The disk fills after the write probe, the run's manifest, config and first two parts (an
    ENOSPC injected at the store's write point, ``POLYSQL_FAULT``): the run ends with one error
    line and exit 2, the folder holds only whole parts, and a rerun scores exactly what is missing."""
    r = tmp_path / "r"
    args = (f"results_dir={r}", "dialects=[sqlite,duckdb]", "pipeline.flush_rows=8", "pipeline.score_batch_size=8")
    out = _cli(*args, cwd=tmp_path, env={"POLYSQL_FAULT": "store.write:ENOSPC:5"})
    assert out.returncode == 2, out.stderr[-3000:]
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("polysql_ray: error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "rerun" in errors[0], out.stderr[-3000:]
    assert "Traceback" not in out.stderr + out.stdout
    assert not list(r.rglob("*.tmp"))
    stored_then = ResultsStore(r).read().num_rows
    assert 0 < stored_then < 68
    again = _cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"already stored {stored_then}" in again.stdout
    assert _raw(ResultsStore(r)) == (68, 68)  # every question once, none twice
