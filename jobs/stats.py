"""Statistics job: print every statistics table of a results store (and optionally save JSON).

Usage::

    python -m jobs.stats results_dir=DIR [json=FILE] [views=leaderboard,hierarchy,...]
        [baseline=sqlite] [alpha=0.05] [ci=wilson] [p_adjust=holm] [policy_version=V]
"""
from __future__ import annotations

import sys
from pathlib import Path

from polysql_ray.reporting.cli import CONFIG_KEYS, parse_kv, stats_config
from polysql_ray.reporting.console import print_views
from polysql_ray.reporting.manifest import store_sha256
from polysql_ray.reporting.render import render_json
from polysql_ray.reporting.views import all_views
from polysql_ray.statistics.summary import compute_statistics


def main(argv: list[str] | None = None) -> int:
    """Run the job; returns the exit code (0 on success)."""
    kv = parse_kv(sys.argv[1:] if argv is None else argv, ("results_dir",),
                  (*CONFIG_KEYS, "json", "views"))
    st = compute_statistics(kv["results_dir"], stats_config(kv))
    views = all_views(st)
    if kv.get("views"):
        wanted = set(kv["views"].split(","))
        views = [v for v in views if v.slug in wanted]
    print_views(views)
    if kv.get("json"):
        Path(kv["json"]).write_text(render_json(st, store_sha256(kv["results_dir"])),
                                    encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
