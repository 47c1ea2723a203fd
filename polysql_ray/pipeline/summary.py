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
from polysql_ray.store.parquet import ResultsStore

#: (column, header on screen, meaning) in table order; the legend printed under the table.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("model", "model", ""),
    ("dataset", "dataset", ""),
    ("dialect", "dialect", ""),
    ("instruction_level", "level", ""),
    ("n", "n", "questions in the cell"),
    ("correct", "correct", "predictions whose result set matches the gold's"),
    ("gold_errors", "gold err", "questions whose gold SQL could not run (e.g. a missing database); "
                                "not the model's fault, left out of EX"),
    ("unavailable", "unavail", "predictions whose target engine was down; left out of EX, rerun to score"),
    ("ex", "EX", "correct / (n - gold err - unavail), in %"),
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

_SCHEMA = pa.schema([(c, pa.string()) if c in (*CELL,) else
                     (c, pa.float64()) if c in ("ex", "ex_all", "ex_no_timeouts", "ex_unflagged") else (c, pa.int64())
                     for c, _, _ in COLUMNS])


def _pct(k: int, n: int) -> float | None:
    return round(100.0 * k / n, 2) if n else None


def ex_table(store: ResultsStore | str | Path, cell_keys: list[str] | None = None) -> pa.Table:
    """EX table (Arrow, columns of :data:`COLUMNS`) over the stored rows of the given cells.

    Args:
        store: the results store (or its folder or object-store URI).
        cell_keys: restrict to these cells (all cells when None).

    Returns:
        One row per cell, sorted by dataset, model, level, dialect; empty when nothing is stored.
    """
    if cell_keys is not None and not cell_keys:
        return _SCHEMA.empty_table()
    try:
        con, _ = load_scores(store, cell_keys=cell_keys)
    except FileNotFoundError:
        return _SCHEMA.empty_table()
    try:
        rows = _stats_ex_table(con, CELL)
    finally:
        con.close()
    out = []
    for r in rows:
        counted = r["n"]
        out.append({
            **{c: r[c] for c in CELL}, "n": r["n_total"], "correct": r["correct"],
            "gold_errors": r["gold_errors"], "unavailable": r["unavailable"],
            "ex": _pct(r["correct"], counted), "ex_all": _pct(r["correct"], r["n_total"]),
            "timeouts": r["timeouts"], "ex_no_timeouts": _pct(r["correct"], counted - r["timeouts"]),
            "exec_errors": r["exec_errors"], "proven": r["proven"], "inconclusive": r["inconclusive"],
            "ex_unflagged": _pct(r["correct_unflagged"], r["n_unflagged"]),
        })
    out.sort(key=lambda r: (r["dataset"], r["model"], r["instruction_level"], r["dialect"]))
    return pa.Table.from_pylist(out, schema=_SCHEMA)


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
             "(the gold-portability ceiling; other models' drops include it).")


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

    cols = tuple(Column(h, c, "text" if c in CELL else "int") for c, h, _ in COLUMNS
                 if c in table.column_names)
    rows = tuple(table.to_pylist())
    for t in view_tables(View("ex", title, "", cols, rows), console.width):
        console.print(t)
    for line in legend_lines(table):
        console.print(f"  {line}", highlight=False, soft_wrap=False)
