"""The driver scores batches itself (``pipeline.driver_scores``, ``pipeline.max_inflight_score=0``;
:meth:`polysql_ray.pipeline.scheduler.Scheduler._driver_idle`): the rows are the ones the scoring
tasks give, and summary.json counts the batches it scored."""
from __future__ import annotations

import json

import duckdb

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import run
from polysql_ray.pipeline.scheduler import VERDICT_COLUMNS

#: Columns that are timings, not verdicts.
TIMINGS = {"gold_exec_s", "pred_exec_s"}


def _rows(out) -> dict:
    cols = [c for c in VERDICT_COLUMNS if c not in TIMINGS]
    got = duckdb.connect().execute(
        f"SELECT model, dialect, question_id, {', '.join(cols)} "
        f"FROM read_parquet('{out}/scores/**/*.parquet')").fetchall()
    return {r[:3]: dict(zip(cols, r[3:])) for r in got}


def test_batches_scored_by_the_driver_are_the_tasks_rows(ray_session, tmp_path):
    # small batches, so that many are scored; verdict reuse off, so that every item is scored
    over = ["+sweep=quickstart", "progress=false", "pipeline.score_batch_size=8", "pipeline.verdict_cache_size=0"]
    tasks, _ = run(*compose([*over, f"results_dir={tmp_path / 'tasks'}", "pipeline.max_inflight_score=1",
                             "pipeline.driver_scores=false"]))
    here, _ = run(*compose([*over, f"results_dir={tmp_path / 'here'}", "pipeline.max_inflight_score=0"]))
    by_tasks, by_driver = _rows(tmp_path / "tasks"), _rows(tmp_path / "here")
    assert len(by_tasks) == tasks.items_scored == here.items_scored > 100
    assert by_driver == by_tasks
    assert tasks.batches_scored_in_driver == 0
    # every batch of the driver-only run: items in chunks of 8 per cell (model x dialect)
    assert here.batches_scored_in_driver >= here.items_scored // 8
    summary = json.loads((tmp_path / "here" / "runs" / here.run_id / "summary.json").read_text())
    assert summary["batches_scored_in_driver"] == here.batches_scored_in_driver
    assert {r["verdict"] for r in by_driver.values()} >= {"pass", "fail"}
