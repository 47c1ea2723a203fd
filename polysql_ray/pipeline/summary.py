"""The EX table printed at the end of a run and written as CSV beside the store.

It counts exactly as the statistics job and the leaderboard do: the run's rows are read with
:func:`polysql_ray.statistics.load.load_scores` (one row per question and cell, the latest
``scored_at`` wins) and counted by :func:`polysql_ray.statistics.ex.ex_table`.

One row per (model, dataset, dialect, instruction_level); :data:`COLUMNS` explains every column.
"""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from polysql_ray.statistics.ex import ex_table as _stats_ex_table
from polysql_ray.statistics.load import CELL, load_scores

#: One EX value of a run: a cell under one comparison policy.
RUN_CELL = (*CELL, "policy")
from polysql_ray.store.parquet import ResultsStore

#: (column, header on screen, meaning) in table order; the legend printed under the table.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("model", "model", ""),
    ("dataset", "dataset", ""),
    ("dialect", "dialect", ""),
    ("instruction_level", "level", ""),
    ("policy", "policy", "the comparison policy of the row's verdicts (policies=[...]: one row per policy, "
                         "scored from the same executions)"),
    ("n", "n", "questions in the cell"),
    ("correct", "correct", "predictions whose result set matches the gold's"),
    ("gold_errors", "gold err", "questions whose gold SQL could not run (e.g. a missing database); "
                                "not the model's fault, left out of EX"),
    ("unavailable", "unavail", "predictions whose target engine was down; left out of EX, rerun to score"),
    ("ex", "EX", "correct / (n - gold err - unavail), in %"),
    ("suite_ex", "suite EX", "suite.enabled: correct on the original database and on every database of its "
                             "distilled suite, in % of the questions with a suite (README: distilled test suites)"),
    ("suite_gap", "EX-suite", "EX minus suite EX over the same questions, in points: passes on the one "
                              "database that a suite database shows wrong"),
    ("ex_all", "EX all", "correct / n, in % (published figures count every question)"),
    ("timeouts", "t/o", "predictions stopped by the engine timeout (counted as wrong in EX)"),
    ("ex_no_timeouts", "EX no t/o", "EX with timeouts also left out of the denominator"),
    ("exec_errors", "exec err", "predictions that did not execute for another reason "
                                "(syntax, schema, runtime ...)"),
    ("proven", "proven", "verdicts proven by the structural check without executing"),
    ("inconclusive", "inconcl", "verdicts the data cannot decide (policy.inconclusive_flags, ties beyond "
                                "the probe window); counted in n, never correct"),
    ("ex_unflagged", "EX unflagged", "EX over the questions whose row carries no ambiguity flag "
                                     "(README: flags), beside EX over all"),
)

_SCHEMA = pa.schema([(c, pa.string()) if c in RUN_CELL else
                     (c, pa.float64()) if c in ("ex", "ex_all", "ex_no_timeouts", "ex_unflagged", "suite_ex",
                                                "suite_gap") else (c, pa.int64())
                     for c, _, _ in COLUMNS])


#: Store columns the EX table reads (:func:`polysql_ray.statistics.ex.ex_table` counts them).
EX_COLUMNS = ("basis", "flags", "generator", "cell_key", "suite_verdict")
#: Columns of the EX table shown only when some cell has suite verdicts (suite.enabled).
SUITE_TABLE_COLUMNS = ("suite_ex", "suite_gap")
#: DuckDB memory cap of the end-of-run EX table (it spills to its temp folder beyond it).
EX_TABLE_MEMORY = "256MB"
#: Cells aggregated per DuckDB query by the end-of-run EX table (about 30k rows of Spider).
EX_TABLE_CELLS = 32


def _pct(k: int, n: int) -> float | None:
    return round(100.0 * k / n, 2) if n else None


