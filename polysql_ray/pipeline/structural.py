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


def run_structural(items: list[WorkItem], mode: str, batch_size: int = 256, progress=None) -> int:
    """Decide ``item.structural`` for every item with a runnable prediction; in ``prove`` mode
    drop the prediction's execution for proven items. Returns the number proven.

    Errors: ``ValueError`` for an unknown mode.
    """
    from polysql_ray.engines.registry import default_dialect

    if mode not in MODES:
        raise ValueError(f"pipeline.structural_check must be one of {MODES}, got {mode!r}")
    if mode == "off":
        return 0
    pairs: dict[tuple, list[WorkItem]] = {}
    for it in items:
        if it.gold is None or it.pred is None:
            continue
        ex = it.example
        schema_path = ex.database.location if ex.source_engine == "sqlite" else None
        key = (ex.gold_sql, ex.gold_dialect, it.prediction.pred_sql, default_dialect(it.cell.target_engine), schema_path)
        pairs.setdefault(key, []).append(it)
    keys = list(pairs)
    task = progress.add("structural", len(keys)) if progress else None
    refs = [(_prove_batch.options(num_cpus=0.25).remote(keys[i:i + batch_size]), i)
            for i in range(0, len(keys), batch_size)]
    proven = 0
    for ref, start in refs:
        for key, decision in zip(keys[start:start + batch_size], ray.get(ref)):
            for it in pairs[key]:
                it.structural = decision
                if decision == "equivalent":
                    proven += 1
                    if mode == "prove":
                        it.pred = None
                        it.deps = tuple(d for d in (it.gold, it.probe) if d is not None)
        if progress:
            progress.advance(task, min(batch_size, len(keys) - start))
    return proven
