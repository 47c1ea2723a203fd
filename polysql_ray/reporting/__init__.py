"""Leaderboard snapshots from the results store: md / csv / json / html, PNG figures, manifest.

The names below are imported on first use (PEP 562), as in :mod:`polysql_ray.statistics`: the
run's EX table needs only :mod:`.console` and :mod:`.views`, not the statistics (statsmodels,
SciPy) behind the snapshot.
"""
from __future__ import annotations

from polysql_ray.lazy import lazy_exports

_EXPORTS = {
    "console": ("print_views", "view_table"),
    "manifest": ("build_manifest", "git_sha", "package_versions", "store_sha256"),
    "render": ("render_csv", "render_html", "render_json", "render_markdown"),
    "snapshot": ("Snapshot", "write_snapshot"),
    "views": ("View", "all_views", "leaderboard_view"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
