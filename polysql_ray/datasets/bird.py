"""BIRD layout: ``<root>/dev.json`` + ``<root>/dev_databases/<db_id>/<db_id>.sqlite``.

Source: Li et al., 2023 (BIRD), dev and Mini-Dev releases. Records carry ``question_id``,
``db_id``, ``question``, ``evidence`` (the external-knowledge hint) and ``SQL`` (gold,
SQLite dialect); ``difficulty`` and other keys go to ``Example.extra``. The dataset's own
``question_id`` is used (it must be unique).
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.datasets.base import check_unique_ids
from polysql_ray.datasets.example import Example
from polysql_ray.datasets.spider import SpiderLoader


class BirdLoader(SpiderLoader):
    """Loader for the BIRD layout. Config keys: ``root`` (required), ``file`` (default
    ``dev.json``; Mini-Dev ships ``mini_dev_sqlite.json``), ``db_dir`` (default
    ``dev_databases``), ``limit``, ``db_ids``."""

    layout = "bird"
    default_file = "dev.json"
    default_db_dir = "dev_databases"
    gold_keys = ("SQL",)
    id_keys = ("question_id",)

    def _check(self, examples: list[Example], path: Path) -> None:
        check_unique_ids(examples, path)
