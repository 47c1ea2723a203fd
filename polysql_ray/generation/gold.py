"""Gold generator: answers each example with its own gold SQL.

A whole-pipeline sanity check: on the gold's own engine every example with a runnable gold
must score ``pass``; any other verdict is a bug in replication, execution or comparison. On
another dialect it measures how much of the gold SQL runs unchanged there (no translation).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GenStatus, Prediction


class GoldGenerator:
    """Returns ``Example.gold_sql`` for every example (status OK; NO_SQL when it is empty).

    Args:
        model: model name in the store (default ``gold``).
    """

    FINGERPRINT = "gold-v1"

    def __init__(self, model: str = "gold"):
        self.model = model

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "GoldGenerator":
        """From a model config ``{name?, generator: gold}``."""
        return cls(str(cfg.get("name") or "gold"))

    def fingerprint(self) -> str:
        """``gold-v1``: the output depends only on the dataset, which is keyed separately."""
        return self.FINGERPRINT

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example carrying its gold SQL, same order."""
        out = []
        for e in examples:
            sql = e.gold_sql.strip()
            if sql:
                out.append(Prediction(e.question_id, sql, GenStatus.OK, e.gold_sql))
            else:
                out.append(Prediction(e.question_id, "", GenStatus.NO_SQL, e.gold_sql, "example has empty gold SQL"))
        return out
