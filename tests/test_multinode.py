"""Multi-node Ray: the quickstart sweep on a two-node cluster on this machine, then the same sweep
losing its worker node mid-run.

The two nodes (``ray.cluster_utils.Cluster``: a head and one worker, separate raylets and object
stores on loopback) are shaped so that the scheduler has no choice: each offers 3 CPUs and each
engine's execution actor asks for 2 (``engines.<name>.num_cpus=2``), so the sqlite and duckdb
actors cannot share a node; the CPU left on each node takes scoring tasks. Which node ran what
is read back from Ray's own records (GCS actor table and task events), not from the pipeline.

Node loss: once the first scored rows are in the store (the driver held there at a named fault
point, :mod:`polysql_ray.faults`) the worker node is removed and a fresh one added (what
Kubernetes does with a lost pod). The current driver does not restart execution actors, so that
run stops with ``ActorDiedError``; the test then reruns, as a user would, and requires exactly
one row per planned item with the same verdicts as the undisturbed run. A driver
that survives the loss within one run passes the same test without the rerun.

Everything runs in one child process (``python tests/test_multinode.py OUT``) with its own Ray
temp dir, so that its Ray connection never meets the session-wide local cluster of the other
end-to-end tests, and no other driver on the machine joins its cluster.
"""
from __future__ import annotations

import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from polysql_ray.faults import ENV as FAULT_ENV
from tests.fault_points import Points

ROOT = Path(__file__).resolve().parents[1]
SCORE_BATCH = 17  # 204 quickstart items = 12 scoring tasks of 17: items per node = 17 x tasks there
PLANNED = 6 * 34  # quickstart: 3 models x 2 dialects x 34 questions


def _overrides(cluster, results: Path) -> list[str]:
    return ["+sweep=quickstart", f"results_dir={results}", "progress=false", f"ray.address={cluster.address}",
            "engines.sqlite.num_cpus=2", "engines.duckdb.num_cpus=2",
            "pipeline.exec_batch_size=1",  # one actor call per execution: calls per node = executions per node
            "pipeline.max_inflight_exec=1", f"pipeline.score_batch_size={SCORE_BATCH}",
            "pipeline.driver_scores=false",  # every batch a scoring task: tasks per node = batches there
            f"pipeline.flush_rows={SCORE_BATCH}"]  # every scored batch reaches the store at once


def _tasks_per_node(events, nodes: dict[str, str], job: str) -> collections.Counter:
    """Counter of (task or actor-method name, node name) over the Ray task events of one job."""
    node_of: dict[bytes, str] = {}
    name_of: dict[bytes, str] = {}
    for ev in events:
        if ev.job_id.hex() != job:
            continue
        if ev.HasField("task_info"):
            name_of[ev.task_id] = ev.task_info.func_or_class_name
        if ev.HasField("state_updates") and ev.state_updates.node_id:
            node_of[ev.task_id] = nodes.get(ev.state_updates.node_id.hex(), ev.state_updates.node_id.hex())
    return collections.Counter((name_of.get(t, "?"), n) for t, n in node_of.items())


def _placement(nodes: dict[str, str], executions: int, scoring_tasks: int) -> dict:
    """Where this driver's execution actors, executions and scoring tasks ran.

    From the GCS actor table and task-event table (``ray.util.state`` needs the dashboard, which
    ray[data] does not install); only this driver's job counts. Workers report task events about
    every second, so the table is read until it holds the run's ``executions`` actor calls and
    ``scoring_tasks`` scoring tasks (the counts the run itself reports), within a generous bound;
    what it holds then is returned, and the test compares.
    """
    import ray
    from ray._private import state

    job = ray.get_runtime_context().get_job_id()
    deadline = time.monotonic() + 600
    while True:
        per_node = _tasks_per_node(state.state._get_all_task_events(), nodes, job)
        seen_exec = sum(n for (name, _), n in per_node.items() if name == "ExecutionActor.execute_batch")
        seen_score = sum(n for (name, _), n in per_node.items() if name == "score_batch")
        if (seen_exec >= executions and seen_score >= scoring_tasks) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    actors = collections.Counter(nodes.get(a["Address"]["NodeID"], "?") for a in state.actors().values()
                                 if a["ActorClassName"] == "ExecutionActor" and a["JobID"] == job)
    return {"executions": {n: per_node[("ExecutionActor.execute_batch", n)] for n in ("head", "worker")},
            "scoring_tasks": {n: per_node[("score_batch", n)] for n in ("head", "worker")},
            "execution_actors": dict(actors)}


def _stored_parts(results: Path) -> list[str]:
    return glob.glob(f"{results}/scores/**/*.parquet", recursive=True)


