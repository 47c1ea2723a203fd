"""Archer layout: ``<root>/dev.json`` over the Spider databases.

Source: Zheng et al., 2024 (Archer: a human-labeled text-to-SQL dataset with arithmetic,
commonsense and hypothetical reasoning), dev release: 104 questions on Spider's
``concert_singer`` and ``world_1``. Records carry ``db_id``, ``question``, ``query`` (gold,
SQLite dialect), ``reasoning_type`` and ``commonsense_knowledge`` (kept in ``Example.extra``);
no id: ``question_id`` is the 0-based position, as in Spider.

Clock-dependent golds (24 in Archer dev) are flagged ``time_dependent_gold`` and keyed by the
clock value they read, as in every dataset (:mod:`polysql_ray.datasets.clock`).
"""
from __future__ import annotations

import datetime as dt
from typing import Any

from polysql_ray.datasets.clock import (  # noqa: F401 - re-exported for users of archer
    GRANULARITY, TIME_DEPENDENT_GOLD, _utcnow, clock_granularity, clock_value, mark_clock_dependent)
from polysql_ray.datasets.example import Example
from polysql_ray.datasets.spider import SpiderLoader


class ArcherLoader(SpiderLoader):
    """Loader for Archer (Spider layout, golds that may read the clock).

    Config keys as :class:`~polysql_ray.datasets.spider.SpiderLoader`; ``db_dir`` points at
    the Spider databases (``conf/dataset/archer.yaml``: ``../spider/database``).
    """

    layout = "archer"

    def __init__(self, now: dt.datetime | None = None) -> None:
        self.now = now  # fixed clock for tests; None reads the clock at load time

    def load(self, cfg: Any) -> list[Example]:
        """Examples in file order, clock-dependent golds flagged (module docstring)."""
        return list(mark_clock_dependent(super().load(cfg), self.now or _utcnow()))
