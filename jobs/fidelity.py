"""Fidelity jobs: the native-gold agreement per dialect (issue 20 item 7) and the two-direction
SpiderMan study (issue 3 item 5); logic in :mod:`polysql_ray.statistics.native_gold` and
:mod:`polysql_ray.statistics.fidelity`.

Usage::

    # ONE job: every native gold the dataset carries (SpiderMan's MySQL gold for spider, a jsonl
    # dataset's gold_sql_<dialect> columns, BIRD Mini-Dev's MySQL/PostgreSQL gold), scored as
    # predictions on its dialect against the source gold; any sweep override passes through.
    python -m jobs.fidelity step=native dataset=spider results_dir=DIR [dataset.db_ids=[...]] \
        [native=[benchmarks/data/spider_postgres_native.jsonl]]   # overlay files of native gold
    python -m jobs.fidelity step=native report_only=true dataset=spider results_dir=DIR
    # -> DIR/fidelity/native_<dataset>.{json,md} and DIR/fidelity/drill/*.html

    python -m jobs.fidelity step=prepare results_dir=DIR [shared=../shared]   # direction A predictions
    python -m polysql_ray +sweep=fidelity_a results_dir=DIR
    python -m polysql_ray +sweep=fidelity_b results_dir=DIR
    python -m jobs.fidelity step=report results_dir=DIR [shared=...]          # DIR/fidelity/report.{md,json}
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from polysql_ray.jobs_cli import REQUIRED, UsageError, parse_overrides, run_job
from polysql_ray.statistics import fidelity


PROG = "jobs.fidelity"
KEYS = {"step": REQUIRED, "results_dir": REQUIRED, "shared": None}

#: overrides the native step always applies after the user's
NATIVE_FORCED = ("progress=false",)


def _shared(value) -> Path:
    return Path(str(value or os.environ.get("POLYSQL_SHARED")
                    or Path(__file__).resolve().parents[1] / ".." / "shared"))


def native(argv: list[str]) -> int:
    """``step=native``: compose the config (the user's overrides), find the dataset's native gold
    sets, run one sweep of them (one replay model per dialect, each on its dialect only), then
    write and print the report and the drill-down pages. ``report_only=true`` skips the sweep."""
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run
    from polysql_ray.reporting.drill import write_drill_pages
    from polysql_ray.statistics import native_gold
    from polysql_ray.statistics.load import SCORES_TABLE, load_scores

    args = [a for a in argv if a != "step=native"]
    report_only = "report_only=true" in args
    shared = next((a.split("=", 1)[1] for a in args if a.startswith("shared=")), None)
    overlays = [x for a in args if a.startswith("native=")
                for x in a.split("=", 1)[1].strip("[]").split(",") if x]
    args = [a for a in args if not a.startswith(("report_only=", "shared=", "native="))]
    plain, loader, yaml_text = compose([*args, *NATIVE_FORCED])
    ds = plain["dataset"]
    rdir = Path(plain["results_dir"])
    try:
        sets = native_gold.native_sets(ds, _shared(shared), overlays)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not sets:
        raise UsageError(f"dataset {ds['name']!r} carries no native gold: add gold_sql_<dialect> "
                         f"columns (jsonl), or use spider with SpiderMan / BIRD Mini-Dev beside it")
    dialects = sorted(sets)
    out = rdir / "fidelity"
    if not report_only:
        plain["sweep"] = {"name": f"native_gold_{ds['name']}",
                          "models": native_gold.models(sets, out / "native_predictions")}
        plain["dialects"] = dialects
        stats, _ = run(plain, loader, yaml_text)
        for e in stats.errors:
            print(f"{PROG}: error: {e}")
    data, md = native_gold.report(rdir, ds["name"], dialects)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"native_{ds['name']}.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    (out / f"native_{ds['name']}.md").write_text(md, encoding="utf-8")
    con, _ = load_scores(rdir)
    try:
        # questions without a native gold (replayed as `missing`) are not the study's
        for d in dialects:
            con.execute(f"DELETE FROM {SCORES_TABLE} WHERE model = ? AND NOT list_contains(?, question_id)",
                        [native_gold.model_name(d), [str(r["question_id"]) for r in sets[d]]])
        pages = write_drill_pages(rdir, out, con, [native_gold.cell(ds["name"], d) for d in dialects])
    finally:
        con.close()
    print(md)
    print("drill-down: " + ", ".join(str(p) for p in pages))
    return 0


def main(argv: list[str]) -> int:
    """Run ``step=native``, ``step=prepare`` or ``step=report``; returns the exit code."""
    if "step=native" in argv:
        return native(argv)
    kv = parse_overrides(argv, KEYS, PROG)
    if kv["step"] not in ("prepare", "report"):
        raise UsageError(f"step={kv['step']!r}: expected step=native, step=prepare or step=report")
    rdir = Path(str(kv["results_dir"]))
    shared = _shared(kv["shared"])
    if kv["step"] == "prepare":
        n = fidelity.write_predictions(shared / "data" / "spiderman", shared / "data" / "spider" / "dev.json",
                                       rdir / "fidelity" / "spiderman_mysql_gold.jsonl")
        print(f"wrote {n} predictions to {rdir / 'fidelity' / 'spiderman_mysql_gold.jsonl'}")
        return 0
    data, md = fidelity.report(rdir, shared / "data" / "spider")
    (rdir / "fidelity").mkdir(parents=True, exist_ok=True)
    (rdir / "fidelity" / "report.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    (rdir / "fidelity" / "report.md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
