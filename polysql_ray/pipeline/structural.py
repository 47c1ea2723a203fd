"""The structural stage: prove (gold, prediction) pairs equivalent before executing them.

Runs :class:`polysql_ray.comparison.ast.AstEquivalence` (sound: ``equivalent`` or
``unknown``, never "different") as Ray tasks over unique (gold SQL, gold dialect, predicted
SQL, target dialect) pairs, in batches. Modes (``pipeline.structural_check``):

* ``off``    - nothing runs; every verdict is observed by execution;
* ``prove``  - a proven prediction is not executed (basis ``proven``); the gold still runs, so
  a gold that fails on its own engine is still a gold error;
* ``verify`` - the structural decision is recorded but every prediction is executed too, so the
  store shows whether proof and execution ever disagree (they must not).
"""
from __future__ import annotations

import ray

from polysql_ray.pipeline.plan import WorkItem

MODES = ("off", "prove", "verify")


@ray.remote
def _prove_batch(pairs: list[tuple[str, str, str, str, str | None]]) -> list[str]:
    """``[(gold_sql, gold_dialect, pred_sql, pred_dialect, sqlite_schema_path), ...]`` ->
    ``["equivalent" | "unknown: <reason>", ...]``. Never raises: a checker error is unknown."""
    from polysql_ray.comparison.ast import AstEquivalence
    from polysql_ray.comparison.equivalence import read_sqlite_schema

    checker = AstEquivalence()
    schemas: dict[str, object] = {}
    out = []
    for gold_sql, gold_dialect, pred_sql, pred_dialect, schema_path in pairs:
        schema = None
        if gold_dialect != pred_dialect and schema_path:
            if schema_path not in schemas:
                schemas[schema_path] = read_sqlite_schema(schema_path)
            schema = schemas[schema_path]
        try:
            res = checker.check(gold_sql, gold_dialect, pred_sql, pred_dialect, schema=schema)
            out.append("equivalent" if res.decision == "equivalent" else f"unknown: {res.reason}")
        except Exception as exc:  # noqa: BLE001 — soundness: anything odd is "unknown"
            out.append(f"unknown: checker error {type(exc).__name__}")
    return out


class StructuralJob:
    """Structural checks in flight: :meth:`submit` them as Ray tasks (they need no replica, so
    the driver overlaps them with replication), then :meth:`apply` the decisions to the work
    items of the final plan.

    Errors: ``ValueError`` for an unknown mode.
    """

    def __init__(self, mode: str, batch_size: int = 256, policy=None) -> None:
        if mode not in MODES:
            raise ValueError(f"pipeline.structural_check must be one of {MODES}, got {mode!r}")
        self.mode, self.batch_size, self.policy = mode, batch_size, policy
        self.keys: list[tuple] = []
        self.refs: list = []
        self.pair_of: dict[str, tuple] = {}

    def submit(self, items: list[WorkItem]) -> "StructuralJob":
        """Start checking every item whose gold can run and whose prediction has SQL."""
        from polysql_ray.comparison.prepare import executed_sql
        from polysql_ray.engines.registry import default_dialect

        if self.mode == "off":
            return self
        seen: dict[tuple, None] = {}
        for it in items:
            ex, pred = it.example, it.prediction
            if it.gold is None or pred.status.value != "ok" or not pred.pred_sql.strip():
                continue
            schema_path = ex.database.location if ex.source_engine == "sqlite" else None
            pred_dialect = default_dialect(it.cell.target_engine)
            gold_sql, pred_sql = ex.gold_sql, pred.pred_sql
            if self.policy is not None:  # prove what runs (policy.distinct may rewrite both)
                gold_sql = executed_sql(gold_sql, ex.gold_dialect, self.policy)
                pred_sql = executed_sql(pred_sql, pred_dialect, self.policy)
            key = (gold_sql, ex.gold_dialect, pred_sql, pred_dialect, schema_path)
            self.pair_of[it.key] = key
            seen.setdefault(key, None)
        self.keys = list(seen)
        self.refs = [_prove_batch.options(num_cpus=0.25).remote(self.keys[i:i + self.batch_size])
                     for i in range(0, len(self.keys), self.batch_size)]
        return self

    def apply(self, items: list[WorkItem], progress=None) -> int:
        """Wait for the decisions, set ``item.structural``; in ``prove`` mode drop the
        prediction's execution for proven items. Returns the number of items proven."""
        if self.mode == "off":
            return 0
        task = progress.add("structural", len(self.keys)) if progress else None
        decision: dict[tuple, str] = {}
        for n, ref in enumerate(self.refs):
            start = n * self.batch_size
            decision.update(zip(self.keys[start:start + self.batch_size], ray.get(ref)))
            if progress:
                progress.advance(task, min(self.batch_size, len(self.keys) - start))
        proven = 0
        for it in items:
            key = self.pair_of.get(it.key)
            if key is None or it.pred is None:
                continue
            it.structural = decision[key]
            if it.structural == "equivalent":
                proven += 1
                if self.mode == "prove":
                    it.pred = None
                    it.deps = tuple(d for d in (it.gold, it.probe, it.ties_probe) if d is not None)
        return proven
