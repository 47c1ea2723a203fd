"""Dataset loaders: one module per layout, all yielding :class:`Example` records.

Entry points: :func:`load_dataset` and :func:`dataset_sources` (see ``registry``).

The names below are imported on first use (PEP 562, :func:`polysql_ray.lazy.lazy_exports`): a
module that needs only :class:`Example` (``datasets.example``: the generators, the planner, every
Ray worker that unpickles one) does not load the loaders' base and registry, nor through them
the engines' declarations and pyarrow.
"""
from __future__ import annotations

from polysql_ray.lazy import lazy_exports

_EXPORTS = {
    "base": ("DatasetConfig", "DatasetError"),
    "example": ("Example", "SourceDatabase"),
    "registry": ("LOADERS", "dataset_sources", "get_loader", "load_dataset"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
