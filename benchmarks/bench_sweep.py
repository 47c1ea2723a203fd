"""Benchmark the whole pipeline on the Spider published sweep (issue 2 item 11).

Prints: predictions scored per second, executions per engine (requested vs unique), the share
of wall time spent inside engines, and the time of a second (fully cached) run.

    .venv/bin/python benchmarks/bench_sweep.py [results_dir] [extra overrides ...]

The first run starts from an empty results folder (replication included); the second run of
the same sweep must score nothing.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import run


def main(argv: list[str]) -> None:
    out = argv[0] if argv else tempfile.mkdtemp(prefix="polysql-bench-")
    shutil.rmtree(out, ignore_errors=True)
    overrides = ["+sweep=spider_published", f"results_dir={out}", "progress=false", *argv[1:]]
    cfg, loader, yaml_text = compose(overrides)
    t0 = time.perf_counter()
    stats, table = run(cfg, loader, yaml_text)
    wall = time.perf_counter() - t0
    engine_s = sum(stats.engine_s.values())
    print(f"sweep: {stats.cells} cells, {stats.items_scored} predictions scored in {wall:.1f} s "
          f"-> {stats.items_scored / wall:.1f} predictions/s")
    for stage, s in stats.stage_s.items():
        print(f"  stage {stage:<14} {s:7.1f} s")
    for engine in sorted(stats.exec_requested):
        print(f"  {engine:<8} executions requested {stats.exec_requested[engine]:6d}  unique {stats.exec_unique[engine]:6d}"
              f"  engine time {stats.engine_s.get(engine, 0.0):6.1f} s")
    print(f"  share of wall time inside engines: {100 * engine_s / wall:.1f}% (engine time summed over actors)")
    print(f"  replicas: {stats.replicas} in {stats.replicate_s:.1f} s")
    t0 = time.perf_counter()
    stats2, _ = run(cfg, loader, yaml_text)
    print(f"rerun: scored {stats2.items_scored}, skipped {stats2.items_skipped} in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
