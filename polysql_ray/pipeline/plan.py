"""Planning: from the composed config to run cells, work items and unique executions.

Nothing here executes SQL. The plan is pure data the driver schedules on Ray:

* a :class:`Cell` per (model, dataset, dialect, instruction level) of the grid,
* a :class:`WorkItem` per (cell, question) not yet in the results store,
* an :class:`ExecRequest` per unique (engine, database location, SQL) — the gold of a question
  is executed once and reused by every model and dialect; identical predictions (the gold
  generator on the source dialect, two models writing the same SQL) are executed once.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import Prediction


@dataclass(frozen=True)
class Cell:
    """One cell of the sweep grid.

    Attributes:
        key: deterministic cell key (see :func:`polysql_ray.store.parquet.cell_key`).
        model / generator / generator_fingerprint: who produced the SQL.
        dataset / dialect / instruction_level: the grid coordinates.
        target_engine: engine that runs predictions written for ``dialect``.
        policy: name of the comparison policy the cell is scored under (``Grid.policies``;
            one cell per policy of ``policies=[...]``, sharing every execution).
    """

    key: str
    model: str
    generator: str
    generator_fingerprint: str
    dataset: str
    dialect: str
    target_engine: str
    instruction_level: str
    policy: str = "default"


@dataclass(frozen=True)
class ExecRequest:
    """One unique execution: ``sql`` on ``engine`` against the database at ``location``."""

    key: str
    engine: str
    location: str
    sql: str
    db_id: str


def exec_key(engine: str, location: str, sql: str) -> str:
    """Identity of an execution: same engine, same database copy, byte-identical SQL."""
    h = hashlib.sha256()
    for part in (engine, location, sql):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:32]


@dataclass
class WorkItem:
    """One prediction to score, with the executions it depends on.

    ``gold`` / ``probe`` / ``pred`` are ExecRequest keys (None when there is nothing to run:
    a gold error, or a prediction without SQL).
    """

    key: str
    cell: Cell
    example: Example
    prediction: Prediction
    gold: str | None
    probe: str | None
    pred: str | None
    shape: object = None
    structural: str = ""        # "" (not run) | "equivalent" | "unknown: <reason>"
    deps: tuple[str, ...] = field(default=())
    ties_probe: str | None = None  # nested ORDER BY ... LIMIT tie check of the gold (shape.py)
    pred_shape: object = None      # PredShape of the prediction that runs (shape.py)
    pred_probe: str | None = None  # the prediction's own LIMIT cut, widened (shape.PredShape)
    pred_ties_probe: str | None = None  # nested cuts / ungrouped columns of the prediction

    def __post_init__(self) -> None:
        self.deps = tuple(k for k in (self.gold, self.probe, self.ties_probe, self.pred, self.pred_probe,
                                      self.pred_ties_probe) if k is not None)

    @property
    def proven(self) -> bool:
        """The structural check proved the prediction equivalent to the gold."""
        return self.structural == "equivalent"
