"""``quickstart`` layout: the project's own small benchmark (:mod:`polysql_ray.quickstart`).

It is the ``jsonl`` layout over a folder that :func:`polysql_ray.quickstart.materialize`
writes (SQLite files built from the committed SQL scripts, plus ``questions.jsonl``), so
the README command works on any machine without the shared data. ``root`` is the folder to
materialize into (idempotent); when unset, a per-user cache folder is used.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from polysql_ray.datasets.base import as_config, distinct_sources
from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.datasets.jsonl import JsonlLoader


class QuickstartLoader:
    """Materializes the quickstart benchmark, then loads it with :class:`JsonlLoader`."""

    layout = "quickstart"

    def load(self, cfg: Any) -> list[Example]:
        """Examples of the quickstart benchmark (about 30, two SQLite databases)."""
        from polysql_ray.quickstart import default_dir, materialize

        c = as_config(cfg)
        root = materialize(c.root or default_dir())
        c = dataclasses.replace(c, root=str(root), file=c.file or "questions.jsonl", db_dir=c.db_dir or "database")
        return JsonlLoader().load(c)

    def sources(self, cfg: Any) -> list[SourceDatabase]:
        """Distinct source databases (``shop``, ``school``)."""
        return distinct_sources(self.load(cfg))
