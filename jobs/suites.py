"""Distilled database suites: build and cache them, print the distillation figures; replicate
them into target engines and check the golds there.

Usage (Hydra overrides, as every job)::

    python -m jobs.suites build [dataset=spider] [root=../shared/data/spider] [out=results/suites] \
        [size=8] [seed=0] [candidates=40] [max_rows=30] ['db_ids=[concert_singer,pets_1]'] [force=false]
    python -m jobs.suites replicate ['targets=[duckdb,postgres,mysql]'] [same keys as build]

``build`` prints one line per db_id: candidates generated, kept, neighbor queries distinguished
/ valid (on the suite, on the source, on either), golds non-trivial on every / some kept
database / on the source, seconds, and the suite key; then the totals. ``replicate`` builds (or
reuses) the suites, replicates every suite database into each target exactly as a source is
replicated (``replication.base.replicate``: type decisions, certificate), runs every gold on
the SQLite suite database and on each copy and compares them with the default policy
(``comparison.decide``); it prints per db_id and target the golds equal on the original database
(the gold's own portability, its EX ceiling), the copies verified, the golds equal / compared on
the suite, each column whose type decision differs from the source's copy, and every copy that
failed (a value the target cannot represent is reported, never skipped), and each gold that
differs on a suite database only. Exit code 1 when a copy failed or a gold differs on a suite
database while equal on the original.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from polysql_ray.jobs_cli import UsageError, parse_overrides, run_job

PROG = "jobs.suites"
KEYS = {"dataset": "spider", "root": "../shared/data/spider", "out": "results/suites", "size": 8, "seed": 0,
        "candidates": 40, "max_rows": 30, "db_ids": "", "force": False,
        "targets": ["duckdb", "postgres", "mysql"], "replicas": "results/suites/replicas"}


def _golds(root: Path, dataset: str, wanted: set[str]) -> dict[str, tuple[str, list[str]]]:
    """db_id -> (source path, distinct gold SQL list in dataset order, golds that load), from the
    dataset loader (Spider layout): the same list a sweep's suite stage passes, so both share a suite."""
    from polysql_ray.datasets.registry import load_dataset
    from polysql_ray.suites.spec import suite_sources

    examples = load_dataset({"name": dataset, "layout": "spider", "root": str(root), "file": "dev.json",
                             "db_dir": "database"})
    out = suite_sources(e for e in examples if not wanted or e.db_id in wanted)
    return dict(sorted(out.items()))


def _build(kv: dict):
    """Build (or reuse) the suite of every wanted db_id, yielding each as it is ready."""
    from polysql_ray.suites import SuiteSettings, suite_for

    raw = kv["db_ids"]
    wanted = {str(d) for d in raw} if isinstance(raw, (list, tuple)) else {d for d in str(raw or "").split(",") if d}
    try:
        settings = SuiteSettings.from_config({"size": kv["size"], "seed": kv["seed"],
                                              "candidates": kv["candidates"], "max_rows": kv["max_rows"]})
    except ValueError as e:  # a bad value is the user's to fix: one line, exit 2
        raise UsageError(str(e)) from None
    root = Path(str(kv["root"]))
    if not (root / "dev.json").exists():
        raise UsageError(f"root={root}: no dev.json there (expected the Spider layout)")
    for db_id, (path, golds) in _golds(root, str(kv["dataset"]), wanted).items():
        yield suite_for(db_id, path, settings.seed, settings.size, golds, Path(str(kv["out"])),
                        dataset=str(kv["dataset"]), settings=settings, force=bool(kv["force"]))


def _line(s) -> str:
    f = s.figures
    return (f"{s.db_id}: candidates {f['generated']}/{f['candidates']} kept {f['kept']} | neighbors distinguished "
            f"suite {f['distinguished_suite']}/{f['neighbors_valid']}, source {f['distinguished_source']}, "
            f"either {f['distinguished_source_or_suite']} | golds non-trivial every kept "
            f"{f['golds_nontrivial_every_kept']}, some kept {f['golds_nontrivial_some_kept']}, source "
            f"{f['golds_nontrivial_source']}/{f['golds']} | {f['seconds']}s{' (reused)' if f.get('reused') else ''}"
            f" | {s.key()}")


def build(kv: dict) -> int:
    tot = {k: 0 for k in ("generated", "kept", "neighbors_valid", "distinguished_suite", "distinguished_source",
                          "distinguished_source_or_suite", "golds", "golds_nontrivial_source",
                          "golds_nontrivial_every_kept", "golds_nontrivial_some_kept", "seconds")}
    for s in _build(kv):
        print(_line(s), flush=True)
        for k in tot:
            tot[k] += s.figures[k]
    print("total: " + json.dumps({k: round(v, 2) for k, v in tot.items()}))
    return 0


