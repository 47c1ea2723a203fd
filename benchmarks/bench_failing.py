"""Per-item cost of the result-set comparison, passing vs failing items, on real results
(issue 24 item 2), and a before/after identity check of every comparison.

``collect``: runs the gold, its probe and every distinct prediction of the realistic sets
(:mod:`realistic_sets`) on the Spider dev SQLite databases with this project's SQLite engine,
and pickles the ``(gold, pred, shape, probe)`` inputs of :func:`compare` (one per distinct
``(question, prediction)`` whose both sides ran).

``score``: loads them and times :func:`polysql_ray.comparison.result_set.compare` on each
(best of ``--repeats``), with whatever ``polysql_ray`` is on ``PYTHONPATH`` (so a baseline
checkout and this one score the very same inputs), and writes every ``Comparison`` (match,
reason, flags, diff) as JSON lines beside the timings.

``paired INPUTS --baseline DIR``: both checkouts' ``compare`` in one process, alternately on
each item (load hits both alike), outputs checked equal; the same cost table.

``diff A B``: how many comparisons differ between two ``score`` outputs, and the cost table
of each (mean/median/p95/total ms by outcome, ``match`` vs not).

``collect-decide`` / ``paired-decide``: the same for the whole per-item decision,
:func:`polysql_ray.comparison.verdict.decide` (what the scoring task times as ``score_s``):
every item of the realistic sets (972 questions x 21 sets, a failed execution included) with
its gold, gold probes, prediction, :func:`~polysql_ray.comparison.shape.analyze_prediction`
shape and the prediction's cut and ties probes, as the planner requests them; ``paired-decide``
times both checkouts' ``decide`` alternately per item inside one canonical scope per question
(as a scoring batch shares a gold result), checks (verdict, reason, basis, flags, diff, detail)
equal, and prints the cost table by verdict (``pass`` / ``fail`` / other), plus the time spent
in ``pred_nondeterministic`` alone.

    PYTHONPATH=. python benchmarks/bench_failing.py collect-decide --out /tmp/decide-inputs.pkl
    PYTHONPATH=. python benchmarks/bench_failing.py paired-decide /tmp/decide-inputs.pkl --baseline OLD

    PYTHONPATH=. python benchmarks/bench_failing.py collect --out /tmp/cmp-inputs.pkl
    PYTHONPATH=OLD python benchmarks/bench_failing.py score /tmp/cmp-inputs.pkl --out old.jsonl
    PYTHONPATH=. python benchmarks/bench_failing.py score /tmp/cmp-inputs.pkl --out new.jsonl
    python benchmarks/bench_failing.py diff old.jsonl new.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _realistic(args):
    """``(questions kept, dev.json, gold SQL per question, [(set name, path)], run, cache)`` of
    the realistic sets; ``run(db, sql)`` executes once per ``(db, sql)`` on SQLite (limits
    applied; None for no SQL), ``cache`` holds the executions."""
    import bench_peer as bp
    import realistic_sets

    from polysql_ray.engines.base import Limits
    from polysql_ray.engines.registry import make_engine

    shared = Path(args.shared).resolve()
    keep, _ = bp.spider_subset(shared)
    dev = json.loads((shared / "data/spider/dev.json").read_text())
    gold = [line.split("\t")[0] for line in (shared / "data/spider/dev_gold.sql").read_text().splitlines()]
    sets = realistic_sets.build(shared, Path(args.out).parent / "sets")
    eng, limits = make_engine("sqlite"), Limits(timeout_s=10)
    cache: dict = {}

    def run(db: str, sql: str | None):
        if sql is None:
            return None
        if (db, sql) not in cache:
            path = str(shared / f"data/spider/database/{db}/{db}.sqlite")
            cache[(db, sql)] = limits.enforce(eng.execute(path, sql, limits))
        return cache[(db, sql)]
    return keep, dev, gold, sets, run, cache


def collect(args) -> None:
    from polysql_ray.comparison.shape import analyze_gold

    keep, dev, gold, sets, run, cache = _realistic(args)
    items, seen = [], set()
    lines = {name: p.read_text().splitlines() for name, p in sets}
    for i in keep:
        db = dev[i]["db_id"]
        shape = analyze_gold(gold[i], "sqlite")
        g = run(db, gold[i])
        probe = run(db, shape.probe_sql) if (g.ok and shape.probe_sql) else None
        for name, _ in sets:
            sql = lines[name][i].strip()
            if not sql or (i, sql) in seen:
                continue
            seen.add((i, sql))
            p = run(db, sql)
            if g.ok and p.ok:
                items.append((i, sql, g.table, p.table, shape, probe.table if probe is not None and probe.ok else None))
    with open(args.out, "wb") as f:
        pickle.dump(items, f)
    print(f"{len(items)} comparisons from {len(cache)} executions -> {args.out}")


def collect_decide(args) -> None:
    from polysql_ray.comparison.shape import analyze_gold, analyze_prediction

    keep, dev, gold, sets, run, cache = _realistic(args)
    items, shapes = [], {}
    lines = {name: p.read_text().splitlines() for name, p in sets}
    for i in keep:
        db = dev[i]["db_id"]
        shape = analyze_gold(gold[i], "sqlite")
        g = run(db, gold[i])
        probe = run(db, shape.probe_sql) if shape.probe_sql else None
        ties = run(db, shape.ties_probe_sql) if shape.ties_probe_sql else None
        for name, _ in sets:
            sql = lines[name][i].strip()
            pred = pshape = pprobe = pties = None
            if sql:
                pred = run(db, sql)
                if sql not in shapes:
                    shapes[sql] = analyze_prediction(sql, "sqlite")
                pshape = shapes[sql]
                if not pshape.static:
                    pprobe, pties = run(db, pshape.cut_probe_sql), run(db, pshape.ties_probe_sql)
            items.append({"q": i, "model": name, "gold_sql": gold[i], "pred_sql": sql, "gen": "ok" if sql else "no_sql",
                          "gold": g, "probe": probe, "ties": ties, "pred": pred, "shape": shape,
                          "pred_shape": pshape, "pred_probe": pprobe, "pred_ties": pties})
    with open(args.out, "wb") as f:
        pickle.dump(items, f)
    print(f"{len(items)} items from {len(cache)} executions -> {args.out}")


def _baseline_verdict(checkout: Path):
    """The ``verdict`` module of another checkout with its comparison package (normalize,
    policy, shape, result_set, verdict), imported beside this one under ``_baseline_dec``."""
    import importlib
    import tempfile

    pkg = Path(tempfile.mkdtemp(prefix="bench-decide-")) / "_baseline_dec"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("normalize", "policy", "shape", "result_set", "verdict"):
        text = (checkout / f"polysql_ray/comparison/{name}.py").read_text()
        (pkg / f"{name}.py").write_text(text.replace("polysql_ray.comparison.", "_baseline_dec."))
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module("_baseline_dec.verdict"), importlib.import_module("_baseline_dec.normalize")


def _cost_row(label: str, before_s: list[float], after_s: list[float]) -> str:
    """One row of the paired cost tables: n, then mean/median/p95 ms and total s before and
    after, and the speed-up of the totals."""
    import numpy as np

    a, b = np.asarray(before_s) * 1000, np.asarray(after_s) * 1000
    return (f"{label} {len(a):6d} | {a.mean():12.3f} {np.median(a):7.3f} {np.percentile(a, 95):7.3f} "
            f"{a.sum() / 1000:8.2f} | {b.mean():11.3f} {np.median(b):7.3f} {np.percentile(b, 95):7.3f} "
            f"{b.sum() / 1000:8.2f} | {a.sum() / b.sum():.2f}x")


def _verdict_record(v) -> dict:
    return {"verdict": v.verdict, "reason": v.reason, "basis": v.basis, "flags": list(v.flags),
            "diff": repr(v.diff), "detail": v.detail}


def paired_decide(args) -> None:
    """Each item decided with the baseline's ``decide`` and this checkout's, alternately (best
    of ``--repeats`` each), one canonical scope per question; outputs must be equal."""
    import contextlib

    from polysql_ray.comparison import normalize as new_norm
    from polysql_ray.comparison import verdict as new_ver

    old_ver, old_norm = _baseline_verdict(Path(args.baseline).resolve())
    items = pickle.load(open(args.inputs, "rb"))
    spent = {"old": 0.0, "new": 0.0}

    def timed(side, fn):  # time spent in pred_nondeterministic, per side
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[side] += time.perf_counter() - t0
        return wrapper
    old_ver.pred_nondeterministic = timed("old", old_ver.pred_nondeterministic)
    new_ver.pred_nondeterministic = timed("new", new_ver.pred_nondeterministic)
    rows, differ = [], []
    sides = (("old", old_ver, old_norm), ("new", new_ver, new_norm))
    by_q: dict = {}
    for it in items:
        by_q.setdefault(it["q"], []).append(it)
    def decide_group(pname, policy, group) -> None:
        with contextlib.ExitStack() as stack:
            for _, _, norm in sides:
                stack.enter_context(norm.canonical_scope())
            for it in group:
                t = {"old": float("inf"), "new": float("inf")}
                out = {}
                for r in range(args.repeats):
                    for side, ver, _ in (sides if (len(rows) + r) % 2 == 0 else sides[::-1]):  # alternate who goes first
                        pair = ver.Pair(it["gold_sql"], it["pred_sql"])
                        t0 = time.perf_counter()
                        try:
                            out[side] = _verdict_record(ver.decide(
                                it["gen"], it["gold"], it["probe"], it["pred"], it["shape"], policy, None, pair=pair,
                                ties_probe=it["ties"], pred_shape=it["pred_shape"], pred_probe=it["pred_probe"],
                                pred_ties_probe=it["pred_ties"]))
                        except Exception as e:  # noqa: BLE001
                            out[side] = {"error": f"{type(e).__name__}: {e}"}
                        t[side] = min(t[side], time.perf_counter() - t0)
                if out["old"] != out["new"]:
                    differ.append((pname, it, out["old"], out["new"]))
                v = out["old"].get("verdict")
                rows.append((pname, "pass" if v == "pass" else "fail" if v == "fail" else "other", t["old"], t["new"]))

    policies = _policies(args.all_policies)
    for pname, policy in policies.items():
        for group in by_q.values():
            decide_group(pname, policy, group)
    print(f"{len(rows)} items decided; verdicts (verdict, reason, basis, flags, diff, detail) differing between "
          f"baseline and this checkout: {len(differ)}; load average {os.getloadavg()[0]:.1f}")
    for pname, it, a, b in differ[:args.show]:
        print(f"  q{it['q']} [{it['model']}, {pname}] {it['pred_sql'][:90]}\n    before: {a}\n    after:  {b}")
    print(f"{'policy':<11} {'verdict':<9} {'n':>6} | {'before: mean':>12} {'median':>7} {'p95':>7} {'total s':>8} "
          f"| {'after: mean':>11} {'median':>7} {'p95':>7} {'total s':>8} | speed-up (total)")
    for pname in policies:
        for k in ("pass", "fail", "other"):
            sel = [r for r in rows if r[0] == pname and r[1] == k]
            if sel:
                print(_cost_row(f"{pname:<11} {k:<9}", [r[2] for r in sel], [r[3] for r in sel]))
    print(f"pred_nondeterministic, all calls of all repeats: before {spent['old']:.2f} s, after {spent['new']:.2f} s")


def _policies(every: bool) -> dict:
    """The default policy, and with ``every`` the testsuite, set and positional ones."""
    from polysql_ray.comparison.policy import ComparisonPolicy

    policies = {"default": ComparisonPolicy()}
    if every:
        policies["testsuite"] = ComparisonPolicy(order="order_by_anywhere", ties="positional", extra_pred_columns=False,
                                                 empty_equal=True, abs_tol=0.0, rel_tol=0.0, distinct="strip")
        policies["set"] = ComparisonPolicy(duplicates="set")
        policies["positional"] = ComparisonPolicy(columns="positional")
    return policies


def _jsonable(c) -> dict:
    d = c.diff
    return {"match": c.match, "reason": c.reason, "flags": list(c.flags), "detail": c.detail,
            "diff": None if d is None else repr(d)}


def score(args) -> None:
    import polysql_ray
    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.comparison.result_set import compare

    items = pickle.load(open(args.inputs, "rb"))
    policies = _policies(args.all_policies)
    with open(args.out, "w") as out:
        for pname, policy in policies.items():
            for qi, sql, g, p, shape, probe in items:
                best = float("inf")
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    try:
                        c = compare(g, p, shape, policy, probe)
                        rec = _jsonable(c)
                    except Exception as e:  # noqa: BLE001 - recorded, compared like a result
                        rec = {"error": f"{type(e).__name__}: {e}"}
                    best = min(best, time.perf_counter() - t0)
                out.write(json.dumps({"policy": pname, "q": qi, "sql": sql, "s": best, **rec}, default=str) + "\n")
    print(f"scored {len(items)} x {len(policies)} policies with {os.path.dirname(polysql_ray.__file__)} -> {args.out}")


def _baseline_compare(checkout: Path):
    """``compare`` of another checkout's comparison package, imported beside this one (its
    ``normalize``/``policy``/``shape``/``result_set`` import each other relatively only)."""
    import importlib
    import shutil
    import tempfile

    pkg = Path(tempfile.mkdtemp(prefix="bench-failing-")) / "_baseline_cmp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("normalize", "policy", "shape", "result_set"):
        shutil.copy(checkout / f"polysql_ray/comparison/{name}.py", pkg / f"{name}.py")
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module("_baseline_cmp.result_set").compare


def paired(args) -> None:
    """Each item timed with the baseline's compare and this checkout's, alternately (best of
    ``--repeats`` each), so machine load hits both alike; outputs must be equal."""
    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.comparison.result_set import compare as new

    old = _baseline_compare(Path(args.baseline).resolve())
    items = pickle.load(open(args.inputs, "rb"))
    policies = _policies(args.all_policies)
    rows, differ = [], []
    for pname, policy in policies.items():
        for qi, sql, g, p, shape, probe in items:
            t = {"old": float("inf"), "new": float("inf")}
            out = {}
            for _ in range(args.repeats):
                for side, fn in (("old", old), ("new", new)):
                    t0 = time.perf_counter()
                    try:
                        out[side] = _jsonable(fn(g, p, shape, policy, probe))
                    except Exception as e:  # noqa: BLE001
                        out[side] = {"error": f"{type(e).__name__}: {e}"}
                    t[side] = min(t[side], time.perf_counter() - t0)
            if out["old"] != out["new"]:
                differ.append((pname, qi, sql, out["old"], out["new"]))
            rows.append((pname, bool(out["old"].get("match")), t["old"], t["new"]))
    import numpy as np

    print(f"{len(rows)} comparisons ({len(items)} items x {len(policies)} policies); outputs differing "
          f"between baseline and this checkout: {len(differ)}; load average {os.getloadavg()[0]:.1f}")
    for d in differ[:args.show]:
        print(f"  q{d[1]} [{d[0]}] {d[2][:90]}\n    before: {d[3]}\n    after:  {d[4]}")
    print(f"{'policy':<11} {'outcome':<9} {'n':>6} | {'before: mean':>12} {'median':>7} {'p95':>7} {'total s':>8} "
          f"| {'after: mean':>11} {'median':>7} {'p95':>7} {'total s':>8} | speed-up (total)")
    for pname in policies:
        for k in (True, False):
            sel = [r for r in rows if r[0] == pname and r[1] == k]
            if not sel:
                continue
            print(_cost_row(f"{pname:<11} {'match' if k else 'no match':<9}", [r[2] for r in sel], [r[3] for r in sel]))


def table(path: str) -> dict:
    import numpy as np

    rows = [json.loads(x) for x in open(path)]
    out = {}
    for pol in dict.fromkeys(r["policy"] for r in rows):
        for k in ("match", "no match"):
            v = np.asarray([r["s"] for r in rows if r["policy"] == pol and bool(r.get("match")) == (k == "match")]) * 1000
            if len(v):
                out[(pol, k)] = (len(v), v.mean(), np.median(v), np.percentile(v, 95), v.sum() / 1000)
    return out


def diff(args) -> None:
    a = [json.loads(x) for x in open(args.a)]
    b = [json.loads(x) for x in open(args.b)]
    strip = lambda r: {k: v for k, v in r.items() if k != "s"}  # noqa: E731
    bad = [(x, y) for x, y in zip(a, b) if strip(x) != strip(y)]
    print(f"comparisons: {len(a)} vs {len(b)}; differing: {len(bad)}")
    for x, y in bad[:args.show]:
        print(f"  q{x['q']} [{x['policy']}] {x['sql'][:90]}\n    before: {strip(x)}\n    after:  {strip(y)}")
    ta, tb = table(args.a), table(args.b)
    print(f"{'policy':<11} {'outcome':<9} {'n':>6} | {'before: mean':>12} {'median':>7} {'p95':>7} {'total s':>8} "
          f"| {'after: mean':>11} {'median':>7} {'p95':>7} {'total s':>8} | speed-up (total)")
    for k in ta:
        n, m1, md1, p1, t1 = ta[k]
        _, m2, md2, p2, t2 = tb.get(k, (0, 0, 0, 0, 0))
        print(f"{k[0]:<11} {k[1]:<9} {n:6d} | {m1:12.3f} {md1:7.3f} {p1:7.3f} {t1:8.2f} | {m2:11.3f} {md2:7.3f} "
              f"{p2:7.3f} {t2:8.2f} | {t1 / t2 if t2 else float('nan'):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--out", required=True)
    c.add_argument("--shared", default=os.environ.get("POLYSQL_SHARED", str(Path(__file__).resolve().parents[2] / "shared")))
    s = sub.add_parser("score")
    s.add_argument("inputs")
    s.add_argument("--out", required=True)
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--all-policies", action="store_true", help="also the testsuite, set and positional policies")
    d = sub.add_parser("diff")
    d.add_argument("a")
    d.add_argument("b")
    d.add_argument("--show", type=int, default=10)
    q = sub.add_parser("paired")
    q.add_argument("inputs")
    q.add_argument("--baseline", required=True, help="checkout (e.g. a `git archive` of the commit before)")
    q.add_argument("--repeats", type=int, default=3)
    q.add_argument("--all-policies", action="store_true")
    q.add_argument("--show", type=int, default=10)
    cd = sub.add_parser("collect-decide")
    cd.add_argument("--out", required=True)
    cd.add_argument("--shared", default=c.get_default("shared"))
    qd = sub.add_parser("paired-decide")
    qd.add_argument("inputs")
    qd.add_argument("--baseline", required=True, help="checkout (e.g. a `git archive` of the commit before)")
    qd.add_argument("--repeats", type=int, default=3)
    qd.add_argument("--show", type=int, default=10)
    qd.add_argument("--all-policies", action="store_true", help="also the testsuite, set and positional policies")
    args = ap.parse_args()
    {"collect": collect, "score": score, "diff": diff, "paired": paired, "collect-decide": collect_decide,
     "paired-decide": paired_decide}[args.cmd](args)


if __name__ == "__main__":
    main()
