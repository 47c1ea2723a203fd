"""Benchmark: queries/second per embedded engine on Spider dev gold SQL, and replication
seconds per Spider database (SQLite -> DuckDB).

Usage: ``python benchmarks/bench_engines.py [--limit N] [--out DIR]``. Reads
``<repo>/../shared/data/spider`` (or $POLYSQL_SHARED/spider); prints figures, asserts nothing.
Gold SQL is SQLite SQL; on DuckDB it runs on the replica as-is, so its error count is a
rough measure of dialect differences, not a correctness figure.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines import Limits, make_engine  # noqa: E402
from polysql_ray.replication import replicate  # noqa: E402


def main() -> None:
    """Print replication seconds per DB, then queries/second and status counts per engine."""
    shared = Path(os.environ.get("POLYSQL_SHARED", Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    ap.add_argument("--out", default=None, help="replicas dir (default: a temp dir)")
    args = ap.parse_args()
    spider = shared / "spider"
    if not (spider / "dev.json").exists():
        print(f"Spider not found under {spider}")
        return
    dev = json.loads((spider / "dev.json").read_text())
    if args.limit:
        dev = dev[: args.limit]
    out = Path(args.out or tempfile.mkdtemp(prefix="polysql_bench_"))
    locations = {"sqlite": {}, "duckdb": {}}
    print("replication sqlite -> duckdb (seconds, fresh build):")
    total = 0.0
    for d in sorted((spider / "database").iterdir()):
        f = d / f"{d.name}.sqlite"
        if not f.exists():
            continue
        t0 = time.perf_counter()
        rep = replicate(SourceDatabase("spider", d.name, "sqlite", str(f)), "duckdb", out, force=True)
        dt = time.perf_counter() - t0
        total += dt
        locations["sqlite"][d.name] = str(f)
        locations["duckdb"][d.name] = rep.location
        rows = sum(c.rows for c in rep.manifest.checksums.values())
        print(f"  {d.name:32s} {dt:6.3f}s  {rows:7d} rows")
    print(f"  total {total:.2f}s")
    limits = Limits(timeout_s=10.0, row_cap=100_000)
    for name in ("sqlite", "duckdb"):
        engine = make_engine(name)
        counts = collections.Counter()
        n, t0 = 0, time.perf_counter()
        for ex in dev:
            loc = locations[name].get(ex["db_id"])
            if loc is None:
                counts["missing_db"] += 1
                continue
            r = engine.execute(loc, ex["query"], limits)
            counts[r.status.value] += 1
            n += 1
        dt = time.perf_counter() - t0
        engine.close()
        print(f"{name}: {n} gold queries in {dt:.2f}s = {n / dt:.1f} queries/s; {dict(counts)}")


if __name__ == "__main__":
    main()
