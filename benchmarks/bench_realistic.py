"""The realistic SQLite sweep against the peer's per-set loop (issue 24 item 1).

Like ``bench_peer.py`` (whose whole-tree measurement it uses: wall, CPU of the tree, summed RSS
and PSS at the peak, the largest process), but on 21 *distinct* prediction sets with real
models' failure mix (:mod:`realistic_sets`: the four shared sets, SpiderMan's MySQL gold
replayed on SQLite, and 16 deterministic mutations), over the 972 Spider dev questions whose
database the mirror has; ``--with-wta-1`` adds the other 62 (all 1,034, as a measurement on the
full release has them) on :func:`realistic_sets.build_wta_1`, real players and matches with a
synthesized half-million-row ``rankings``: a sweep where SQLite execution, not scoring, is the
long pole. Printed before the table: items, executions requested (gold +
prediction per item, what the peer runs), unique executions (distinct ``(db_id, SQL)`` after
whitespace folding: what a cache can at best save), and per contender the failing share (items
not ``pass``). After each run of ours: per-item scoring cost by verdict (``score_s`` of the
results store: mean, median, p95, total) and the stage clock (``runs/<id>/summary.json``,
seconds from the process start). Runs are paired: in each repeat every contender runs once,
one after the other, with the load average printed beside it.

    python benchmarks/bench_realistic.py --peer /tmp/test-suite-sql-eval --peer-python PY \
        [--baseline REF [--baseline-python PY]] [--variant OVERRIDES ...] [--repeats 2] [--with-wta-1] [-- overrides for all of ours]

Nothing of the peer is part of this project: check it out anywhere outside the repository.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_peer as bp  # noqa: E402  (the whole-tree measurement and the peer's formats)
import realistic_sets  # noqa: E402

REPO = bp.REPO


def peer_files(shared: Path, keep: list[int], sets: list[tuple[str, Path]], work: Path) -> dict[str, Path]:
    gold = [line.rstrip("\r\n") for line in (shared / "data/spider/dev_gold.sql").read_text().splitlines()]
    out = {"__gold__": work / "gold.txt"}
    out["__gold__"].write_text("".join(gold[i] + "\n" for i in keep))
    for name, path in sets:
        lines = path.read_text().splitlines()
        out[name] = work / f"peer-pred-{name}.txt"
        out[name].write_text("".join((lines[i].strip() or "SELECT") + "\n" for i in keep))
    return out


def run_peer(args, shared: Path, keep: list[int], work: Path, sets: list[tuple[str, Path]]) -> dict:
    files = peer_files(shared, keep, sets, work)
    return bp.peer_loop(args, shared, len(keep), work, files["__gold__"], [(name, files[name]) for name, _ in sets])


def our_argv(python: str, db_ids: list[str], sets: list[tuple[str, Path]], results: Path, extra: list[str]):
    models = ",".join(f"{{name:'{name}',generator:replay,predictions:'{path}'}}" for name, path in sets)
    return [python, "-m", "polysql_ray", "dataset=spider", f"dataset.db_ids=[{','.join(db_ids)}]",
            "dialects=[sqlite]", f"results_dir={results}", f"replication.dir={results}/replicas", "progress=false",
            "sweep.name=bench_realistic", f"sweep.models=[{models}]", *extra]


def our_scores(results: Path) -> dict:
    """{(model, question_id): (verdict, reason, flags)} and the score_s of each verdict."""
    import pyarrow.parquet as pq

    out, cost = {}, {}
    for part in sorted((results / "scores").rglob("*.parquet")):
        for row in pq.read_table(part, columns=["model", "question_id", "verdict", "reason", "flags",
                                                "score_s"]).to_pylist():
            out[(row["model"], row["question_id"])] = (row["verdict"], row["reason"], row["flags"])
            cost.setdefault("pass" if row["verdict"] == "pass" else "fail" if row["verdict"] == "fail"
                            else "other", []).append(row["score_s"])
    return {"verdicts": out, "cost": cost}


def stage_clock(results: Path, t_start: float) -> str:
    runs = sorted((results / "runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return "(no summary.json)"
    summary = json.loads(runs[-1].read_text())
    stages = summary.get("stages") or summary.get("clock") or {}
    if not stages:
        for v in summary.values():
            if isinstance(v, dict) and any(isinstance(x, dict) and "first_start" in x for x in v.values()):
                stages = v
    first = min((s["first_start_s"] for s in stages.values()), default=0.0)
    offset = 0.0
    import datetime as dt
    for s in stages.values():  # seconds from the process start, not the clock's own t0
        offset = dt.datetime.fromisoformat(s["first_start"]).timestamp() - s["first_start_s"] - t_start
        break
    return "  ".join(f"{k} +{v['first_start_s'] + offset:.1f}->+{v['last_end_s'] + offset:.1f}"
                     for k, v in sorted(stages.items(), key=lambda kv: kv[1]["first_start_s"])) + \
        f"   (clock t0 = process start +{offset:.1f} s; first stage at +{first + offset:.1f})"


def cost_line(cost: dict) -> str:
    import numpy as np

    parts = []
    for k in ("pass", "fail", "other"):
        every = np.asarray(cost.get(k, []), float) * 1000
        v = every[every > 0]  # 0.0: a verdict reused from an identical item, not scored
        if len(v):
            parts.append(f"{k} n={len(v)} scored (+{len(every) - len(v)} reused) mean {v.mean():.2f} ms, "
                         f"median {np.median(v):.2f}, p95 {np.percentile(v, 95):.2f}, total {v.sum() / 1000:.1f} s")
    return "; ".join(parts)


def run_ours(label: str, checkout: Path, args, db_ids, work: Path, sets, extra) -> dict:
    results = work / f"results-{label}"
    shutil.rmtree(results, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=str(checkout), POLYSQL_SHARED=str(Path(args.shared).resolve()))
    env.pop("RAY_ADDRESS", None)
    t_start = time.time()
    python = args.baseline_python if label == "baseline" and args.baseline_python else sys.executable
    r = bp.measure(our_argv(python, db_ids, sets, results, extra), env, str(checkout),
                   work / f"{label}.log", args.sample_s)
    if r["exit"] != 0:
        raise SystemExit(f"{label} failed (exit {r['exit']}): {(work / f'{label}.log').read_text()[-3000:]}")
    r.update(our_scores(results))
    r["correct"] = sum(v[0] == "pass" for v in r["verdicts"].values())
    r["scored"] = len(r["verdicts"])
    r["clock"] = stage_clock(results, t_start)
    return r


def unique_executions(shared: Path, keep: list[int], sets) -> tuple[int, int]:
    dev = json.loads((shared / "data/spider/dev.json").read_text())
    gold = [line.split("\t")[0] for line in (shared / "data/spider/dev_gold.sql").read_text().splitlines()]
    seen = {(dev[i]["db_id"], " ".join(gold[i].split())) for i in keep}
    for _, path in sets:
        lines = path.read_text().splitlines()
        seen |= {(dev[i]["db_id"], " ".join(lines[i].split())) for i in keep}
    return 2 * len(keep) * len(sets), len(seen)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", help="checkout of test-suite-sql-eval (outside this repository)")
    ap.add_argument("--peer-python", default=sys.executable)
    ap.add_argument("--baseline", help="git ref of this project to run beside (e.g. the commit before a change)")
    ap.add_argument("--baseline-python", help="interpreter of the baseline (another venv: e.g. other "
                                              "dependency versions); default this one")
    ap.add_argument("--no-ours", action="store_true")
    ap.add_argument("--ours", default=str(REPO), help="checkout to run as ours (default this one; e.g. a "
                                                      "`git archive HEAD` copy, so later edits are not measured)")
    ap.add_argument("--variant", action="append", default=[], metavar="OVERRIDES")
    ap.add_argument("--sets", type=int, default=21, help="first N of the 21 distinct sets")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--sample-s", type=float, default=0.2)
    ap.add_argument("--shared", default=os.environ.get("POLYSQL_SHARED", str(REPO.parent / "shared")))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--with-wta-1", action="store_true", help="all 1,034 questions: wta_1 (missing from the "
                                                               "mirror) on the stand-in of realistic_sets.build_wta_1")
    args, extra = ap.parse_known_args()
    sys.stdout.reconfigure(line_buffering=True)
    extra = [e for e in extra if e != "--"]
    if ctypes.CDLL(None, use_errno=True).prctl(bp.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: whole-tree CPU cannot be measured")
    shared = Path(args.shared).resolve()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="polysql-bench-realistic-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.with_wta_1:
        shared = realistic_sets.shared_with_wta_1(shared, work)
        args.shared = str(shared)
    keep, db_ids = bp.spider_subset(shared)
    sets = realistic_sets.build(shared, work / "sets")[:args.sets]
    requested, unique = unique_executions(shared, keep, sets)
    print(f"sweep: {len(sets)} distinct prediction sets x {len(keep)} Spider dev questions = "
          f"{len(sets) * len(keep)} items, dialect sqlite; executions requested {requested}, "
          f"unique {unique}; sets: {', '.join(n for n, _ in sets)}")
    print(f"machine: {os.cpu_count()} cores; /proc sampled every {args.sample_s} s; work folder {work}")
    contenders = bp.contender_list(
        args, work, lambda: run_peer(args, shared, keep, work, sets),
        lambda label, checkout, more: run_ours(label, checkout, args, db_ids, work, sets, more), extra)
    header = (f"{'':<22} {'wall s':>8} {'vs 1st':>7} {'CPU s':>8} {'tree RSS':>9} {'tree PSS':>9} "
              f"{'largest':>8}  {'largest process':<28} {'procs':>5} {'EX correct/scored'}")
    results: dict[str, list[dict]] = {}
    for rep in range(args.repeats):
        print(f"repeat {rep}  (MiB for memory; 'vs 1st' = first contender's wall / this wall)\n{header}")
        first = None
        for label, fn in contenders:
            load = os.getloadavg()
            r = fn()
            results.setdefault(label, []).append(r)
            first = first or r["wall_s"]
            print(bp.row(label, r, first), flush=True)
            fail = 1 - r["correct"] / max(1, r["scored"])
            print(f"{'':<22} load avg {load[0]:.1f}/{load[1]:.1f} before, {os.getloadavg()[0]:.1f} after; "
                  f"failing share {fail:.1%}; at the peak (MiB): {bp.at_peak(r['at_peak'])}")
            print(f"{'':<22} CPU s by process: {bp.cpu_by_name(r)}")
            if "cost" in r:
                print(f"{'':<22} scoring cost per item: {cost_line(r['cost'])}")
                print(f"{'':<22} stage clock: {r['clock']}")
    ours = [lbl for lbl in results if lbl.startswith("ours")]
    for other in ours[1:]:
        a, b = (results[lbl][-1]["verdicts"] for lbl in (ours[0], other))
        for what, idx in (("verdicts", 0), ("(verdict, reason, flags)", slice(None))):
            diff = sorted(k for k in a.keys() | b.keys() if (a.get(k) or ())[idx] != (b.get(k) or ())[idx])
            print(f"{what}: {len(diff)} of {len(a.keys() | b.keys())} (model, question) differ between "
                  f"{ours[0]} and {other}" + (f", e.g. {[(k, a.get(k), b.get(k)) for k in diff[:4]]}" if diff else ""))
    bp.print_best(args.repeats, results, work)


if __name__ == "__main__":
    main()
