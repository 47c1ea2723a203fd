"""Throughput of the server engines on Spider gold SQL, and connection reuse.

Usage: ``.venv/bin/python benchmarks/bench_servers.py [--dbs N] [--repeat R]``

Replicates the first N Spider dev databases (SQLite) into PostgreSQL and MariaDB (reused when
already verified), then runs every gold query on those databases R times through each
engine, single-threaded, and prints queries/second, status counts and connections opened vs
queries run. (Spider's gold SQL is SQLite; on the servers some fail - that is the dialect gap,
counted, not an error of the benchmark. PostgreSQL folds unquoted identifiers to lower case.)
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest_servers import SPIDER, register_server_replication  # noqa: E402


def main() -> None:
    """Run the benchmark and print one line per engine."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dbs", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--replicas", default="/tmp/polysql_bench_replicas")
    a = ap.parse_args()
    register_server_replication()
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.base import Limits
    from polysql_ray.engines.mysql import MySQLEngine
    from polysql_ray.engines.postgres import PostgresEngine
    from polysql_ray.replication.base import replicate

    dev = json.loads((SPIDER / "dev.json").read_text())
    dbs = [d for d in dict.fromkeys(q["db_id"] for q in dev)
           if (SPIDER / "database" / d / f"{d}.sqlite").exists()][: a.dbs]
    for cls in (PostgresEngine, MySQLEngine):
        eng = cls()
        locs = {}
        t0 = time.perf_counter()
        for d in dbs:
            src = SourceDatabase("spider", d, "sqlite", str(SPIDER / "database" / d / f"{d}.sqlite"))
            locs[d] = replicate(src, eng.name, a.replicas).location
        rep_s = time.perf_counter() - t0
        qs = [(locs[q["db_id"]], q["query"]) for q in dev if q["db_id"] in locs] * a.repeat
        counts = collections.Counter()
        t0 = time.perf_counter()
        for loc, sql in qs:
            counts[eng.execute(loc, sql, Limits(timeout_s=10, row_cap=100_000)).status.value] += 1
        dt = time.perf_counter() - t0
        st = eng.pool.stats.as_dict()
        print(f"{eng.name:9s} dbs={len(dbs)} queries={len(qs)} {len(qs) / dt:8.1f} q/s  "
              f"replicate/reuse {rep_s:.2f}s  connections opened={st['opened']} "
              f"reused={st['reused']}  statuses={dict(counts)}")
        eng.close()


if __name__ == "__main__":
    main()
