"""Per-question drill-down pages of a leaderboard snapshot: ``drill/<dataset>__<model>__<dialect>__<level>.html``.

One static page per evaluation cell, linked from the cells table of ``index.html``. Each
question that did not pass gets a block with the question text, gold SQL, predicted SQL,
verdict, reason code, flags, the engine error, the row counts and, for embedded target engines
(SQLite, DuckDB), a small diff of the two result sets (rows only in the gold's result, rows only
in the prediction's, as multisets, at most :data:`DIFF_ROWS` each). Passing questions are listed
compactly at the end.

Where the inputs come from:

* question text: the datasets named in the run manifests (``<results_dir>/runs/*/manifest.json``),
  loaded again; "(question text not available)" when a dataset cannot be loaded;
* result sets: the gold re-run on the source database and the prediction on the cell's replica
  (``<results_dir>/replicas/<engine>/<dataset>/<db_id>/``), read-only with the engines' own
  sandbox and :data:`DIFF_LIMITS`; server dialects (PostgreSQL, MySQL) show no diff, to keep a
  snapshot independent of running servers.
"""
from __future__ import annotations

import html
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import duckdb

from polysql_ray.datasets.base import FILE_ENGINES
from polysql_ray.statistics.load import SCORES_TABLE, dataset_index

from .views import drill_href

#: Rows shown per side of a result-set diff.
DIFF_ROWS = 5
#: Sandbox limits of the diff executions (seconds, rows).
DIFF_TIMEOUT_S = 5.0
DIFF_ROW_CAP = 5000
#: Failed questions per cell that get a result-set diff (the rest show SQL and reason only).
DIFF_PER_CELL = 40
#: Engines whose replicas are local files the snapshot may open (declared ``source_suffix``).
EMBEDDED = FILE_ENGINES

