"""Benchmark: share of real Spider dev predictions proven equivalent structurally, speed, and
soundness against execution.

For every prediction file in ``<shared>/data/predictions/spider_dev`` (one SQLite query per
line, ``dev.json`` order) it runs :class:`polysql_ray.comparison.ast.AstEquivalence` (SQLite ->
SQLite) on every (gold, prediction) pair and prints the share proven and checks/second. Every
proven pair is then executed on the Spider SQLite database (``polysql_ray.engines.sqlite``, else
sqlite3 read-only) and compared under the default comparison policy; a
proven pair whose results differ is a *disagreement* (must be 0). Pairs whose gold cannot run
(``wta_1`` is missing) are counted apart.

Usage: ``python benchmarks/bench_ast.py [--shared PATH]`` (default ``<repo>/../shared``, or
``$POLYSQL_SHARED``).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from polysql_ray.comparison.ast import AstEquivalence
from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare
from polysql_ray.comparison.equivalence import load_engine
from polysql_ray.engines.base import Limits


def main() -> None:
    """Run the benchmark and print one line per prediction file plus totals."""
    repo = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shared", default=os.environ.get("POLYSQL_SHARED", str(repo.parent / "shared")))
    args = ap.parse_args()
    data = Path(args.shared) / "data"
    dev = json.loads((data / "spider" / "dev.json").read_text())
    engine = load_engine("sqlite")
    limits = Limits(timeout_s=30.0, row_cap=100_000)
    checker = AstEquivalence()
    for pred_file in sorted((data / "predictions" / "spider_dev").glob("*.sql")):
        preds = pred_file.read_text(encoding="utf-8").splitlines()
        t0 = time.perf_counter()
        results = [checker.check(ex["query"], "sqlite", (preds[i] if i < len(preds) else ""), "sqlite")
                   for i, ex in enumerate(dev)]
        elapsed = time.perf_counter() - t0
        proven = [i for i, r in enumerate(results) if r.equivalent]
        agree = disagree = gold_missing = 0
        examples = []
        for i in proven:
            db = data / "spider" / "database" / dev[i]["db_id"] / f"{dev[i]['db_id']}.sqlite"
            g = engine.execute(str(db), dev[i]["query"], limits)
            if not g.ok:
                gold_missing += 1
                continue
            p = engine.execute(str(db), preds[i], limits)
            shape = analyze_gold(dev[i]["query"], "sqlite")
            probe = engine.execute(str(db), shape.probe_sql, limits) if shape.probe_sql else None
            ok = p.ok and compare(g.table, p.table, shape, ComparisonPolicy(),
                                  probe.table if (probe is not None and probe.ok) else None).match
            if ok:
                agree += 1
            else:
                disagree += 1
                examples.append((i, dev[i]["query"], preds[i]))
        print(f"{pred_file.name:22s} proven {len(proven):4d}/{len(dev)} = {len(proven) / len(dev):6.1%}"
              f"  {len(dev) / elapsed:7.0f} checks/s  executed-agree {agree}  disagree {disagree}"
              f"  gold-not-runnable {gold_missing}")
        for ex in examples[:5]:
            print("   DISAGREEMENT", ex)
    engine.close()


if __name__ == "__main__":
    main()
