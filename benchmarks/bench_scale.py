"""Driver memory and throughput against sweep size (issue 13 item 6b).

A synthetic sweep of N planned items: M "models" that all replay the gold SQL (the ``gold``
generator under M names) over the first 1000 questions of Spider dev, on dialects sqlite and
duckdb, so N = M x 1000 x 2. Every size runs in a fresh child process with a fresh results
store (replicas are shared between sizes, so only the first size builds them) and prints:

* driver peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss`` of the driver process; Ray's worker
  processes are not included), KiB per planned item, and the driver's RSS sampled over the run
  (so a peak at the end, e.g. reading the store back, is told apart from the plan's size),
* items/s (planned items / wall of ``run``, start-up and shutdown included) and the stages.

A size whose projected driver RSS (the growth per item between the two previous sizes)
exceeds ``--max-rss-gib`` is not run, and a child whose RSS passes it is stopped; the
projection or the RSS reached is printed instead.

    python benchmarks/bench_scale.py [--sizes 10000,100000,1000000] [--max-rss-gib 6] [overrides ...]

Needs the Spider data under ``paths.shared`` (../shared/data/spider).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

QUESTIONS = 1000
DIALECTS = ("sqlite", "duckdb")


def one(size: int, workdir: str, overrides: list[str]) -> dict:
    """Run one sweep of ``size`` items in this process; returns its figures."""
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    per_model = QUESTIONS * len(DIALECTS)
    if size % per_model:
        raise SystemExit(f"--sizes: {size} is not a multiple of {per_model} (questions x dialects)")
    results = os.path.join(workdir, f"results-{size}")
    shutil.rmtree(results, ignore_errors=True)
    cfg, loader, text = compose(["dataset=spider", f"dataset.limit={QUESTIONS}", f"dialects=[{','.join(DIALECTS)}]",
                                 f"results_dir={results}", f"replication.dir={workdir}/replicas",
                                 "progress=false", *overrides])
    cfg["sweep"] = {"name": f"scale-{size}",
                    "models": [{"name": f"gold-{i:04d}", "generator": "gold"} for i in range(size // per_model)],
                    "datasets": None}
    t0 = time.perf_counter()
    stats, _ = run(cfg, loader, text)
    wall = time.perf_counter() - t0
    shutil.rmtree(results, ignore_errors=True)
    return {"items": stats.items_total, "scored": stats.items_scored, "wall_s": round(wall, 1),
            "items_per_s": round(stats.items_total / wall, 1),
            "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "exec_unique": sum(stats.exec_unique.values()), "proven": stats.proven,
            "stages_s": {k: round(v, 1) for k, v in stats.stage_s.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--max-rss-gib", type=float, default=6.0)
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "polysql-bench-scale"))
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args, overrides = ap.parse_known_args()
    if args.one:
        print(json.dumps(one(args.one, args.workdir, overrides)))
        return
    os.makedirs(args.workdir, exist_ok=True)
    print(f"synthetic sweep: gold replayed under many model names, Spider dev first {QUESTIONS} questions, "
          f"dialects {'+'.join(DIALECTS)}; one child process per size")
    print(f"{'items':>9} {'models':>6} {'wall s':>8} {'items/s':>8} {'driver peak RSS MiB':>20} "
          f"{'KiB/item':>9}  stages (s)")
    done: list[dict] = []
    limit_mib = args.max_rss_gib * 1024
    for size in (int(s) for s in args.sizes.split(",")):
        projected = _project(done, size)
        if projected is not None and projected > limit_mib:
            print(f"{size:>9} not run: projected driver RSS {projected / 1024:.1f} GiB > --max-rss-gib "
                  f"{args.max_rss_gib:g} ({_growth(done)})")
            continue
        r, watched_mib = _run_child(size, args.workdir, overrides, limit_mib)
        if r is None:
            print(f"{size:>9} stopped: driver RSS reached {watched_mib / 1024:.1f} GiB > --max-rss-gib {args.max_rss_gib:g}")
            break
        print(f"{r['items']:>9} {size // (QUESTIONS * len(DIALECTS)):>6} {r['wall_s']:>8} {r['items_per_s']:>8} "
              f"{r['driver_peak_rss_mib']:>20} {1024 * r['driver_peak_rss_mib'] / r['items']:>9.1f}  {r['stages_s']}")
        done.append(r)
    if len(done) > 1:
        print(_growth(done))


def _growth(done: list[dict]) -> str:
    if len(done) < 2:
        return f"linear from {done[-1]['items']} items"
    a, b = done[-2], done[-1]
    return (f"growth {a['items']} -> {b['items']} items: "
            f"{1024 * (b['driver_peak_rss_mib'] - a['driver_peak_rss_mib']) / (b['items'] - a['items']):.2f} KiB "
            f"driver RSS per extra item")


def _project(done: list[dict], size: int) -> float | None:
    """Driver RSS (MiB) at ``size`` items: marginal growth of the last two sizes, else linear."""
    if not done:
        return None
    b = done[-1]
    if len(done) == 1:
        return b["driver_peak_rss_mib"] * size / b["items"]
    a = done[-2]
    slope = (b["driver_peak_rss_mib"] - a["driver_peak_rss_mib"]) / (b["items"] - a["items"])
    return b["driver_peak_rss_mib"] + slope * (size - b["items"])


def _run_child(size: int, workdir: str, overrides: list[str], limit_mib: float) -> tuple[dict | None, float]:
    """Run one size in a child process, killing it (and the local Ray cluster it started, via
    Ray's reaper) if its RSS passes ``limit_mib``. Returns (figures or None, peak RSS seen MiB)."""
    proc = subprocess.Popen([sys.executable, __file__, "--one", str(size), "--workdir", workdir, *overrides],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[float] = []  # driver RSS (MiB) every 0.5 s
    while proc.poll() is None:
        samples.append(_rss_mib(proc.pid))
        if samples[-1] > limit_mib:
            proc.kill()
            proc.communicate()
            print(f"{'':>9} driver RSS over the run (MiB, at 10/25/50/75/90% of its samples): {_quantiles(samples)}")
            return None, samples[-1]
        time.sleep(0.5)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{size} items failed (exit {proc.returncode}): {err.strip()[-2000:]}")
    print(f"{'':>9} driver RSS over the run (MiB, at 10/25/50/75/90% of its samples): {_quantiles(samples)}")
    return json.loads(out.strip().splitlines()[-1]), max(samples, default=0.0)


def _quantiles(samples: list[float]) -> list[int]:
    """RSS at fixed fractions of the run's duration (samples are evenly spaced in time)."""
    return [round(samples[min(len(samples) - 1, int(f * len(samples)))]) for f in (0.1, 0.25, 0.5, 0.75, 0.9)] if samples else []


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


if __name__ == "__main__":
    main()