_CSS = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }
.q { border: 1px solid #ccc; border-radius: 4px; padding: 0.6em 1em; margin: 0.8em 0; }
.q h3 { margin: 0 0 0.3em 0; font-size: 15px; }
pre { background: #f6f6f6; padding: 6px; white-space: pre-wrap; word-break: break-word; margin: 0.2em 0; }
.fail { color: #b00; } .pass { color: #070; } .meta { color: #555; font-size: 13px; }
table.diff { border-collapse: collapse; font-size: 12px; margin: 0.3em 0; }
table.diff td, table.diff th { border: 1px solid #ddd; padding: 2px 6px; }
"""


def _replica(results_dir: Path, engine: str, dataset: str, db_id: str) -> str | None:
    folder = results_dir / "replicas" / engine / dataset / db_id
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.iterdir() if p.suffix in (".duckdb", ".sqlite", ".db"))
    return str(files[0]) if files else None


def _rows(table) -> list[tuple[str, ...]]:
    cols = [c.to_pylist() for c in table.columns]
    return [tuple("NULL" if v is None else str(v) for v in row) for row in zip(*cols)]


def result_diff(gold_rows: list[tuple], pred_rows: list[tuple], limit: int = DIFF_ROWS) -> dict:
    """Multiset difference of two result sets (rows as tuples of text).

    Returns:
        ``{"only_gold": [...], "only_pred": [...], "n_only_gold": int, "n_only_pred": int}``
        (at most ``limit`` rows per side, in first-seen order).
    """
    g, p = Counter(gold_rows), Counter(pred_rows)
    only_g, only_p = g - p, p - g

    def first(rows: list[tuple], left: Counter) -> list[tuple]:
        out, seen = [], Counter()
        for r in rows:
            if seen[r] < left[r] and len(out) < limit:
                out.append(r)
                seen[r] += 1
        return out

    return {"only_gold": first(gold_rows, only_g), "only_pred": first(pred_rows, only_p),
            "n_only_gold": sum(only_g.values()), "n_only_pred": sum(only_p.values())}


class _Runner:
    """Runs SQL read-only on embedded engines for diffs (engines made once, closed at the end)."""

    def __init__(self) -> None:
        from polysql_ray.engines.base import Limits

        self.limits = Limits(timeout_s=DIFF_TIMEOUT_S, row_cap=DIFF_ROW_CAP)
        self.engines: dict = {}

    def run(self, engine: str, location: str, sql: str):
        """Re-run ``sql`` read-only in ``engine``'s sandbox (the run's limits); returns the Arrow
        table, or the engine's error text / status when it did not run."""
        from polysql_ray.engines.registry import make_engine

        if engine not in self.engines:
            self.engines[engine] = make_engine(engine)
        res = self.engines[engine].execute(location, sql, self.limits)
        return res.table if res.ok else res.error or res.status.value

    def close(self) -> None:
        """Close every engine opened by :meth:`run`."""
        for e in self.engines.values():
            try:
                e.close()
            except Exception:  # noqa: BLE001 - closing never hides the report
                pass


def _diff_html(d: dict, gold_cols: int, pred_cols: int) -> str:
    out = [f'<div class="meta">result-set diff (multisets): {d["n_only_gold"]} row(s) only in the '
           f'gold result, {d["n_only_pred"]} only in the prediction\'s; columns {gold_cols} vs '
           f"{pred_cols}</div>"]
    for title, rows in (("only in gold", d["only_gold"]), ("only in prediction", d["only_pred"])):
        if rows:
            body = "".join("<tr>" + "".join(f"<td>{html.escape(v[:80])}</td>" for v in r) + "</tr>"
                           for r in rows)
            out.append(f'<table class="diff"><tr><th colspan="99">{title}</th></tr>{body}</table>')
    return "".join(out)


def _block(r: dict, question: str | None, diff: str) -> str:
    cls = "pass" if r["verdict"] == "pass" else "fail"
    esc = html.escape
    return (
        f'<div class="q" id="q-{esc(r["question_id"])}"><h3>Question {esc(r["question_id"])} '
        f'<span class="meta">({esc(r["db_id"] or "")})</span> '
        f'<span class="{cls}">{esc(r["verdict"])}: {esc(r["reason"] or "")}</span></h3>'
        f"<div>{esc(question or '(question text not available)')}</div>"
        f'<div class="meta">flags: {esc(r["flags"] or "none")}; basis: {esc(r["basis"] or "")}; '
        f'prediction status: {esc(r["pred_status"] or "")}; rows gold / prediction: '
        f'{r["gold_rows"] if r["gold_rows"] is not None else "-"} / '
        f'{r["pred_rows"] if r["pred_rows"] is not None else "-"}</div>'
        f"<div>Gold SQL</div><pre>{esc(r['gold_sql'] or '')}</pre>"
        f"<div>Predicted SQL</div><pre>{esc(r['pred_sql'] or '(none)')}</pre>"
        + (f"<div>Engine error</div><pre>{esc((r['pred_error'] or '')[:600])}</pre>"
           if r.get("pred_error") else "")
        + diff + "</div>")


def _qkey(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


def write_drill_pages(results_dir: str | Path, out_dir: str | Path, con: duckdb.DuckDBPyConnection,
                      cells: Iterable[dict], diff_per_cell: int = DIFF_PER_CELL) -> list[Path]:
    """Write one drill-down page per cell into ``<out_dir>/drill/``.

    Args:
        results_dir: the results store folder (runs, replicas).
        con: connection holding the loaded ``scores`` table
            (:func:`polysql_ray.statistics.load.load_scores`).
        cells: rows with ``model, dataset, dialect, instruction_level`` (the cells table).
        diff_per_cell: failed questions per cell that get a result-set diff.

    Returns:
        The pages written, in cell order.
    """
    results_dir, out = Path(results_dir), Path(out_dir)
    (out / "drill").mkdir(parents=True, exist_ok=True)
    questions, sources = dataset_index(results_dir)
    runner = _Runner()
    pages = []
    try:
        for cell in cells:
            rows = con.execute(
                f"""SELECT question_id, db_id, gold_sql, pred_sql, verdict, reason, flags, basis,
                           pred_status, pred_error, gold_rows, pred_rows, target_engine, source_engine
                    FROM {SCORES_TABLE}
                    WHERE model = ? AND dataset = ? AND dialect = ? AND instruction_level = ?""",
                [cell["model"], cell["dataset"], cell["dialect"], cell["instruction_level"]]).fetchall()
            names = ("question_id", "db_id", "gold_sql", "pred_sql", "verdict", "reason", "flags", "basis",
                     "pred_status", "pred_error", "gold_rows", "pred_rows", "target_engine", "source_engine")
            rows = sorted((dict(zip(names, r)) for r in rows), key=lambda r: _qkey(str(r["question_id"])))
            wrong = [r for r in rows if r["verdict"] != "pass"]
            right = [r for r in rows if r["verdict"] == "pass"]
            blocks, diffs = [], 0
            for r in wrong:
                diff = ""
                src = sources.get((cell["dataset"], r["db_id"]))
                eng = r["target_engine"] or cell["dialect"]
                if (diffs < diff_per_cell and r["verdict"] == "fail" and r["pred_status"] == "ok"
                        and src and eng in EMBEDDED and src[0] in EMBEDDED):
                    loc = src[1] if eng == src[0] else _replica(results_dir, eng, cell["dataset"], r["db_id"])
                    if loc:
                        g = runner.run(src[0], src[1], r["gold_sql"])
                        p = runner.run(eng, loc, r["pred_sql"])
                        if not isinstance(g, str) and not isinstance(p, str):
                            diff = _diff_html(result_diff(_rows(g), _rows(p)), g.num_columns, p.num_columns)
                            diffs += 1
                blocks.append(_block(r, questions.get((cell["dataset"], str(r["question_id"]))), diff))
            passed = ", ".join(html.escape(str(r["question_id"])) for r in right) or "none"
            title = (f"{cell['model']} on {cell['dialect']} - {cell['dataset']}, level "
                     f"{cell['instruction_level']}")
            page = out / drill_href(cell)
            page.write_text(
                "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
                f'<p><a href="../index.html">back to the leaderboard</a></p>'
                f"<h1>{html.escape(title)}</h1>"
                f'<p class="meta">{len(rows)} questions: {len(right)} pass, {len(wrong)} not '
                f"(listed first; a result-set diff for up to {diff_per_cell} failures on embedded "
                f"engines).</p>" + "\n".join(blocks)
                + f"<h2>Passed</h2><p class=\"meta\">{passed}</p></body></html>\n",
                encoding="utf-8", newline="\n")
            pages.append(page)
    finally:
        runner.close()
    return pages