def _cells_in(path, filesystem=None) -> set[str] | None:
    """The ``cell_key`` values of a part file from its footer's row-group statistics (min ==
    max per row group), or None when the footer cannot tell (then the file is always read)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(str(path), filesystem=filesystem)
        idx = meta.schema.to_arrow_schema().get_field_index("cell_key")
        if idx < 0:
            return None
        cells = set()
        for rg in range(meta.num_row_groups):
            st = meta.row_group(rg).column(idx).statistics
            if st is None or not st.has_min_max or st.min != st.max:
                return None
            cells.add(st.min if isinstance(st.min, str) else bytes(st.min).decode())
        return cells
    except Exception:  # noqa: BLE001 - an unreadable footer: let DuckDB read (and report) it
        return None


def ex_table(store: ResultsStore | str | Path, cell_keys: list[str] | None = None) -> pa.Table:
    """EX table (Arrow, columns of :data:`COLUMNS`) over the stored rows of the given cells.

    Args:
        store: the results store (or its folder or object-store URI).
        cell_keys: restrict to these cells (all cells when None).

    Returns:
        One row per cell and policy, sorted by dataset, model, level, dialect, policy; empty
        when nothing is stored.
    """
    if cell_keys is not None and not cell_keys:
        return _SCHEMA.empty_table().drop_columns(list(SUITE_TABLE_COLUMNS))
    import tempfile

    import duckdb

    from polysql_ray.statistics.load import store_files, store_location

    try:
        files = store_files(store)
    except FileNotFoundError:
        return _SCHEMA.empty_table().drop_columns(list(SUITE_TABLE_COLUMNS))
    # only the counted columns, a few cells per query and a memory cap with spilling: the table
    # of a million-row store is aggregated without holding its SQL texts or all its rows. The
    # run's cells have one cell_key per (model, dataset, dialect, level), so cutting by cells
    # never splits a question's rows between two queries.
    groups = ([None] if cell_keys is None else
              [cell_keys[i:i + EX_TABLE_CELLS] for i in range(0, len(cell_keys), EX_TABLE_CELLS)])
    rows = []
    fs = store_location(store).fs  # opened once, not per part file
    cells_in = {f: _cells_in(f, fs) for f in files} if cell_keys is not None else {}
    con = duckdb.connect(config={"memory_limit": EX_TABLE_MEMORY, "threads": 1,
                                 "temp_directory": tempfile.gettempdir() + "/polysql-duckdb-spill"})
    try:
        for group in groups:
            # a file whose footer says it holds other cells only is not read for this group
            want = set(group or ())
            part = [f for f in files if group is None or cells_in[f] is None or cells_in[f] & want]
            if part:
                load_scores(store, con=con, cell_keys=group, columns=EX_COLUMNS, files=part)
                rows.extend(_stats_ex_table(con, RUN_CELL, ci_method=None))  # no CI shown: skip statsmodels
    finally:
        con.close()
    out = []
    for r in rows:
        counted = r["n"]
        out.append({
            **{c: r[c] for c in RUN_CELL}, "n": r["n_total"], "correct": r["correct"],
            "gold_errors": r["gold_errors"], "unavailable": r["unavailable"],
            "ex": _pct(r["correct"], counted), "ex_all": _pct(r["correct"], r["n_total"]),
            "timeouts": r["timeouts"], "ex_no_timeouts": _pct(r["correct"], counted - r["timeouts"]),
            "exec_errors": r["exec_errors"], "proven": r["proven"], "inconclusive": r["inconclusive"],
            "ex_unflagged": _pct(r["correct_unflagged"], r["n_unflagged"]),
            "suite_ex": _pct(r["suite_correct"], r["suite_n"]),
            "suite_gap": (round(_pct(r["suite_ex_correct"], r["suite_n"]) - _pct(r["suite_correct"], r["suite_n"]), 2)
                          if r["suite_n"] else None),
        })
    out.sort(key=lambda r: (r["dataset"], r["model"], r["instruction_level"], r["dialect"], r["policy"]))
    table = pa.Table.from_pylist(out, schema=_SCHEMA)
    if not any(r["suite_n"] for r in rows):  # no suite verdicts: the table of a run without suites
        table = table.drop_columns(list(SUITE_TABLE_COLUMNS))
    return table


def csv_bytes(table: pa.Table) -> bytes:
    """The EX table as CSV bytes (header row, comma-separated), for any store filesystem."""
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return sink.getvalue().to_pybytes()


def write_csv(table: pa.Table, path: str | Path) -> Path:
    """Write the EX table as CSV (header row, comma-separated)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pacsv.write_csv(table, path)
    return path


