"""Leaderboard snapshot job.

Usage (Hydra overrides, as every job)::

    python -m jobs.leaderboard results_dir=DIR out=DIR [baseline=sqlite] [alpha=0.05]
        [ci=wilson] [p_adjust=holm] [policy_version=V] [exclude_generators=[gold]] [figures=true]
        [include_standins=false] [allow_standin_judges=false]

Writes leaderboard.md / .csv / .json, index.html, drill-down pages, PNG figures and
manifest.json into ``out`` (see :mod:`polysql_ray.reporting.snapshot`) and prints the EX
leaderboard with rich.
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.jobs_cli import REQUIRED, UsageError, parse_overrides, run_job
from polysql_ray.reporting.cli import config_defaults, stats_config

PROG = "jobs.leaderboard"
KEYS = {"results_dir": REQUIRED, "out": REQUIRED, **config_defaults(), "figures": True,
        "allow_standin_judges": False}


def main(argv: list[str]) -> int:
    """Run the job on Hydra override strings; returns the exit code (0 on success)."""
    from polysql_ray.reporting.console import print_views
    from polysql_ray.reporting.snapshot import PublicationError, write_snapshot
    from polysql_ray.reporting.views import leaderboard_view

    kv = parse_overrides(argv, KEYS, PROG)
    if Path(str(kv["out"])).exists() and not Path(str(kv["out"])).is_dir():
        raise UsageError(f"out={kv['out']} is a file: give a folder for the snapshot")
    try:
        snap = write_snapshot(str(kv["results_dir"]), str(kv["out"]), stats_config(kv),
                              figures=bool(kv["figures"]),
                              allow_standin_judges=bool(kv["allow_standin_judges"]))
    except PublicationError as exc:
        raise UsageError(str(exc)) from None
    print_views([leaderboard_view(snap.stats, with_ci=False)])
    print(f"snapshot written to {kv['out']} (store sha256 {snap.store_sha256[:12]}); "
          f"open {kv['out']}/index.html")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
