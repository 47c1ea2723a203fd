"""Synthetic results stores with the real row schema, for tests, demos and benchmarks.

Nothing here is used to score anything: it writes rows of
:data:`polysql_ray.store.schema.SCORE_SCHEMA` with chosen verdicts so statistics and reports
can be checked against hand-computed values.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from polysql_ray.store.schema import SCORE_SCHEMA

_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)

#: (verdict, reason, pred_status, gold_status) for an outcome name used by :func:`score_row`.
OUTCOMES = {
    "pass": ("pass", "match", "ok", "ok"),
    "values": ("fail", "values", "ok", "ok"),
    "row_count": ("fail", "row_count", "ok", "ok"),
    "column_count": ("fail", "column_count", "ok", "ok"),
    "order": ("fail", "order", "ok", "ok"),
    "syntax": ("fail", "pred_syntax", "syntax", "ok"),
    "schema": ("fail", "pred_schema", "schema", "ok"),
    "runtime": ("fail", "pred_runtime", "runtime", "ok"),
    "timeout": ("fail", "pred_timeout", "timeout", "ok"),
    "too_large": ("fail", "pred_too_large", "too_large", "ok"),
    "no_sql": ("fail", "no_sql", "empty", "ok"),
    "unavailable": ("inconclusive", "pred_unavailable", "unavailable", "ok"),
    "gold_error": ("gold_error", "gold_runtime", "ok", "runtime"),
}


def _h(*parts: object) -> str:
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()


def score_row(model: str, dataset: str, dialect: str, instruction_level: str,
              question_id: str, outcome: str = "pass", scored_at_s: float = 0.0,
              policy_version: str = "policy-1", **overrides: object) -> dict:
    """One store row (a dict over every SCORE_SCHEMA column).

    Args:
        outcome: a key of :data:`OUTCOMES` setting verdict, reason and statuses.
        scored_at_s: seconds after 2026-01-01T00:00Z for ``scored_at``.
        overrides: any other column value.
    """
    verdict, reason, pred_status, gold_status = OUTCOMES[outcome]
    cell_key = _h(model, "gen-fp", dataset, dialect, instruction_level, policy_version)
    row = {name: None for name in SCORE_SCHEMA.names}
    row.update(
        key=_h(cell_key, question_id), cell_key=cell_key, run_id="run-0", model=model,
        generator="synthetic", generator_fingerprint="gen-fp", dataset=dataset, dialect=dialect,
        source_engine="sqlite", target_engine=dialect, instruction_level=instruction_level,
        question_id=question_id, db_id="db", gold_sql="SELECT 1", pred_sql="SELECT 1",
        gen_status="ok", gold_status=gold_status, gold_error=None, pred_status=pred_status,
        pred_error=None, correct=verdict == "pass", verdict=verdict, reason=reason,
        basis="observed", flags="", policy_version=policy_version, gold_rows=1, pred_rows=1,
        gold_exec_s=0.001, pred_exec_s=0.001, score_s=0.002,
        scored_at=_EPOCH + timedelta(seconds=scored_at_s),
    )
    row.update(overrides)
    return row


def write_store(results_dir: str | Path, rows: list[dict], name: str = "part-0") -> Path:
    """Write rows to ``<results_dir>/scores/<name>.parquet`` with SCORE_SCHEMA; returns the path."""
    path = Path(results_dir) / "scores" / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCORE_SCHEMA), path)
    return path


#: Per-dialect EX offsets used by :func:`random_store` (a plausible difficulty ordering).
DIALECT_OFFSETS = {"sqlite": 0.0, "duckdb": -0.05, "postgres": -0.08, "mysql": -0.08,
                   "clickhouse": -0.15}


def random_store(results_dir: str | Path, models: dict[str, float] | None = None,
                 dialects: dict[str, float] | None = None, datasets: tuple[str, ...] = ("spider",),
                 levels: tuple[str, ...] = ("basic",), n_questions: int = 200, seed: int = 0,
                 files_per_model: int = 1) -> list[Path]:
    """Write a random store: per-question difficulty shared across dialects (so kappa > 0).

    Args:
        models: model name -> base skill (probability-ish of a pass on SQLite).
        dialects: dialect -> additive skill offset (default :data:`DIALECT_OFFSETS`).
        n_questions: questions per dataset; question ``q0`` of each dataset is a gold error.

    Returns:
        the Parquet files written (one or more per model).
    """
    rng = np.random.default_rng(seed)
    models = models or {"model-a": 0.8, "model-b": 0.7, "model-c": 0.6}
    dialects = dialects or DIALECT_OFFSETS
    fail_kinds = ["values", "row_count", "column_count", "order", "syntax", "schema", "runtime",
                  "timeout", "no_sql"]
    fail_p = np.array([30, 15, 5, 3, 12, 10, 5, 3, 2], dtype=float)
    fail_p /= fail_p.sum()
    difficulty = {(d, q): rng.normal(0, 1.2) for d in datasets for q in range(n_questions)}
    paths = []
    for m, skill in sorted(models.items()):
        rows = []
        for ds in datasets:
            for lv in levels:
                for q in range(n_questions):
                    for di, off in sorted(dialects.items()):
                        if q == 0:
                            outcome = "gold_error"
                        else:
                            logit = np.log(skill / (1 - skill)) + 4 * off - difficulty[(ds, q)]
                            u = rng.random()
                            outcome = ("pass" if u < 1 / (1 + np.exp(-logit))
                                       else str(rng.choice(fail_kinds, p=fail_p)))
                        rows.append(score_row(m, ds, di, lv, f"q{q}", outcome,
                                              scored_at_s=float(q)))
        for i in range(files_per_model):
            paths.append(write_store(results_dir, rows[i::files_per_model], f"{m}/part-{i}"))
    return paths
