"""One Ray node vs two Ray nodes on this machine: the scheduling overhead (issue 13 item 6c).

Both clusters are ``ray.cluster_utils.Cluster`` instances on loopback with the same logical
CPUs (5): one node with 5, or a head with 2 plus a worker with 3. Each engine's execution actor
asks for 2 CPUs, so on two nodes the sqlite and duckdb actors land on different nodes (and
result sets cross object stores to the scoring tasks); on one node they share it. The cores are
the same two either way, so no speed-up is expected: the difference in wall time is what the
second raylet and object store cost.

The sweep: ``--models`` names for the gold generator over the first ``--questions`` questions of
Spider dev on sqlite and duckdb. On each cluster an untimed warm-up sweep (one model) runs first:
it builds the replicas (once, shared by every layout) and starts the workers, so both layouts are
timed warm (before, only the first layout got a warm-up, and two nodes were timed cold against
one node warm).

    python benchmarks/bench_nodes.py [--models 2] [--questions 1000] [--repeats 1]

Prints per layout and repeat: cluster start-up (s), the driver's wall (s), items/s, its stages,
and where the execution actors ran.
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import tempfile
import time

LAYOUTS = {"one node": [5], "two nodes": [2, 3]}


def sweep(cluster, workdir: str, models: int, questions: int, tag: str):
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    results = os.path.join(workdir, f"results-{tag}")
    shutil.rmtree(results, ignore_errors=True)
    cfg, loader, text = compose(["dataset=spider", f"dataset.limit={questions}", "dialects=[sqlite,duckdb]",
                                 f"results_dir={results}", f"replication.dir={workdir}/replicas", "progress=false",
                                 f"ray.address={cluster.address}", "engines.sqlite.num_cpus=2",
                                 "engines.duckdb.num_cpus=2"])
    cfg["sweep"] = {"name": "nodes", "datasets": None,
                    "models": [{"name": f"gold-{i}", "generator": "gold"} for i in range(models)]}
    t0 = time.perf_counter()
    stats, _ = run(cfg, loader, text)
    wall = time.perf_counter() - t0
    shutil.rmtree(results, ignore_errors=True)
    return stats, wall


def one_layout(cpus: list[int], workdir: str, models: int, questions: int, tag: str) -> dict:
    import ray
    from ray._private import state
    from ray.cluster_utils import Cluster

    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus[0], "include_dashboard": False})
    try:
        names = {cluster.head_node.node_id: "head"}
        for i, n in enumerate(cpus[1:]):
            names[cluster.add_node(num_cpus=n).node_id] = f"worker{i + 1}"
        cluster.wait_for_nodes()
        startup = time.perf_counter() - t0
        sweep(cluster, workdir, 1, questions, "warm-up")
        before = set(state.actors()) if ray.is_initialized() else set()
        stats, wall = sweep(cluster, workdir, models, questions, tag)
        placed = collections.Counter(names.get(a["Address"]["NodeID"], "?") for k, a in state.actors().items()
                                     if a["ActorClassName"] == "ExecutionActor" and k not in before)
        return {"startup_s": startup, "wall_s": wall, "items": stats.items_total,
                "stages": {k: round(v, 1) for k, v in stats.stage_s.items()}, "actors": dict(placed)}
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=2)
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "polysql-bench-nodes"))
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    # a private Ray temp dir (short: Unix socket paths are limited): no other driver on the
    # machine (address="auto") joins these clusters
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="psr-", dir="/tmp")
    print(f"sweep: {args.models} gold models x Spider dev first {args.questions} questions x sqlite+duckdb; "
          f"5 logical CPUs either way, {os.cpu_count()} cores on this machine")
    walls: dict[str, list[float]] = collections.defaultdict(list)
    for rep in range(args.repeats):
        for name, cpus in LAYOUTS.items():
            r = one_layout(cpus, args.workdir, args.models, args.questions, f"{rep}")
            walls[name].append(r["wall_s"])
            print(f"{name:<10} repeat {rep}: start-up {r['startup_s']:5.1f} s | wall {r['wall_s']:6.1f} s | "
                  f"{r['items'] / r['wall_s']:7.1f} items/s | execution actors on {r['actors']} | stages {r['stages']}")
    shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)
    one, two = (min(walls[k]) for k in LAYOUTS)
    print(f"best wall: one node {one:.1f} s, two nodes {two:.1f} s -> two-node overhead "
          f"{two - one:+.1f} s ({100 * (two - one) / one:+.0f}%)")


if __name__ == "__main__":
    main()
