"""Layout name -> loader. Adding a layout is one entry in :data:`LOADERS`.

Usage::

    from polysql_ray.datasets.registry import load_dataset
    examples = load_dataset({"name": "spider", "layout": "spider", "root": "../shared/data/spider"})
"""
from __future__ import annotations

import importlib
from typing import Any

from polysql_ray.datasets.base import DatasetError, DatasetLoader, as_config, check_sources
from polysql_ray.datasets.example import Example, SourceDatabase

#: layout name -> "module:Class" (imported lazily).
LOADERS: dict[str, str] = {
    "spider": "polysql_ray.datasets.spider:SpiderLoader",
    "bird": "polysql_ray.datasets.bird:BirdLoader",
    "jsonl": "polysql_ray.datasets.jsonl:JsonlLoader",
    "quickstart": "polysql_ray.datasets.quickstart:QuickstartLoader",
    "spiderman": "polysql_ray.datasets.spiderman:SpidermanLoader",
    "archer": "polysql_ray.datasets.archer:ArcherLoader",
}


def get_loader(layout: str) -> DatasetLoader:
    """The loader for ``layout``; DatasetError listing the known layouts otherwise."""
    target = LOADERS.get(layout)
    if target is None:
        raise DatasetError(f"unknown dataset layout {layout!r}; known layouts: {', '.join(sorted(LOADERS))}")
    mod, _, cls = target.partition(":")
    return getattr(importlib.import_module(mod), cls)()


def load_dataset(cfg: Any) -> list[Example]:
    """Examples of the dataset described by ``cfg`` (dict, OmegaConf node or
    DatasetConfig with ``name``, ``layout``, ``root``, optional ``file``, ``db_dir``,
    ``limit``, ``db_ids``). Golds that read the clock are flagged and clock-keyed
    (:func:`polysql_ray.datasets.clock.mark_clock_dependent`). Raises DatasetError with a
    user-facing message, also for a source file that is empty, unreadable or no database
    (:func:`polysql_ray.datasets.base.check_sources`)."""
    from polysql_ray.datasets.clock import mark_clock_dependent

    c = as_config(cfg)
    examples = list(mark_clock_dependent(get_loader(c.layout).load(c)))
    check_sources(examples)
    return examples


def dataset_sources(cfg: Any) -> list[SourceDatabase]:
    """Distinct source databases of ``load_dataset(cfg)`` (what replication copies)."""
    c = as_config(cfg)
    return get_loader(c.layout).sources(c)
