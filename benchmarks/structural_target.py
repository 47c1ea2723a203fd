"""How many predictions the structural check proves per target dialect, what that saves, and
whether every proof also runs (a proven prediction is not executed).

Prints, per target: items, items proven, unique predicted executions with the proofs and
without them (the sweep executes an identical (database, SQL) once); with ``--verify`` it then
executes every proven prediction on a replica built here and prints the verdicts, which must
all be ``pass`` (any other is an unsound proof, listed).

    python benchmarks/structural_target.py spider postgres,duckdb --verify
    python benchmarks/structural_target.py quickstart postgres --verify

``spider`` reads ``$POLYSQL_SHARED/data`` (default ``../shared/data``): Spider dev, the four
published prediction sets and the gold; ``quickstart`` the project's own benchmark (gold,
rewritten, flawed). Replicas go to a temporary folder (server copies stay on the servers,
named ``pq_structural_target_*``).
"""
from __future__ import annotations

import argparse
import collections
import os
import tempfile
from pathlib import Path

SETS = ("dail_sql_gpt4", "c3sql_gpt35", "resdsql_3b", "codes_15b_sft")


def load(which: str):
    """``(examples, {model: [pred_sql per example]})``."""
    from polysql_ray.generation.replay import ReplayGenerator

    if which == "spider":
        from polysql_ray.datasets.spider import SpiderLoader

        data = Path(os.environ.get("POLYSQL_SHARED", Path(__file__).resolve().parents[2] / "shared")) / "data"
        exs = SpiderLoader().load({"name": "spider", "layout": "spider", "root": str(data / "spider")})
        sets = {m: data / "predictions" / "spider_dev" / f"{m}.sql" for m in SETS}
    else:
        import polysql_ray.quickstart as q
        from polysql_ray.datasets.quickstart import QuickstartLoader

        exs = QuickstartLoader().load({"name": "quickstart", "layout": "quickstart"})
        base = Path(q.__file__).parent / "data"
        sets = {m: base / f"{m}.jsonl" for m in ("rewritten", "flawed")}
    preds = {m: [p.pred_sql for p in ReplayGenerator(m, f).generate(exs, "sqlite", "11")] for m, f in sets.items()}
    preds["gold"] = [e.gold_sql for e in exs]
    return exs, preds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", choices=("spider", "quickstart"))
    ap.add_argument("targets", help="comma-separated target engines, e.g. postgres,duckdb")
    ap.add_argument("--verify", action="store_true", help="execute every proven prediction")
    args = ap.parse_args()

    from polysql_ray.comparison.equivalence import Case, ResultSetEquivalence, _replica, read_sqlite_schema
    from polysql_ray.engines.registry import default_dialect
    from polysql_ray.pipeline.structural import _cached_checker

    exs, preds = load(args.dataset)
    checker, schemas = _cached_checker(), {}
    items = [(m, e, p) for m, ps in preds.items() for e, p in zip(exs, ps) if e.database.exists and p.strip()]
    for target in args.targets.split(","):
        dialect, proven, reasons = default_dialect(target), [], collections.Counter()
        for m, e, p in items:
            loc = e.database.location
            schemas.setdefault(loc, read_sqlite_schema(loc))
            try:
                r = checker.check(e.gold_sql, "sqlite", p, dialect, schema=schemas[loc] if dialect != "sqlite" else None)
            except Exception as exc:  # noqa: BLE001 - as the pipeline: a checker error is unknown
                reasons[f"checker error {type(exc).__name__}"] += 1
                continue
            if r.equivalent:
                proven.append((m, e, p))
            else:
                reasons[r.reason.split(":")[0]] += 1
        run_all = {(e.db_id, p) for _, e, p in items}
        proven_keys = {(a, b.question_id) for a, b, _ in proven}
        run_left = {(e.db_id, p) for m, e, p in items if (m, e.question_id) not in proven_keys}
        print(f"{args.dataset} -> {target}: {len(items)} items, {len(proven)} proven; unique predicted executions "
              f"{len(run_left)} with the check, {len(run_all)} without; not proven: {dict(reasons.most_common(6))}")
        if not args.verify or not proven:
            continue
        reps, seen, out, bad = {}, set(), collections.Counter(), []
        rdir = tempfile.mkdtemp(prefix="structural_target_")
        check = ResultSetEquivalence(structural=False)
        for m, e, p in proven:
            if (e.question_id, p) in seen:
                continue
            seen.add((e.question_id, p))
            if e.db_id not in reps:
                reps[e.db_id] = e.database.location if target == "sqlite" else \
                    _replica(e.database.location, "sqlite", target, rdir, {}, "structural_target")
            r = check.check(Case(e.gold_sql, p, "sqlite", dialect, "sqlite", target, e.database.location, reps[e.db_id]))
            out[r.verdict] += 1
            if r.verdict != "pass":
                bad.append((m, e.question_id, p, r.reason))
        print(f"  verified by execution: {len(seen)} unique proven pairs -> {dict(out)}")
        for b in bad:
            print("  UNSOUND PROOF:", b)


if __name__ == "__main__":
    main()
