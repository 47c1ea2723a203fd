"""Resource attacks against the time limit and the memory ceiling: wall and peak RSS per engine.

    PYTHONPATH=. python benchmarks/resource_limits.py [--timeout 5] [--engines sqlite,duckdb,...]
        [--in-process] [--out FILE.md]

Runs every attack of ``tests/hostile_resource_cases.py`` at a ``--timeout`` second limit the way
the execution actor runs it: embedded engines (sqlite, duckdb, clickhouse/chdb) in their child
process (``polysql_ray/engines/child.py``: killed at ``timeout_s + min(timeout_s / 2, 30)`` or past
``limits.memory_mb``), server engines (postgres, mysql on the shared servers; read-only
statements only, their own server-side timeouts and watchdogs). ``--in-process`` runs the
embedded engines in this process instead (the behaviour before the child process; slow: some
attacks run for minutes). Prints one row per attack (engine, attack, limit, wall, wall/limit,
peak RSS of the engine's process, status) and then the slowest attack per engine. Peak RSS is
the child's resident set sampled every 20 ms (embedded) or ``-`` for servers (another process).
"""
from __future__ import annotations

import argparse
import contextlib
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from hostile_resource_cases import RESOURCE_CASES  # noqa: E402

from polysql_ray.engines.base import Limits  # noqa: E402

EMBEDDED = ("sqlite", "duckdb", "clickhouse")
CANARY = "SELECT count(*) FROM singer"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--engines", default="sqlite,duckdb,clickhouse,mysql,postgres")
    ap.add_argument("--in-process", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    engines = args.engines.split(",")

    from conftest_servers import SPIDER, register_server_replication

    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.child import ChildEngine
    from polysql_ray.engines.registry import make_engine
    from polysql_ray.replication.base import replicate

    register_server_replication()
    limits = Limits(timeout_s=args.timeout, row_cap=1000, max_bytes=1_000_000)
    work = Path(tempfile.mkdtemp(prefix="polysql-resource-"))
    src_file = work / "concert_singer.sqlite"
    shutil.copy(SPIDER / "database" / "concert_singer" / "concert_singer.sqlite", src_file)
    src = SourceDatabase("resource", "concert_singer", "sqlite", str(src_file))
    rows = []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        for name in engines:
            cases = [c for c in RESOURCE_CASES if c.engine == name]
            if not cases:
                continue
            location = str(src_file) if name == "sqlite" else replicate(src, name, work / "replicas").location
            child = name in EMBEDDED and not args.in_process
            engine = ChildEngine(name, {}) if child else make_engine(name, **({} if name in EMBEDDED else {"pool_size": 1}))
            stack.callback(engine.close)
            engine.execute(location, CANARY, limits)  # warm: the child is started, the replica opened
            for case in cases:
                if child:
                    engine.peak_rss_mb = 0.0
                t0 = time.perf_counter()
                res = limits.enforce(engine.execute(location, case.sql, limits))
                wall = time.perf_counter() - t0
                if child:
                    rss = f"{engine.peak_rss_mb:.0f}"
                elif name in EMBEDDED:
                    rss = f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} (max so far)"
                else:
                    rss = "-"
                rows.append((name, case.name, args.timeout, wall, rss, res.status.value, (res.error or "")[:70]))
                print(f"{name:10} {case.name:22} {wall:7.2f}s {rss:>8} {res.status.value}", flush=True)
                engine.execute(location, CANARY, limits)  # a killed child restarts here, not in the next row
    lines = ["| engine | attack | limit s | wall s | wall/limit | peak RSS MiB | status |",
             "|---|---|---|---|---|---|---|"]
    for name, case, lim, wall, rss, status, _ in rows:
        lines.append(f"| {name} | {case} | {lim:g} | {wall:.2f} | {wall / lim:.2f}x | {rss} | {status} |")
    lines += ["", "Slowest attack per engine:", "",
              "| engine | attack | limit s | wall s | wall/limit | peak RSS MiB | status |", "|---|---|---|---|---|---|---|"]
    for name in engines:
        mine = [r for r in rows if r[0] == name]
        if mine:
            n, case, lim, wall, rss, status, _ = max(mine, key=lambda r: r[3])
            lines.append(f"| {n} | {case} | {lim:g} | {wall:.2f} | {wall / lim:.2f}x | {rss} | {status} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
