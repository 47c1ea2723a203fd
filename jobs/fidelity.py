"""Fidelity study job (issue 3 item 5); logic in :mod:`polysql_ray.statistics.fidelity`.

Usage::

    python -m jobs.fidelity prepare results_dir=DIR [shared=../shared]   # direction A predictions
    python -m polysql_ray +sweep=fidelity_a results_dir=DIR
    python -m polysql_ray +sweep=fidelity_b results_dir=DIR
    python -m jobs.fidelity report results_dir=DIR [shared=...]          # DIR/fidelity/report.{md,json}
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from polysql_ray.statistics import fidelity


def main(argv: list[str] | None = None) -> int:
    """Run ``prepare`` or ``report``; returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in ("prepare", "report"):
        print(__doc__, file=sys.stderr)
        return 2
    kv = dict(a.split("=", 1) for a in args[1:])
    rdir = Path(kv["results_dir"])
    shared = Path(kv.get("shared") or os.environ.get("POLYSQL_SHARED")
                  or Path(__file__).resolve().parents[1] / ".." / "shared")
    if args[0] == "prepare":
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
    raise SystemExit(main())
