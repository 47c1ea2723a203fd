"""Statistics job: print every statistics table of a results store (and optionally save JSON).

Usage (Hydra overrides, as every job)::

    python -m jobs.stats results_dir=DIR [json=FILE] [views=[leaderboard,hierarchy]]
        [baseline=sqlite] [alpha=0.05] [ci=wilson] [p_adjust=holm] [policy_version=V]

Tables wider than the terminal are split into several tables that repeat the key columns.
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.jobs_cli import REQUIRED, as_list, parse_overrides, run_job
from polysql_ray.reporting.cli import config_defaults, stats_config

PROG = "jobs.stats"
KEYS = {"results_dir": REQUIRED, **config_defaults(), "json": None, "views": None}


def main(argv: list[str]) -> int:
    """Run the job on Hydra override strings; returns the exit code (0 on success)."""
    from polysql_ray.jobs_cli import UsageError
    from polysql_ray.reporting.console import print_views
    from polysql_ray.reporting.manifest import store_sha256
    from polysql_ray.reporting.render import render_json
    from polysql_ray.reporting.views import all_views
    from polysql_ray.statistics.summary import compute_statistics

    kv = parse_overrides(argv, KEYS, PROG)
    st = compute_statistics(str(kv["results_dir"]), stats_config(kv))
    views = all_views(st)
    wanted = as_list(kv["views"])
    if wanted:
        unknown = sorted(set(wanted) - {v.slug for v in views})
        if unknown:
            raise UsageError(f"unknown view(s) {', '.join(unknown)}; known: "
                             f"{', '.join(v.slug for v in views)}")
        views = [v for v in views if v.slug in set(wanted)]
    print_views(views)
    if kv["json"]:
        Path(str(kv["json"])).write_text(render_json(st, store_sha256(str(kv["results_dir"]))),
                                         encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
