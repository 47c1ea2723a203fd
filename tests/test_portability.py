"""Gold portability job: gold SQL unchanged on each target replica, share that runs/matches."""
from __future__ import annotations

import json

from jobs import portability


def _row(dialect, correct, status="ok", reason="match", error=None, verdict=None):
    return {"model": "gold", "dialect": dialect, "correct": correct, "pred_status": status,
            "reason": reason, "pred_error": error, "verdict": verdict or ("pass" if correct else "fail")}


def test_summary_counts_and_groups_causes():
    rows = [_row("postgres", True), _row("postgres", True),
            _row("postgres", False, "schema", "pred_schema", '[42703] column "France" does not exist\nLINE 1: x'),
            _row("postgres", False, "schema", "pred_schema", '[42703] column "Paris" does not exist'),
            _row("postgres", False, "ok", "values"),
            _row("postgres", False, "ok", "gold_runtime", verdict="gold_error")]  # not counted
    s = portability.summarise(rows)["postgres"]
    assert (s["n"], s["runs"], s["matches"]) == (5, 3, 2)
    assert s["matches_pct"] == 40.0 and s["runs_pct"] == 60.0
    assert s["causes"][0] == ("schema: [<n>] column <x> does not exist", 2)
    assert ("runs, different result (values)", 1) in s["causes"]


def test_job_runs_gold_on_each_target(tmp_path):
    rdir = tmp_path / "res"
    code = portability.main(["dataset=quickstart", "dialects=[duckdb]", f"results_dir={rdir}"])
    assert code == 0
    data = json.loads((rdir / "portability.json").read_text())
    d = data["duckdb"]
    assert d["n"] > 0 and 0 < d["matches"] <= d["runs"] <= d["n"]
    # the gold was executed on the replica, not proven equal to itself
    rows = portability.load_rows(rdir)
    assert all(r["pred_status"] != "skipped" for r in rows)