def replicate(kv: dict) -> int:
    """See module docstring."""
    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.comparison.shape import analyze_gold
    from polysql_ray.comparison.verdict import Pair, decide
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.base import Limits
    from polysql_ray.engines.registry import default_dialect, make_engine
    from polysql_ray.replication.base import ReplicationError
    from polysql_ray.replication.base import replicate as replicate_one

    targets = kv["targets"] if isinstance(kv["targets"], list) else str(kv["targets"]).split(",")
    replicas = Path(str(kv["replicas"]))
    policy, limits = ComparisonPolicy(), Limits(timeout_s=30)
    bad = 0
    root = Path(str(kv["root"]))
    raw = kv["db_ids"]
    wanted = {str(d) for d in raw} if isinstance(raw, (list, tuple)) else {d for d in str(raw or "").split(",") if d}
    golds = _golds(root, str(kv["dataset"]), wanted)
    sqlite = make_engine("sqlite")
    for s in _build(kv):
        print(_line(s), flush=True)
        src_path = golds[s.db_id][0]
        shapes = [(g, analyze_gold(g, "sqlite")) for g in dict.fromkeys(golds[s.db_id][1])]  # distinct golds
        for target in targets:
            engine = make_engine(target)
            t0 = time.perf_counter()
            try:
                ref = replicate_one(SourceDatabase(s.dataset, s.db_id, "sqlite", src_path), target, replicas)
                ref_types = {(t.name, c.name): (c.logical_type, c.target_type, bool(c.fallback))
                             for t in ref.manifest.tables for c in t.columns}
            except ReplicationError as e:
                print(f"  {target}: source copy FAILED: {e}")
                bad += 1
                continue
            def verdict(sql, shape, sqlite_path, location):
                gold = limits.enforce(sqlite.execute(sqlite_path, sql, limits))
                if not gold.ok:
                    return None
                probe = sqlite.execute(sqlite_path, shape.probe_sql, limits) if shape.probe_sql else None
                ties = sqlite.execute(sqlite_path, shape.ties_probe_sql, limits) if shape.ties_probe_sql else None
                pred = limits.enforce(engine.execute(location, sql, limits))
                return decide("ok", gold, probe, pred, shape, policy, limits, ties_probe=ties,
                              pair=Pair(sql, sql, "sqlite", default_dialect(target), "sqlite", target))

            # the gold's own portability on the original database (the EX ceiling): a gold that
            # differs there differs on the suite for the same reason
            on_source = {sql: verdict(sql, shape, src_path, ref.location) for sql, shape in shapes}
            ceiling = sum(1 for v in on_source.values() if v is not None and v.verdict == "pass")
            print(f"  {target}: original: golds equal {ceiling}/{sum(v is not None for v in on_source.values())}",
                  flush=True)
            verified, equal, unsure, compared, drift, failed = 0, 0, 0, 0, [], []
            also_source = 0
            for d in s.databases:
                src = SourceDatabase(f"{s.dataset}_suite", d.name, "sqlite", d.path)
                try:
                    r = replicate_one(src, target, replicas)
                except ReplicationError as e:
                    failed.append(f"{d.name}: copy FAILED: {e}")
                    continue
                verified += 1
                for t in r.manifest.tables:
                    for c in t.columns:
                        if ref_types.get((t.name, c.name)) != (c.logical_type, c.target_type, bool(c.fallback)):
                            drift.append(f"{d.name}.{t.name}.{c.name}: {c.logical_type}/{c.target_type}"
                                         f" (source copy {ref_types.get((t.name, c.name))}; {c.fallback or ''})")
                for sql, shape in shapes:
                    v = verdict(sql, shape, d.path, r.location)
                    if v is None:
                        continue
                    compared += 1
                    equal += v.verdict == "pass"
                    unsure += v.verdict == "inconclusive"
                    if v.verdict == "fail":
                        known = on_source[sql] is not None and on_source[sql].verdict == "fail"
                        also_source += known
                        failed.append(f"{d.name}: gold differs on {target} ({v.reason}"
                                      f"{', differs on the original too' if known else ', suite only'}): {sql}")
            engine.close()
            bad += len(failed) - also_source
            print(f"  {target}: {verified}/{len(s.databases)} copies verified, golds equal {equal}/{compared} "
                  f"(inconclusive {unsure}), type decisions differing from the source copy "
                  f"{len(drift)}, failures {len(failed)} ({also_source} of them also on the original) "
                  f"({time.perf_counter() - t0:.1f}s)", flush=True)
            for line in drift[:10] + [f for f in failed if "suite only" in f or "FAILED" in f][:20]:
                print(f"    {line}")
    sqlite.close()
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    """``build`` or ``replicate`` (module docstring); returns the exit code."""
    if not argv or argv[0] not in ("build", "replicate"):
        raise UsageError("usage: python -m jobs.suites build|replicate [key=value ...]")
    kv = parse_overrides(argv[1:], KEYS, PROG)
    return build(kv) if argv[0] == "build" else replicate(kv)


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
