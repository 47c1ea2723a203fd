"""Leaderboard snapshot job.

Usage::

    python -m jobs.leaderboard results_dir=DIR out=DIR [baseline=sqlite] [alpha=0.05]
        [ci=wilson] [p_adjust=holm] [policy_version=V] [figures=true]

Writes leaderboard.md / .csv / .json, index.html, PNG figures and manifest.json into ``out``
(see :mod:`polysql_ray.reporting.snapshot`) and prints the EX leaderboard with rich.
"""
from __future__ import annotations

import sys

from polysql_ray.reporting.cli import CONFIG_KEYS, parse_kv, stats_config
from polysql_ray.reporting.console import print_views
from polysql_ray.reporting.snapshot import write_snapshot
from polysql_ray.reporting.views import leaderboard_view


def main(argv: list[str] | None = None) -> int:
    """Run the job; returns the exit code (0 on success)."""
    kv = parse_kv(sys.argv[1:] if argv is None else argv, ("results_dir", "out"),
                  (*CONFIG_KEYS, "figures"))
    snap = write_snapshot(kv["results_dir"], kv["out"], stats_config(kv),
                          figures=kv.get("figures", "true").lower() not in ("0", "false", "no"))
    print_views([leaderboard_view(snap.stats, with_ci=False)])
    print(f"snapshot written to {kv['out']} (store sha256 {snap.store_sha256[:12]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
