"""Reuse of verdicts (issue 24; :mod:`polysql_ray.pipeline.scheduler`, "Reuse of verdicts"): an
item identical to one already scored this run (question, gold and predicted SQL, execution
results, policy) is not rescored; its row carries the earlier verdict with ``score_s`` 0.0,
and every verdict is what scoring each item on its own gives."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import run
from polysql_ray.pipeline.scheduler import VERDICT_COLUMNS, policy_key, verdict_signature

QUICKSTART = Path(__file__).parents[1] / "polysql_ray/quickstart/data"


def _copy_sweep(tmp_path: Path) -> list[str]:
    """The quickstart sweep plus ``copy``: the flawed model's predictions again, half of them
    written differently (``select``), and half of that half answered with the gold."""
    flawed = [json.loads(line) for line in (QUICKSTART / "flawed.jsonl").read_text().splitlines() if line.strip()]
    gold = {q["question_id"]: q["gold_sql"] for q in
            (json.loads(line) for line in (QUICKSTART / "questions.jsonl").read_text().splitlines() if line.strip())}
    rows = []
    for i, r in enumerate(flawed):
        sql = r["pred_sql"] if i % 2 == 0 else (gold[r["question_id"]] if i % 4 == 1 else r["pred_sql"].replace("SELECT", "select", 1))
        rows.append({"question_id": r["question_id"], "pred_sql": sql})
    path = tmp_path / "copy.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    models = ("[{name:gold,generator:gold},"
              "{name:flawed,generator:replay,predictions:'pkg:polysql_ray.quickstart/data/flawed.jsonl'},"
              f"{{name:copy,generator:replay,predictions:'{path}'}}]")
    return ["+sweep=quickstart", f"sweep.models={models}", "progress=false",
            # one scoring task at a time: an item's twin is always scored before it is submitted
            "pipeline.max_inflight_score=1", "pipeline.driver_scores=false"]


def _rows(out: Path) -> dict:
    cols = ", ".join(VERDICT_COLUMNS)
    con = duckdb.connect()
    got = con.execute(f"SELECT model, dialect, question_id, pred_sql, score_s, {cols} "
                      f"FROM read_parquet('{out}/scores/**/*.parquet')").fetchall()
    return {r[:3]: {"pred_sql": r[3], "score_s": r[4], **dict(zip(VERDICT_COLUMNS, r[5:]))} for r in got}


def test_identical_items_share_a_verdict_and_nothing_else_changes(ray_session, tmp_path):
    over = _copy_sweep(tmp_path)
    stats, table = run(*compose([*over, f"results_dir={tmp_path / 'on'}"]))
    off_stats, off_table = run(*compose([*over, f"results_dir={tmp_path / 'off'}", "pipeline.verdict_cache_size=0"]))
    on, off = _rows(tmp_path / "on"), _rows(tmp_path / "off")
    assert on.keys() == off.keys() and len(on) == 3 * 2 * 34
    assert off_stats.verdicts_reused == 0 and all(r["score_s"] > 0 for r in off.values())
    # every verdict column is what scoring each item itself gives; the EX tables are equal
    strip = {k: {c: v for c, v in r.items() if c not in ("score_s", "gold_exec_s", "pred_exec_s")}
             for k, r in on.items()}
    assert strip == {k: {c: v for c, v in r.items() if c not in ("score_s", "gold_exec_s", "pred_exec_s")}
                     for k, r in off.items()}
    assert table.select(["model", "dialect", "n", "correct"]).to_pylist() == \
        off_table.select(["model", "dialect", "n", "correct"]).to_pylist()
    # reused: exactly the copy's items whose text is flawed's or the gold's, character for
    # character (the lower-cased ones are other SQL: scored), each with its twin's columns
    reused = {k for k, r in on.items() if r["score_s"] == 0.0}
    twins = {}
    for (model, dialect, qid), r in on.items():
        if model == "copy":
            same = [m for m in ("flawed", "gold") if on[(m, dialect, qid)]["pred_sql"] == r["pred_sql"]]
            if same:
                twins[(model, dialect, qid)] = same[0]
    assert twins and len(twins) < 2 * 34  # the lower-cased ones have none
    assert {k for k in reused if k[0] == "copy"} == set(twins)
    for k, m in twins.items():
        twin = on[(m, k[1], k[2])]
        assert {c: on[k][c] for c in VERDICT_COLUMNS} == {c: twin[c] for c in VERDICT_COLUMNS}
    assert stats.verdicts_reused == len(reused)
    summary = json.loads((tmp_path / "on" / "runs" / stats.run_id / "summary.json").read_text())
    assert summary["verdicts_reused"] == len(reused)


def test_a_signature_names_the_execution_results_not_their_sql(ray_session):
    """Two items with the same texts but another result object (an execution evicted from the
    LRU and run again) never share a verdict; the same object, the same policy: they do."""
    import ray

    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.datasets.example import Example, SourceDatabase
    from polysql_ray.generation.base import GenStatus, Prediction
    from polysql_ray.pipeline.plan import Cell, WorkItem

    cell = Cell(key="c", model="m", generator="replay", generator_fingerprint="f", dataset="d", dialect="sqlite",
                target_engine="sqlite", instruction_level="l")
    ex = Example("d", "q1", "db", "?", "", "SELECT 1", "sqlite", "sqlite", SourceDatabase("d", "db", "sqlite", "/x.sqlite"))
    item = WorkItem("k", cell, ex, Prediction("q1", "SELECT 1", GenStatus.OK), "g", None, "p")
    first = {"g": ray.put(1), "p": ray.put(2)}
    again = {"g": first["g"], "p": ray.put(2)}
    policy = policy_key(ComparisonPolicy())
    assert verdict_signature(item, first, policy) == verdict_signature(item, dict(first), policy_key(ComparisonPolicy()))
    assert verdict_signature(item, first, policy) != verdict_signature(item, again, policy)
    # another rule under the same name, or the same rules under another name (the row's column)
    for other in (ComparisonPolicy(order="list"), ComparisonPolicy(name="renamed")):
        assert verdict_signature(item, first, policy) != verdict_signature(item, first, policy_key(other))
    assert verdict_signature(item, {"g": first["g"]}, policy) is None  # a result not at hand: scored
    # a huge prediction is named by length and digest, not kept whole in the LRU; still exact
    big = WorkItem("k", cell, ex, Prediction("q1", "SELECT 1" + " " * 100_000, GenStatus.OK), "g", None, "p")
    big2 = WorkItem("k", cell, ex, Prediction("q1", "SELECT 2" + " " * 100_000, GenStatus.OK), "g", None, "p")
    sig = verdict_signature(big, first, policy)
    assert sig == verdict_signature(big, first, policy) != verdict_signature(big2, first, policy)
    assert all(not (isinstance(v, str) and len(v) > 100_000) for v in sig)


# ----------------------------------------------------------------------- by result identity
def _item(key: str, pred: int, pred_sql: str, target: str = "sqlite") -> dict:
    from polysql_ray.comparison.shape import GoldShape

    return dict(cell_key="c", run_id="r", model="m", generator="g", generator_fingerprint="f", dataset="d",
                dialect=target, source_engine="sqlite", target_engine=target, instruction_level="-",
                question_id="q", db_id="db", gold_sql="SELECT a FROM t", pred_sql=pred_sql, gen_status="ok",
                key=key, _gold=0, _probe=None, _pred=pred, _ties_probe=None, _gen_status="ok", _gold_error=None,
                _gold_dialect="sqlite", _structural="", _flags=(), _shape=GoldShape())


def test_predictions_with_other_text_and_identical_results_are_compared_once(ray_session):
    """``decide`` on one engine's semantics reads the results, not the predicted text
    (``verdict.reads_pred_text``): a scoring process decides such twins once (``actors._DECIDED``).
    Other results, another engine's semantics (which read the text), or reuse off: decided anew."""
    import pyarrow as pa
    import ray

    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.engines.base import ExecStatus, ExecutionResult
    from polysql_ray.pipeline import actors

    score = actors.score_batch._function  # what the driver runs when it scores a batch itself
    policy = ComparisonPolicy()
    refs = [ray.put(ExecutionResult(ExecStatus.OK, pa.table({"a": [1, 2]}))),   # the gold's
            ray.put(ExecutionResult(ExecStatus.OK, pa.table({"a": [2, 1]}))),   # two executions,
            ray.put(ExecutionResult(ExecStatus.OK, pa.table({"a": [2, 1]}))),   # identical results
            ray.put(ExecutionResult(ExecStatus.OK, pa.table({"a": [3, 1]})))]   # another result
    twins = [_item("x", 1, "SELECT a FROM t ORDER BY a DESC"), _item("y", 2, "select a from t order by 1 desc"),
             _item("z", 3, "SELECT a + 1 FROM t")]
    actors._DECIDED.clear()
    rows = {r["key"]: r for r in score(twins, refs, policy, 100).to_pylist()}
    assert len(actors._DECIDED) == 2  # x and y: one decision; z: its own
    assert [rows[k]["verdict"] for k in "xyz"] == ["pass", "pass", "fail"]
    same = [c for c in VERDICT_COLUMNS if c not in ("gold_exec_s", "pred_exec_s")]
    assert {c: rows["x"][c] for c in same} == {c: rows["y"][c] for c in same}
    actors._DECIDED.clear()
    score([_item("x", 1, "SELECT 1", "duckdb"), _item("y", 2, "SELECT 2", "duckdb")], refs, policy, 100)
    from polysql_ray.comparison.verdict import Pair, reads_pred_text

    assert reads_pred_text(Pair("g", "p", "sqlite", "duckdb", "sqlite", "duckdb"))
    assert len(actors._DECIDED) == 2  # across engines the text can flag (integer division ...)
    actors._DECIDED.clear()
    score(twins, refs, policy, 0)
    assert len(actors._DECIDED) == 0
    # a table this process built has no bytes to be named by: never a key
    assert ExecutionResult(ExecStatus.OK, pa.table({"a": [1]})).content_key() is None
