"""Multi-node Ray: the quickstart sweep on a two-node cluster on this machine.

The two nodes (``ray.cluster_utils.Cluster``: a head and one worker, separate raylets and object
stores on loopback) are shaped so that the scheduler has no choice: each offers 3 CPUs and each
engine's execution actor asks for 2 (``engines.<name>.num_cpus=2``), so the sqlite and duckdb
actors cannot share a node; the CPU left on each node takes scoring tasks. Which node ran what is read back from Ray's own records (GCS actor table and task events),
not from the pipeline.

The scenario runs in a child process (``python tests/test_multinode.py OUT``) with its own Ray
temp dir, so that its Ray connection never meets the session-wide local cluster of the other
end-to-end tests, and no other driver on the machine joins its cluster.

Not tested here: losing a node mid-sweep. On the current driver the run stops with
``ActorDiedError`` (execution actors are not restarted) and a rerun on the remaining nodes
completes the store; surviving the loss within one run needs actor restarts.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCORE_BATCH = 17  # 204 quickstart items = 12 scoring tasks of 17: items per node = 17 x tasks there


def scenario(out: Path) -> dict:
    """Start the two-node cluster, run the sweep through the driver, report placement."""
    import ray
    from ray._private import state
    from ray.cluster_utils import Cluster

    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3, "include_dashboard": False})
    try:
        worker = cluster.add_node(num_cpus=3)
        cluster.wait_for_nodes()
        nodes = {cluster.head_node.node_id: "head", worker.node_id: "worker"}
        cfg, loader, text = compose([
            "+sweep=quickstart", f"results_dir={out}", "progress=false", f"ray.address={cluster.address}",
            "engines.sqlite.num_cpus=2", "engines.duckdb.num_cpus=2",
            "pipeline.exec_batch_size=1",  # one actor call per execution: calls per node = executions per node
            f"pipeline.score_batch_size={SCORE_BATCH}"])
        stats, _ = run(cfg, loader, text)
        # every task's node, from the GCS task-event table (ray.util.state needs the
        # dashboard, which ray[data] does not install)
        # dashboard, which ray[data] does not install). Workers report events every second or
        # so: read until two reads a few seconds apart agree.
        # only this driver's job: a stray driver that joins the newest local cluster
        # (address="auto") must not count
        job = ray.get_runtime_context().get_job_id()
        per_node, previous = None, {}
        for _ in range(20):
            per_node = _tasks_per_node(state.state._get_all_task_events(), nodes, job)
            if per_node == previous:
                break
            previous = per_node
            time.sleep(3)
        actors = collections.Counter(nodes.get(a["Address"]["NodeID"], "?") for a in state.actors().values()
                                     if a["ActorClassName"] == "ExecutionActor" and a["JobID"] == job)
        return {
            "nodes": sorted(nodes.values()),
            "items_total": stats.items_total, "items_scored": stats.items_scored,
            "exec_unique": sum(stats.exec_unique.values()),
            "executions": {n: per_node[("ExecutionActor.execute_batch", n)] for n in ("head", "worker")},
            "scoring_tasks": {n: per_node[("score_batch", n)] for n in ("head", "worker")},
            "execution_actors": dict(actors),
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


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


@pytest.mark.slow
def test_quickstart_sweep_on_two_nodes(tmp_path):
    import duckdb

    # a private Ray temp dir: the cluster's sessions, sockets and its "current cluster" address
    # file live there, so no other driver on this machine (address="auto") joins it
    ray_tmp = tempfile.mkdtemp(prefix="psr-", dir="/tmp")  # short: Unix socket paths are limited
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "POLYSQL_SHARED": str(tmp_path / "no_shared_here"), "RAY_TMPDIR": ray_tmp}
    try:
        proc = subprocess.run([sys.executable, __file__, str(tmp_path / "results")], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=900)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(json.dumps(report, indent=1))

    # work ran on both nodes: one execution actor on each, each running executions
    assert report["execution_actors"] == {"head": 1, "worker": 1}
    assert report["executions"]["head"] > 0 and report["executions"]["worker"] > 0
    assert sum(report["executions"].values()) == report["exec_unique"]
    # scoring ran where a CPU was left (either node); items scored per node add up to the plan
    items_per_node = {n: k * SCORE_BATCH for n, k in report["scoring_tasks"].items()}
    assert sum(items_per_node.values()) == report["items_total"] == 6 * 34
    # exactly one stored row per planned item
    rows = duckdb.sql(f"SELECT key, count(*) AS n FROM read_parquet('{tmp_path}/results/scores/**/*.parquet') "
                      "GROUP BY key").fetchall()
    assert len(rows) == report["items_scored"] == report["items_total"]
    assert {n for _, n in rows} == {1}


if __name__ == "__main__":
    print(json.dumps(scenario(Path(sys.argv[1]))))
