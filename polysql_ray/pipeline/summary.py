"""The EX table printed at the end of a run and written as CSV beside the store.

One row per (model, dataset, dialect, instruction_level):

* ``n``: questions; ``gold_errors``: questions whose gold could not run (missing database ...),
  excluded from ``ex`` because they say nothing about the model;
* ``correct``; ``ex`` = correct / (n - gold_errors), in percent;
  ``ex_all`` = correct / n (the convention of published figures that count every question);
* ``timeouts``: predictions interrupted by the engine timeout; ``ex_no_timeouts`` excludes them
  from the denominator too (evaluation-notes section 4);
* ``exec_errors``: predictions that did not execute for another reason (syntax, schema ...);
* ``proven``: verdicts decided structurally without execution;
* ``inconclusive``: verdicts the data cannot decide (``policy.inconclusive_flags``, ties beyond
  the probe window); ``ex_unflagged``: EX over the questions whose row carries no ambiguity
  flag (:data:`polysql_ray.comparison.policy.AMBIGUITY_FLAGS`), beside ``ex`` over all.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv

from polysql_ray.comparison.policy import AMBIGUITY_FLAGS
from polysql_ray.store.parquet import ResultsStore

_FLAGGED = "regexp_matches(coalesce(flags, ''), '(^|,)(" + "|".join(AMBIGUITY_FLAGS) + ")(,|$)')"

_SQL = """
SELECT model, dataset, dialect, instruction_level,
       count(*)                                             AS n,
       count(*) FILTER (WHERE correct)                      AS correct,
       count(*) FILTER (WHERE verdict = 'gold_error')       AS gold_errors,
       round(100.0 * count(*) FILTER (WHERE correct)
             / nullif(count(*) FILTER (WHERE verdict <> 'gold_error'), 0), 2) AS ex,
       round(100.0 * count(*) FILTER (WHERE correct) / count(*), 2)          AS ex_all,
       count(*) FILTER (WHERE reason = 'pred_timeout')      AS timeouts,
       round(100.0 * count(*) FILTER (WHERE correct)
             / nullif(count(*) FILTER (WHERE verdict <> 'gold_error' AND reason <> 'pred_timeout'), 0), 2)
                                                            AS ex_no_timeouts,
       count(*) FILTER (WHERE verdict = 'fail' AND reason LIKE 'pred_%' AND reason <> 'pred_timeout')
                                                            AS exec_errors,
       count(*) FILTER (WHERE basis = 'proven')             AS proven,
       count(*) FILTER (WHERE verdict = 'inconclusive')     AS inconclusive,
       round(100.0 * count(*) FILTER (WHERE correct AND NOT FLAGGED)
             / nullif(count(*) FILTER (WHERE verdict <> 'gold_error' AND NOT FLAGGED), 0), 2)
                                                            AS ex_unflagged
FROM scores
GROUP BY ALL
ORDER BY dataset, model, instruction_level, dialect
""".replace("FLAGGED", _FLAGGED)


def ex_table(store: ResultsStore, cell_keys: list[str] | None = None) -> pa.Table:
    """EX table (Arrow) over the stored rows of the given cells (all cells when None)."""
    scores = store.read(cell_keys=cell_keys)
    con = duckdb.connect()
    con.register("scores", scores)
    return con.sql(_SQL).to_arrow_table()


def write_csv(table: pa.Table, path: str | Path) -> Path:
    """Write the EX table as CSV (header row, comma-separated)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pacsv.write_csv(table, path)
    return path


_TEXT = ("model", "dataset", "dialect", "instruction_level")
_HEADERS = {"instruction_level": "level", "gold_errors": "gold err", "ex_all": "EX all", "ex": "EX",
            "ex_no_timeouts": "EX no t/o", "exec_errors": "exec err", "timeouts": "t/o",
            "inconclusive": "inconcl", "ex_unflagged": "EX unflagged"}


def render(table: pa.Table, console, title: str = "Execution accuracy (EX, %)") -> None:
    """Print the EX table with rich."""
    from rich.table import Table

    t = Table(title=title)
    for name in table.column_names:
        t.add_column(_HEADERS.get(name, name), justify="left" if name in _TEXT else "right", no_wrap=True)
    for row in table.to_pylist():
        t.add_row(*["" if v is None else str(v) for v in row.values()])
    console.print(t)
