"""Arrow schema of one row in ``<results_dir>/scores/**/*.parquet``: one scored prediction.

Key: ``key = sha256(cell_key, question_id)``, ``cell_key = sha256(model, generator fingerprint,
dataset, dialect, instruction_level, comparison policy fingerprint, sandbox limits)``. A rerun of the same sweep
finds every key already stored and skips it.

Verdict vocabulary (stored verbatim):

* ``verdict``: ``pass`` | ``fail`` | ``inconclusive`` | ``gold_error``; ``unavailable`` only
  in ``<results_dir>/unavailable/`` (an execution could not run: infrastructure, rescored).
* ``correct``: ``verdict == "pass"``.
* ``reason``: ``match`` on a pass; for result-set mismatches a comparison reason code
  (``column_count``, ``row_count``, ``order``, ``values`` ...); ``pred_<status>`` when the
  prediction did not execute (``pred_syntax``, ``pred_timeout`` ...); ``gold_<status>`` for
  gold errors; ``no_sql`` / ``missing`` when the generator produced nothing.
* ``basis``: ``observed`` (dual execution), ``proven`` (structural equivalence), ``judged``.
* ``flags``: comma-separated caveats (``ties_at_limit`` ...), "" when none.
* ``structural``: the structural check's decision (``equivalent`` | ``unknown``: reason) or ""
  when it did not run; ``trail``: which layers ran and what each decided, in order
  (``structural:equivalent`` or ``structural:unknown>execution:fail``).
* ``pred_status`` is ``skipped`` when a structural proof made executing the prediction moot.
* ``score_s``: seconds the comparison of this item took in its scoring task; 0.0 when the
  verdict was reused from an identical item of the same run (``pipeline.verdict_cache_size``,
  :mod:`polysql_ray.pipeline.scheduler`).
* ``policy``: the name of the comparison policy (``default``, ``testsuite``, ``bird`` ...) the
  row was scored under; one row per policy of ``policies=[...]`` (its fingerprint is in the
  key). Null in rows stored before the column existed: they read as ``default``
  (:func:`polysql_ray.statistics.load.load_scores`).

Suite EX columns (additive, :data:`SUITE_COLUMNS`; null when ``suite.enabled`` is false or the
question's database has no suite; a store written before them still reads, :func:`conform`):

* ``suite_key``: the suite's identity ``suite-4:<fingerprint[:16]>`` (:meth:`Suite.key`).
* ``suite_verdict``: ``pass`` when the prediction matches the gold on the original database
  *and* on every suite database; ``fail`` when it passed on the original and fails on one
  suite database that decides (one where the gold itself is ambiguous, ties at its LIMIT cut,
  or where the prediction's verdict is inconclusive, is left out and flagged); ``unavailable``
  when a suite execution could not run (infrastructure: left out of suite EX);
  otherwise (no pass on the original) the row's own ``verdict``.
* ``suite_failed_db``: the first suite database (``<db_id>_<k>``) it failed on (or whose
  execution was unavailable), "" when none; ``suite_reason``: the comparison reason there;
  ``suite_flags``: ambiguity flags per suite database, ``<db>:<flag>[+<flag>]`` joined by ``,``;
  ``suite_dbs``: suite databases that decided (0 when the suite did not run: no pass on the original).
"""
from __future__ import annotations

import pyarrow as pa

SCORE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("cell_key", pa.string()),
        ("run_id", pa.string()),
        ("model", pa.string()),
        ("generator", pa.string()),
        ("generator_fingerprint", pa.string()),
        ("dataset", pa.string()),
        ("dialect", pa.string()),
        ("source_engine", pa.string()),
        ("target_engine", pa.string()),
        ("instruction_level", pa.string()),
        ("question_id", pa.string()),
        ("db_id", pa.string()),
        ("gold_sql", pa.string()),
        ("pred_sql", pa.string()),
        ("gen_status", pa.string()),
        ("gold_status", pa.string()),
        ("gold_error", pa.string()),
        ("pred_status", pa.string()),
        ("pred_error", pa.string()),
        ("correct", pa.bool_()),
        ("verdict", pa.string()),
        ("reason", pa.string()),
        ("basis", pa.string()),
        ("flags", pa.string()),
        ("structural", pa.string()),
        ("trail", pa.string()),
        ("policy_version", pa.string()),
        ("gold_rows", pa.int64()),
        ("pred_rows", pa.int64()),
        ("gold_exec_s", pa.float64()),
        ("pred_exec_s", pa.float64()),
        ("score_s", pa.float64()),
        ("scored_at", pa.timestamp("us", tz="UTC")),
        # suite EX (additive: older stores lack them; read through conform())
        ("suite_key", pa.string()),
        ("suite_verdict", pa.string()),
        ("suite_failed_db", pa.string()),
        ("suite_reason", pa.string()),
        ("suite_flags", pa.string()),
        ("suite_dbs", pa.int64()),
        # additive (older parts lack it; read through conform()): the comparison policy's name
        ("policy", pa.string()),
    ]
)

#: Columns added after the first schema: absent from older part files, read as nulls.
SUITE_COLUMNS = ("suite_key", "suite_verdict", "suite_failed_db", "suite_reason", "suite_flags", "suite_dbs")


def conform(table: pa.Table) -> pa.Table:
    """``table`` with exactly SCORE_SCHEMA's columns, in order and cast: a column the table
    lacks (a part file written before an additive column existed) becomes all nulls.
    Errors: pyarrow's own when a present column cannot be cast."""
    for name in SCORE_SCHEMA.names:
        if name not in table.column_names:
            field = SCORE_SCHEMA.field(name)
            table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table.select(SCORE_SCHEMA.names).cast(SCORE_SCHEMA)

VERDICTS = ("pass", "fail", "inconclusive", "gold_error", "unavailable")
BASES = ("observed", "proven", "judged")
