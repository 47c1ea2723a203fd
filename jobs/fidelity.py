"""Fidelity study job (issue 3 item 5); logic in :mod:`polysql_ray.statistics.fidelity`.

Usage::

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


def main(argv: list[str]) -> int:
    """Run ``step=prepare`` or ``step=report``; returns the exit code."""
    kv = parse_overrides(argv, KEYS, PROG)
    if kv["step"] not in ("prepare", "report"):
        raise UsageError(f"step={kv['step']!r}: expected step=prepare or step=report")
    rdir = Path(str(kv["results_dir"]))
    shared = Path(str(kv["shared"] or os.environ.get("POLYSQL_SHARED")
                      or Path(__file__).resolve().parents[1] / ".." / "shared"))
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
