"""The streaming driver (issue 13 items 1-3): a bounded window of work, exact rerun skipping,
the structural check only where it pays, and generation overlapping execution as shown by
the stage timestamps of ``runs/<run_id>/summary.json``."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from polysql_ray.config import compose
from polysql_ray.pipeline.structural import EXEC_COST_MS, _cached_checker, _prove_batch, proves_before

CELL = ("model", "dataset", "dialect", "instruction_level")


def _rows(out: Path) -> list[tuple]:
    return duckdb.connect().sql(
        f"SELECT count(*), count(DISTINCT key) FROM read_parquet('{out}/scores/**/*.parquet')").fetchall()


def _summary(out: Path, run_id: str) -> dict:
    return json.loads((out / "runs" / run_id / "summary.json").read_text())


# ----------------------------------------------------------------- cost-based structural check

def test_auto_proves_only_before_expensive_engines():
    assert not proves_before("auto", "sqlite") and not proves_before("auto", "duckdb")
    assert proves_before("auto", "postgres") and proves_before("auto", "mysql")
    assert proves_before("auto", "snowflake") and proves_before("auto", "bigquery")
    assert proves_before("prove", "sqlite") and proves_before("verify", "duckdb")
    assert not proves_before("off", "bigquery")
    # the cost is data: per engine in the config, and the threshold too
    assert proves_before("auto", "sqlite", {"engines": {"sqlite": {"exec_cost_ms": 50}}})
    assert not proves_before("auto", "postgres", {"pipeline": {"structural_min_exec_ms": 1000}})
    assert EXEC_COST_MS["sqlite"] < EXEC_COST_MS["postgres"] < EXEC_COST_MS["bigquery"]


def test_canonical_forms_are_cached_per_unique_sql_and_decide_as_before():
    from polysql_ray.comparison.ast import AstEquivalence

    gold = "SELECT name FROM singer WHERE age > 30 AND country = 'France'"
    preds = ["SELECT name FROM singer WHERE country = 'France' AND age > 30",
             "SELECT name FROM singer WHERE 30 < age AND country = 'France'",
             "SELECT name FROM singer WHERE age > 31 AND country = 'France'",
             "SELECT name FROM singer ORDER BY random() LIMIT 1"]
    pairs = [(gold, "sqlite", p, "sqlite", None) for p in preds]
    hits = type(_cached_checker()).hits
    out = _prove_batch._function(pairs)
    # the gold was canonicalised once, then found in the cache for the 3 other pairs
    assert type(_cached_checker()).hits - hits >= len(preds) - 1
    plain = AstEquivalence()
    expect = []
    for p in preds:
        r = plain.check(gold, "sqlite", p, "sqlite")
        expect.append("equivalent" if r.decision == "equivalent" else f"unknown: {r.reason}")
    assert out == expect
    assert out[:2] == ["equivalent", "equivalent"] and out[2].startswith("unknown")
    # a second batch answers from the cache with the same decisions (refusals included)
    assert _prove_batch._function(pairs) == expect


# ----------------------------------------------------------------------- the streaming run

@pytest.mark.slow
def test_tiny_window_scores_every_item_once_and_a_rerun_scores_nothing(ray_session, tmp_path):
    """A window of 10 items, chunks of 5, score batches of 4 and an LRU of 2 executions:
    every item is scored exactly once, with the EX table of a default run; the rerun scores
    and executes nothing."""
    from polysql_ray.pipeline.driver import run

    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={tmp_path / 'default'}", "progress=false"])
    base_stats, base_table = run(cfg, loader, text)
    out = tmp_path / "tiny"
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false",
                                 "pipeline.max_pending_items=10", "pipeline.plan_chunk_items=5",
                                 "pipeline.score_batch_size=4", "pipeline.exec_cache_size=2",
                                 "pipeline.flush_rows=7", "pipeline.flush_s=0"])
    stats, table = run(cfg, loader, text)
    assert stats.items_total == stats.items_scored == 6 * 34
    assert _rows(out) == [(6 * 34, 6 * 34)]
    assert table.to_pylist() == base_table.to_pylist()
    # a 2-entry LRU forgets gold results that a larger one reuses: more executions, same verdicts
    assert sum(stats.exec_unique.values()) > sum(base_stats.exec_unique.values())
    assert base_stats.exec_reused > 0
    # compaction leaves one part per cell
    assert len(list((out / "scores").rglob("*.parquet"))) == 6

    again, table2 = run(cfg, loader, text)
    assert (again.items_scored, again.items_skipped) == (0, 6 * 34)
    assert sum(again.exec_unique.values()) == 0 and again.exec_unique == {}
    assert table2.to_pylist() == table.to_pylist()
    assert _rows(out) == [(6 * 34, 6 * 34)]

    # a lost part (one cell) and half of another cell's rows: exactly those are scored again
    parts = sorted((out / "scores").rglob("*.parquet"))
    parts[0].unlink()
    import pyarrow.parquet as pq

    half = pq.read_table(parts[1])
    # rewritten by hand: without the stale footer checksum (a part whose checksum no longer
    # matches is damaged and quarantined whole, tests/test_faults_store.py)
    meta = {k: v for k, v in (half.schema.metadata or {}).items() if k != b"polysql.sha256"}
    pq.write_table(half.slice(0, 17).replace_schema_metadata(meta), parts[1])
    third, table3 = run(cfg, loader, text)
    assert (third.items_scored, third.items_skipped) == (34 + 17, 6 * 34 - 34 - 17)
    assert _rows(out) == [(6 * 34, 6 * 34)]
    assert table3.to_pylist() == table.to_pylist()


@pytest.mark.slow
def test_ex_table_is_the_same_with_auto_prove_and_off(ray_session, tmp_path):
    """The structural check may prove, never refute: auto, prove and off give the same EX
    table on the quickstart sweep except the `proven` column (none of its proven predictions
    would have failed to execute; a proven prediction that times out or is too large on its
    engine would be the one difference: `pass` proven vs an execution failure)."""
    from polysql_ray.pipeline.driver import run

    tables, proven = {}, {}
    for mode in ("auto", "prove", "off"):
        cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={tmp_path / mode}", "progress=false",
                                     f"pipeline.structural_check={mode}"])
        stats, table = run(cfg, loader, text)
        proven[mode] = stats.proven
        tables[mode] = [{k: v for k, v in r.items() if k != "proven"} for r in table.to_pylist()]
    assert proven["prove"] > 0 and proven["auto"] == 0 and proven["off"] == 0
    assert tables["auto"] == tables["prove"] == tables["off"]


@pytest.mark.slow
def test_execution_starts_before_generation_ends(ray_session, tmp_path, monkeypatch):
    """A slow model (the loopback server answering after a delay) over 4 cells, one cell of
    prefetch: the generation thread can start the 4th cell only after the driver took the 2nd,
    which it does after submitting the 1st cell's executions; so the summary's timestamps show
    execution starting before generation ends (an ordering, not a timing)."""
    from polysql_ray.pipeline.driver import run

    from test_generation_stage import loopback  # the loopback server module, loaded once

    with loopback.LoopbackServer(port=0, lifetime_s=300, delay_s=0.02) as server:
        monkeypatch.setenv("POLYSQL_LOOPBACK_URL", server.base_url)
        cfg, loader, text = compose(["+sweep=openai_loopback", f"results_dir={tmp_path}", "progress=false",
                                     "pipeline.generation_prefetch_cells=1"])
        stats, table = run(cfg, loader, text)
    assert stats.cells == 4 and stats.items_scored == 4 * 34 and stats.generation.generated == 4 * 34
    stages = _summary(tmp_path, stats.run_id)["stages"]
    gen = stages["generate[loopback-openai]"]
    execs = [v for k, v in stages.items() if k.startswith("execute[")]
    assert execs and gen["last_end_s"] is not None
    assert min(e["first_start_s"] for e in execs) < gen["last_end_s"]
    assert stages["score"]["first_start_s"] <= stages["score"]["last_end_s"]


def _one_cell(out: Path) -> list[str]:
    """The loopback sweep (server at ``$POLYSQL_LOOPBACK_URL``) cut to one cell (34 questions),
    generated 8 per call, every scored batch written as it arrives (``part_written`` follows
    each scoring task)."""
    return ["+sweep=openai_loopback", f"results_dir={out}", "progress=false", "dialects=[sqlite]",
            "instruction_levels=[\"11\"]", "pipeline.generation_batch_size=8", "pipeline.flush_rows=1"]


@pytest.mark.slow
def test_a_cell_executes_and_scores_batch_by_batch_while_it_generates(ray_session, tmp_path, monkeypatch):
    """One cell, 8 questions per generator call. The model's thread is held at fault point
    ``generated`` (its first batch stored and handed over) until that batch's score rows are
    in the store (``part_written``): so the first execution and the first scoring task start
    before generation ends, within the one cell (an order forced by fault points, not a
    timing), and the stage clock of the run summary shows it. Every question is generated,
    stored and scored exactly once."""
    import threading
    import time

    from fault_points import Points

    from polysql_ray import faults
    from polysql_ray.pipeline.driver import run
    from polysql_ray.store.generations import GenerationsStore

    from test_generation_stage import loopback

    points = Points(tmp_path / "points")
    points.hold("generated")
    monkeypatch.setenv(faults.ENV, str(points.folder))
    finished, seen = threading.Event(), {}

    def release_after_first_scores() -> None:
        try:
            points.wait("generated", alive=lambda: not finished.is_set())
            points.wait("part_written", alive=lambda: not finished.is_set())
            seen["generated_batches"] = len(points.pids("generated"))  # still held at the first
            seen["released_at"] = time.time()
        finally:
            points.release("generated")

    with loopback.LoopbackServer(port=0, lifetime_s=300) as server:
        monkeypatch.setenv("POLYSQL_LOOPBACK_URL", server.base_url)
        cfg, loader, text = compose(_one_cell(tmp_path / "out"))
        helper = threading.Thread(target=release_after_first_scores, daemon=True)
        helper.start()
        try:
            stats, _ = run(cfg, loader, text)
        finally:
            finished.set()
            helper.join()
        requests = server.requests
    assert seen.get("generated_batches") == 1, seen
    assert len(points.pids("generated")) == 5  # 34 questions, 8 per call: 8+8+8+8+2
    assert stats.cells == 1 and stats.items_scored == 34 and stats.generation.generated == 34 == requests
    assert _rows(tmp_path / "out") == [(34, 34)]
    assert GenerationsStore(tmp_path / "out").count("loopback-openai") == 34
    stages = _summary(tmp_path / "out", stats.run_id)["stages"]
    print(json.dumps(stages, indent=1))
    gen, score = stages["generate[loopback-openai]"], stages["score"]
    first_exec = min(v["first_start_s"] for k, v in stages.items() if k.startswith("execute["))
    released = seen["released_at"] - (stats.clock.t0)
    assert first_exec <= score["first_start_s"] < released <= gen["last_end_s"]


@pytest.mark.slow
def test_a_run_killed_mid_cell_keeps_its_stored_batches_and_the_rerun_does_only_the_rest(
        ray_session, tmp_path, monkeypatch):
    """``kill -9`` of a driver held after its first generated batch was scored and stored
    (fault points ``generated`` then ``part_written``): the rerun generates only the other 26
    questions (the model is asked 26 times), scores only them, and every question ends with
    exactly one generation and one score row: no finished work lost or doubled."""
    import os
    import signal
    import subprocess
    import sys

    import duckdb

    from fault_points import Points

    from polysql_ray import faults
    from polysql_ray.pipeline.driver import run
    from polysql_ray.store.generations import GenerationsStore

    from test_generation_stage import REPO, loopback

    out, points = tmp_path / "out", Points(tmp_path / "points")
    points.hold("generated")
    with loopback.LoopbackServer(port=0, lifetime_s=600) as server:
        monkeypatch.setenv("POLYSQL_LOOPBACK_URL", server.base_url)
        args = _one_cell(out)
        env = {**os.environ, faults.ENV: str(points.folder), "PYTHONPATH": str(REPO)}
        env.pop("RAY_ADDRESS", None)
        proc = subprocess.Popen([sys.executable, "-m", "polysql_ray", *args], cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            points.wait("generated", alive=lambda: proc.poll() is None)
            points.wait("part_written", alive=lambda: proc.poll() is None)
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            points.release("generated")
            if proc.poll() is None:
                proc.kill()
        asked_first = server.requests
        assert asked_first == 8 and GenerationsStore(out).count("loopback-openai") == 8
        assert _rows(out) == [(8, 8)]
        cfg, loader, text = compose(args)
        stats, _ = run(cfg, loader, text)
        asked_rerun = server.requests - asked_first
    assert asked_rerun == 26 and stats.generation.generated == 26 and stats.generation.reused == 0
    assert (stats.items_skipped, stats.items_scored) == (8, 26)
    assert _rows(out) == [(34, 34)]
    gens = duckdb.connect().sql(
        f"SELECT count(*), count(DISTINCT key) FROM read_parquet('{out}/generations/**/*.parquet')").fetchall()
    assert gens == [(34, 34)]


@pytest.mark.slow
def test_auto_proves_before_postgres_and_not_before_sqlite(ray_session, tmp_path):
    """auto on a sweep over SQLite and PostgreSQL: proofs only where a server query is saved.
    Verdicts equal those of executing everything (off) except the documented case: a prediction
    proven equal to its gold that its target engine would have failed to run (the quickstart
    gold has one on PostgreSQL: proven `pass`, executed a PostgreSQL error)."""
    from conftest_servers import require_servers

    from polysql_ray.pipeline.driver import run

    require_servers("postgres")
    rows = {}
    for mode in ("auto", "off"):
        out = tmp_path / mode
        cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false",
                                     "dialects=[sqlite,postgres]", f"pipeline.structural_check={mode}",
                                     f"replication.dir={tmp_path / 'replicas'}"])
        stats, _ = run(cfg, loader, text)
        rows[mode] = {r[0]: r[1:] for r in duckdb.connect().sql(
            f"SELECT key, dialect, verdict, basis, pred_status "
            f"FROM read_parquet('{out}/scores/**/*.parquet')").fetchall()}
        if mode == "auto":
            proven = [r for r in rows[mode].values() if r[2] == "proven"]
            assert stats.proven == len(proven) > 0 and {r[0] for r in proven} == {"postgres"}
    assert rows["auto"].keys() == rows["off"].keys()
    differ = [k for k in rows["auto"] if rows["auto"][k][1] != rows["off"][k][1]]
    for k in differ:  # every difference: proven in auto, failed to execute in off
        assert rows["auto"][k][2] == "proven" and rows["off"][k][3] not in ("ok", "skipped"), \
            (rows["auto"][k], rows["off"][k])
    assert len(differ) <= 2
