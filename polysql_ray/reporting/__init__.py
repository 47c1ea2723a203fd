"""Leaderboard snapshots from the results store: md / csv / json / html, PNG figures, manifest."""
from .console import print_views, view_table
from .manifest import build_manifest, git_sha, package_versions, store_sha256
from .render import render_csv, render_html, render_json, render_markdown
from .snapshot import Snapshot, write_snapshot
from .views import View, all_views, leaderboard_view

__all__ = [
    "Snapshot", "View", "all_views", "build_manifest", "git_sha", "leaderboard_view",
    "package_versions", "print_views", "render_csv", "render_html", "render_json",
    "render_markdown", "store_sha256", "view_table", "write_snapshot",
]