#: Why the gold generator does not score 100% on every dialect (printed under the table).
GOLD_NOTE = ("gold = the gold SQL itself, run on each target dialect: 100% on the source dialect; "
             "below 100% elsewhere because the gold was written for the source dialect "
             "(the gold SQL's portability: a reference, not a bound; a model writing the target "
             "dialect can exceed it).")


def legend_lines(table: pa.Table) -> list[str]:
    """The legend printed under the EX table: one line per column, plus the gold note."""
    lines = [f"{h}: {m}" for c, h, m in COLUMNS if m and c in table.column_names]
    if "model" in table.column_names and "gold" in set(table.column("model").to_pylist()):
        lines.append(GOLD_NOTE)
    return lines


def render(table: pa.Table, console, title: str = "Execution accuracy (EX, %)") -> None:
    """Print the EX table with rich, split column-wise to fit the console (each part repeats
    the cell columns, as the statistics job's tables do), and its legend under it."""
    from polysql_ray.reporting.console import view_tables
    from polysql_ray.reporting.views import Column, View

    cols = tuple(Column(h, c, "text" if c in RUN_CELL else "int") for c, h, _ in COLUMNS
                 if c in table.column_names)
    rows = tuple(table.to_pylist())
    for t in view_tables(View("ex", title, "", cols, rows), console.width):
        console.print(t)
    for line in legend_lines(table):
        console.print(f"  {line}", highlight=False, soft_wrap=False)


def stage_lines(stats) -> list[str]:
    """One line per stage of the run's :class:`~polysql_ray.pipeline.scheduler.StageClock`:
    ``stage  first start +s  last end +s`` (seconds from the run's start), in start order."""
    clock = getattr(stats, "clock", None)
    if clock is None:
        return []
    out = []
    for stage, t in clock.as_dict().items():
        a, b = t["first_start_s"], t["last_end_s"]
        out.append(f"{stage:<28} start {'-' if a is None else f'+{a:.1f}s':>9}  "
                   f"end {'-' if b is None else f'+{b:.1f}s':>9}")
    return out


def write_run_summary(store: ResultsStore, stats) -> Path:
    """Write ``runs/<run_id>/summary.json``: the run's counts, stage seconds and stage
    timestamps (``stages``: ``{stage: {first_start, last_end (UTC ISO), first_start_s,
    last_end_s (seconds from the run's start)}}``). Returns the path."""
    import json

    g = stats.generation
    doc = {
        "run_id": stats.run_id, "cells": stats.cells, "items_total": stats.items_total,
        "items_skipped": stats.items_skipped, "items_scored": stats.items_scored,
        "exec_requested": dict(stats.exec_requested), "exec_unique": dict(stats.exec_unique),
        "exec_reused": stats.exec_reused, "exec_repeated": getattr(stats, "exec_repeated", 0),
        "proven": stats.proven, "verdicts_reused": getattr(stats, "verdicts_reused", 0),
        "batches_scored_in_driver": getattr(stats, "batches_scored_in_driver", 0),
        "planned_ahead": getattr(stats, "planned_ahead", 0),
        "generated": getattr(g, "generated", 0), "generations_reused": getattr(g, "reused", 0),
        "wall_s": round(stats.wall_s, 3), "stage_s": {k: round(v, 3) for k, v in stats.stage_s.items()},
        "stages": stats.clock.as_dict() if getattr(stats, "clock", None) is not None else {},
    }
    if getattr(stats, "suite", None) is not None:  # suite EX: its cost (executions, seconds)
        doc["suite"] = stats.suite.summary()
    return store.write_bytes(f"runs/{stats.run_id}/summary.json",
                             (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
