"""Leaderboard snapshots from the results store: md / csv / json / html, PNG figures, manifest.

The names below are imported on first use (PEP 562), as in :mod:`polysql_ray.statistics`: the
run's EX table needs only :mod:`.console` and :mod:`.views`, not the statistics (statsmodels,
SciPy) behind the snapshot.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "console": ("print_views", "view_table"),
    "manifest": ("build_manifest", "git_sha", "package_versions", "store_sha256"),
    "render": ("render_csv", "render_html", "render_json", "render_markdown"),
    "snapshot": ("Snapshot", "write_snapshot"),
    "views": ("View", "all_views", "leaderboard_view"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
