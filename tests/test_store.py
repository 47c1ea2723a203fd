"""The results store: deterministic keys, append-only parts, buffered writes that survive errors."""
from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from polysql_ray.store.parquet import BufferedWriter, ResultsStore, StoreError, cell_key, score_key
from polysql_ray.store.schema import SCORE_SCHEMA


def _rows(cell: str, n: int, start: int = 0) -> pa.Table:
    now = dt.datetime.now(dt.timezone.utc)
    rows = [{f.name: None for f in SCORE_SCHEMA} | {
        "key": score_key(cell, str(i)), "cell_key": cell, "model": "m", "dataset": "d", "dialect": "sqlite",
        "instruction_level": "-", "question_id": str(i), "correct": i % 2 == 0, "verdict": "pass",
        "scored_at": now} for i in range(start, start + n)]
    return pa.Table.from_pylist(rows, schema=SCORE_SCHEMA)


def test_keys_are_deterministic_and_sensitive():
    a = cell_key("m", "fp", "spider", "sqlite", "-", "pol", "lim")
    assert a == cell_key("m", "fp", "spider", "sqlite", "-", "pol", "lim")
    for changed in (("m2", "fp", "spider", "sqlite", "-", "pol", "lim"),
                    ("m", "fp2", "spider", "sqlite", "-", "pol", "lim"),
                    ("m", "fp", "spider", "duckdb", "-", "pol", "lim"),
                    ("m", "fp", "spider", "sqlite", "-", "pol2", "lim"),
                    ("m", "fp", "spider", "sqlite", "-", "pol", "lim2")):
        assert cell_key(*changed) != a
    assert score_key(a, "1") != score_key(a, "2")


def test_buffered_writer_writes_few_files_and_flushes_on_error(tmp_path):
    store = ResultsStore(tmp_path)
    with BufferedWriter(store, flush_rows=100) as w:
        for b in range(5):  # 5 batches of 30 rows, two cells
            w.add(pa.concat_tables([_rows("cellA", 15, 15 * b), _rows("cellB", 15, 15 * b)]))
    assert len(store.existing_keys()) == 150
    assert len(store.files()) == 4  # one flush at 120 rows + the close, 2 cells each

    with pytest.raises(RuntimeError):
        with BufferedWriter(store, flush_rows=10_000) as w:
            w.add(_rows("cellC", 7))
            raise RuntimeError("scoring crashed")
    assert len(store.existing_keys(["cellC"])) == 7  # the scored batch was not lost
    assert store.read(cell_keys=["cellA"]).num_rows == 75


def test_suite_unavailable_rows_are_pending_until_rescored(tmp_path):
    """A row whose suite check could not run (suite copy failed, suite server down) is kept
    for its original verdict but is pending work: the next run rescores it, and once a newer
    row with a decided suite verdict is stored the key is done."""
    store = ResultsStore(tmp_path)
    rows = _rows("cellS", 3)
    verdicts = pa.array(["pass", "unavailable", None], pa.string())
    store.append(rows.set_column(rows.schema.get_field_index("suite_verdict"), "suite_verdict", verdicts))
    k = [score_key("cellS", str(i)) for i in range(3)]
    assert store.existing_keys(["cellS"]) == {k[0], k[2]} == store.existing_keys()
    rescored = _rows("cellS", 1, start=1)
    store.append(rescored.set_column(rescored.schema.get_field_index("suite_verdict"), "suite_verdict",
                                     pa.array(["fail"], pa.string())))
    assert store.existing_keys(["cellS"]) == set(k)


def test_unwritable_results_dir_is_a_store_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="results_dir"):
        ResultsStore(blocker / "sub")