def scenario(out: Path) -> dict:
    """Start the two-node cluster; run the sweep undisturbed, then again losing the worker."""
    import ray
    from ray.cluster_utils import Cluster

    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    try:
        worker = cluster.add_node(num_cpus=3)
        cluster.wait_for_nodes()
        nodes = {cluster.head_node.node_id: "head", worker.node_id: "worker"}
        stats, _ = run(*compose(_overrides(cluster, out / "clean")))
        exec_unique = sum(stats.exec_unique.values())
        report = {"clean": {"items_total": stats.items_total, "items_scored": stats.items_scored,
                            "exec_unique": exec_unique,
                            **_placement(nodes, exec_unique, -(-stats.items_total // SCORE_BATCH))}}

        # the same sweep into a new store; the worker node goes away mid-run
        cfg = compose(_overrides(cluster, out / "lost"))
        outcome: dict = {}

        def first_run() -> None:
            try:
                outcome["scored"] = run(*cfg)[0].items_scored
            except Exception as exc:  # noqa: BLE001 — reported to the test
                outcome["error"] = f"{type(exc).__name__}: {exc}"

        # the driver is held at the fault point ``part_written`` (polysql_ray.faults) once its
        # first part file is stored, the node is replaced, then the driver goes on: mid-run by
        # construction, whatever the machine's load
        points = Points(out / "points")
        points.hold("part_written")
        os.environ[FAULT_ENV] = str(points.folder)
        thread = threading.Thread(target=first_run, daemon=True)
        thread.start()
        try:
            points.wait("part_written", alive=thread.is_alive)
            removed_with_parts = len(_stored_parts(out / "lost"))
            finished_before_removal = not thread.is_alive()
            cluster.remove_node(worker)
            cluster.add_node(num_cpus=3)  # the replacement node
            cluster.wait_for_nodes()
        finally:
            points.release("part_written")
        thread.join(timeout=600)
        lost = {"parts_at_removal": removed_with_parts, "finished_before_removal": finished_before_removal,
                "first_run_alive": thread.is_alive(), "first_run": outcome,
                "rows_after_first_run": sum(len(v) for v in _rows(out / "lost").values())}
        if "error" in outcome:
            rerun = run(*cfg)[0]
            lost["rerun"] = {"items_total": rerun.items_total, "items_scored": rerun.items_scored,
                             "items_skipped": rerun.items_skipped}
        report["lost"] = lost
        return report
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_nodes")
    # a private Ray temp dir: the cluster's sessions, sockets and its "current cluster" address
    # file live there, so no other driver on this machine (address="auto") joins it
    ray_tmp = tempfile.mkdtemp(prefix="psr-", dir="/tmp")  # short: Unix socket paths are limited
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "POLYSQL_SHARED": str(out / "no_shared_here"), "RAY_TMPDIR": ray_tmp}
    try:
        proc = subprocess.run([sys.executable, __file__, str(out)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1200)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))
    return out, report


def _rows(results: Path) -> dict[str, list]:
    import duckdb

    rows = duckdb.sql(f"SELECT key, verdict, reason FROM read_parquet('{results}/scores/**/*.parquet')").fetchall()
    out = collections.defaultdict(list)
    for key, verdict, reason in rows:
        out[key].append((verdict, reason))
    return out


@pytest.mark.slow
def test_quickstart_sweep_runs_on_both_nodes(two_nodes):
    out, report = two_nodes
    clean = report["clean"]
    # work ran on both nodes: one execution actor on each, each running executions
    assert clean["execution_actors"] == {"head": 1, "worker": 1}
    assert clean["executions"]["head"] > 0 and clean["executions"]["worker"] > 0
    assert sum(clean["executions"].values()) == clean["exec_unique"]
    # scoring ran where a CPU was left (either node); items scored per node add up to the plan
    items_per_node = {n: k * SCORE_BATCH for n, k in clean["scoring_tasks"].items()}
    assert sum(items_per_node.values()) == clean["items_total"] == clean["items_scored"] == PLANNED
    # exactly one stored row per planned item
    rows = _rows(out / "clean")
    assert len(rows) == PLANNED and all(len(v) == 1 for v in rows.values())


@pytest.mark.slow
def test_losing_a_node_mid_sweep_loses_and_doubles_nothing(two_nodes):
    out, report = two_nodes
    lost = report["lost"]
    # the node went away mid-sweep: a first part file was stored, the sweep was not finished
    assert not lost["finished_before_removal"] and lost["parts_at_removal"] >= 1
    assert not lost["first_run_alive"]
    if "error" in lost["first_run"]:  # no actor restarts: the run stops, naming the lost actor
        assert "ActorDiedError" in lost["first_run"]["error"], lost["first_run"]
        rerun = lost["rerun"]
        assert rerun["items_total"] == PLANNED
        # what the first run stored is kept and skipped; only the rest is scored
        assert 0 < lost["rows_after_first_run"] < PLANNED
        assert rerun["items_skipped"] == lost["rows_after_first_run"]
        assert rerun["items_scored"] == PLANNED - lost["rows_after_first_run"]
    # exactly one row per planned item, with the verdicts of the undisturbed run: the lost node
    # left no trace in any model's score
    rows, clean = _rows(out / "lost"), _rows(out / "clean")
    assert len(rows) == PLANNED and all(len(v) == 1 for v in rows.values())
    assert rows == clean


if __name__ == "__main__":
    print(json.dumps(scenario(Path(sys.argv[1]))))
