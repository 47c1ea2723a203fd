"""Report views: the tables a leaderboard shows, as data (title, columns, rows).

One :class:`View` feeds every renderer (Markdown, HTML, rich), so the formats cannot drift.
Cell values stay raw (numbers, strings, None); :data:`FORMATS` say how a column kind prints.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the run's EX table uses these views without SciPy
    from polysql_ray.statistics.summary import Statistics


def _num(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and not (
        isinstance(x, float) and math.isnan(x))


def fmt_pct(x: object) -> str:
    """A fraction as a percentage with one decimal (``0.8312 -> "83.1"``); ``-`` if missing."""
    return f"{100 * x:.1f}" if _num(x) else "-"


def fmt_ci(x: object) -> str:
    """A ``(low, high)`` fraction pair as ``[80.2, 85.7]`` percent; ``-`` if missing."""
    if isinstance(x, (tuple, list)) and len(x) == 2 and _num(x[0]) and _num(x[1]):
        return f"[{100 * x[0]:.1f}, {100 * x[1]:.1f}]"
    return "-"


def fmt_p(x: object) -> str:
    """A p-value with 3 significant digits (``<1e-10`` below that); ``-`` if missing."""
    if not _num(x):
        return "-"
    return "<1e-10" if x < 1e-10 else f"{x:.3g}"


def fmt_f3(x: object) -> str:
    """A float with 3 decimals; ``-`` if missing."""
    return f"{x:.3f}" if _num(x) else "-"


def fmt_f1(x: object) -> str:
    """A float with 1 decimal (e.g. percentage points); ``-`` if missing."""
    return f"{x:+.1f}" if _num(x) else "-"


def fmt_plain(x: object) -> str:
    """Integers, booleans and strings as text; None as ``-``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    return str(x)


def fmt_link(x: object) -> str:
    """A ``(text, href)`` pair as its text (renderers that know links use the href)."""
    if isinstance(x, (tuple, list)) and len(x) == 2:
        return str(x[0])
    return fmt_plain(x)


def fmt_range(x: object) -> str:
    """A ``(best, worst)`` rank pair as ``1`` or ``1-3``; ``-`` if missing."""
    if isinstance(x, (tuple, list)) and len(x) == 2 and _num(x[0]) and _num(x[1]):
        return f"{x[0]}" if x[0] == x[1] else f"{x[0]}-{x[1]}"
    return "-"


#: Column kind -> formatter.
FORMATS: dict[str, Callable[[object], str]] = {
    "pct": fmt_pct, "ci": fmt_ci, "p": fmt_p, "f3": fmt_f3, "pts": fmt_f1, "text": fmt_plain,
    "int": fmt_plain, "link": fmt_link, "range": fmt_range,
}


@dataclass(frozen=True)
class Column:
    """One column of a view.

    Attributes:
        header: printed header.
        key: row dict key.
        kind: a key of :data:`FORMATS`.
    """

    header: str
    key: str
    kind: str = "text"

    def format(self, row: dict) -> str:
        """The formatted cell of ``row``."""
        return FORMATS[self.kind](row.get(self.key))


@dataclass(frozen=True)
class View:
    """A titled table.

    Attributes:
        slug: identifier (HTML id).
        title: section heading.
        note: one-sentence explanation printed under the heading.
        columns: the columns.
        rows: the row dicts, already in display order.
    """

    slug: str
    title: str
    note: str
    columns: tuple[Column, ...]
    rows: tuple[dict, ...]


def dialect_order(st: Statistics) -> list[str]:
    """Dialects easiest first (the difficulty hierarchy), baseline first when present."""
    order = [r["dialect"] for r in st.hierarchy]
    seen = {r["dialect"] for r in st.ex_dialect}
    order += sorted(seen - set(order))
    base = st.config.baseline
    return ([base] if base in order else []) + [d for d in order if d != base]


#: Leaderboard row label of the gold SQL run on every dialect: its portability, a reference
#: (models that write the target dialect's SQL can exceed it), not a bound.
GOLD_ROW = "(gold SQL portability: reference, not a bound)"

#: Marker after a dialect or judge that ran on a stand-in (renderers may style it as a badge).
STANDIN_BADGE = "[stand-in]"


def standins(st: Statistics) -> dict[str, str]:
    """``{dialect: stand-in}`` of the dialects scored on a stand-in engine (``st.provenance``)."""
    from polysql_ray.statistics.provenance import standin_dialects

    return standin_dialects(getattr(st, "provenance", None) or [])


def dialect_label(d: str, fake: dict[str, str]) -> str:
    """A dialect's name, with :data:`STANDIN_BADGE` when it ran on a stand-in."""
    return f"{d} {STANDIN_BADGE}" if d in fake else d


def has_suite(rows) -> bool:
    """Some row carries suite EX counts (``suite.enabled`` runs; :data:`~polysql_ray.statistics.ex.SUITE_FIELDS`)."""
    return any((r.get("suite_n") or 0) > 0 for r in rows)


def _suite_cells(row: dict, d: str, c: dict | None) -> None:
    """Suite EX and the EX - suite EX gap (points, same questions) of cell ``c`` into ``row``."""
    row[f"sx:{d}"] = c.get("suite_ex") if c and c.get("suite_n") else None
    gap = c.get("suite_gap") if c and c.get("suite_n") else None
    row[f"gap:{d}"] = 100 * gap if _num(gap) else None


def native_agreement(st: Statistics) -> dict[str, dict]:
    """``{dialect: {"agreement", "scored", "agree", "datasets"}}``: each dialect's verdict
    agreement on independently written native gold, pooled over datasets
    (:func:`polysql_ray.statistics.native_gold.pooled_agreement`); empty when
    ``jobs.fidelity step=native`` has not written into the store's folder."""
    from polysql_ray.statistics.native_gold import pooled_agreement

    return pooled_agreement(getattr(st, "native_gold_agreement", None) or [])


def agreement_label(d: str, label: str, agr: dict[str, dict], with_ci: bool = True) -> str:
    """The EX column header of dialect ``d``, with its verdict agreement where ``agr`` has it:
    ``mysql EX % (verdict agreement 97.1%, n=972)`` (terminal width: ``mysql (agr 97.1%)``)."""
    a = agr.get(d)
    if a is None:
        return f"{label} EX %" if with_ci else label
    if with_ci:
        return f"{label} EX % (verdict agreement {fmt_pct(a['agreement'])}%, n={a['scored']})"
    return f"{label} (agr {fmt_pct(a['agreement'])}%)"


def _agreement_note(agr: dict[str, dict]) -> str:
    """The leaderboard's legend line of the verdict agreements (empty without any)."""
    if not agr:
        return ""
    each = "; ".join(f"{d}: {a['agree']} of {a['scored']} ({', '.join(a['datasets'])})" for d, a in sorted(agr.items()))
    return (f" Verdict agreement (in a dialect's header): the share of gold SQL written independently for "
            f"that dialect that the evaluator calls correct against the source gold on the same replica "
            f"(python -m jobs.fidelity step=native), i.e. how far the dialect's verdicts can be trusted; "
            f"{each}. Every disagreement with its reason: see 'Native-gold agreement'.")


def native_gold_view(st: Statistics) -> View:
    """Per (dataset, dialect): the native gold's verdict agreement, its Wilson 95% CI, the
    disagreements by reason, and links to their drill-down page and the job's report."""
    from polysql_ray.statistics.ex import proportion_ci
    from polysql_ray.statistics.native_gold import cell

    rows = []
    for r in getattr(st, "native_gold_agreement", None) or []:
        ci = proportion_ci(r["agree"], r["scored"], st.config.alpha, st.config.ci_method) if r["scored"] else None
        rows.append({**r, "ci": ci, "drill": (f"{r['disagreements']} disagreements",
                                              drill_href(cell(r["dataset"], r["dialect"])))})
    cols = (Column("Dataset", "dataset"), Column("Dialect", "dialect"), Column("Scored", "scored", "int"),
            Column("Agree", "agree", "int"), Column("Verdict agreement %", "agreement", "pct"),
            Column("95% CI", "ci", "ci"), Column("Disagreements", "drill", "link"),
            Column("By reason", "by_reason"), Column("Report", "report"))
    return View("native-gold", "Native-gold agreement: the evaluator's own error rate per dialect",
                "Gold SQL written independently for a dialect (SpiderMan's MySQL gold, gold_sql_<dialect> "
                "columns, overlay files) scored as predictions against the source gold on that dialect's "
                "replica: each should pass, so the agreement is how far the dialect's verdicts can be "
                "trusted. Scored leaves out source-gold errors and unavailable engines; inconclusive counts "
                "as a disagreement. Each disagreement is an evaluator error, a dialect difference the policy "
                "does not absorb, or two golds that ask different things (the report, relative to the "
                "results folder, lists each). Empty until python -m jobs.fidelity step=native has run.",
                cols, tuple(rows))


def leaderboard_view(st: Statistics, with_ci: bool = True) -> View:
    """Wide leaderboard: one row per model, EX (pooled) per dialect, mean drop from baseline;
    a dialect's header carries its verdict agreement on native gold when the store has it
    (:func:`native_agreement`).

    Args:
        with_ci: add a 95% CI column per dialect (False gives a terminal-width table).
    """
    dialects = dialect_order(st)
    fake = standins(st)
    agr = native_agreement(st)
    pooled = [d for d in dialects if st.config.include_standins or d not in fake]  # the means' dialects
    by_model: dict[str, dict] = defaultdict(dict)
    for r in st.ex_model_dialect:
        by_model[r["model"]][r["dialect"]] = r
    drops = defaultdict(list)
    for d in st.drops_model:
        if _num(d["drop_points"]) and d["dialect"] in pooled:
            drops[d["model"]].append(d["drop_points"])
    rows = []
    for model, cells in by_model.items():
        row = {"model": model}
        for d in dialects:
            c = cells.get(d)
            row[f"ex:{d}"] = c["ex"] if c else None
            row[f"ci:{d}"] = (c["ex_lo"], c["ex_hi"]) if c else None
            _suite_cells(row, d, c)
        row["mean_drop"] = sum(drops[model]) / len(drops[model]) if drops[model] else None
        vals = [row[f"ex:{d}"] for d in pooled if _num(row[f"ex:{d}"])]
        row["mean_ex"] = sum(vals) / len(vals) if vals else None
        rows.append(row)
    others = _other_policies(st)
    under = {(r["model"], r["dialect"], r["policy"]): r["ex"] for r in getattr(st, "ex_policies", None) or []}
    for row in rows:  # EX of the same executions under every other policy of the store
        for p in others:
            for d in dialects:
                row[f"ex:{d}@{p}"] = under.get((row["model"], d, p))
    base = st.config.baseline

    def order(r: dict) -> tuple:
        b = r.get(f"ex:{base}")
        return (-(b if _num(b) else (r["mean_ex"] if _num(r["mean_ex"]) else -1.0)), r["model"])

    rows.sort(key=order)
    gold = {r["dialect"]: r for r in st.gold_portability if r["dataset"] == "ALL"}
    if gold:  # the gold's portability as context, always last
        row = {"model": GOLD_ROW}
        for d in dialects:
            c = gold.get(d)
            row[f"ex:{d}"] = c["ex"] if c else None
            row[f"ci:{d}"] = (c["ex_lo"], c["ex_hi"]) if c else None
            _suite_cells(row, d, c)  # the gold's own suite portability: the suite EX ceiling
        vals = [row[f"ex:{d}"] for d in pooled if _num(row[f"ex:{d}"])]
        row["mean_ex"] = sum(vals) / len(vals) if vals else None
        b = row.get(f"ex:{base}")
        drops_g = [100 * (b - row[f"ex:{d}"]) for d in pooled
                   if d != base and _num(b) and _num(row[f"ex:{d}"])]
        row["mean_drop"] = sum(drops_g) / len(drops_g) if drops_g else None
        rows.append(row)
    suites = has_suite(st.ex_model_dialect)
    cols = [Column("Model", "model")]
    for d in dialects:
        label = dialect_label(d, fake)
        cols.append(Column(agreement_label(d, label, agr, with_ci), f"ex:{d}", "pct"))
        if with_ci:
            cols.append(Column(f"{d} 95% CI", f"ci:{d}", "ci"))
        if suites:  # suite EX beside EX, and the gap (README "Distilled test suites")
            cols += [Column(f"{d} suite EX %" if with_ci else f"{d} suite", f"sx:{d}", "pct"),
                     Column(f"{d} gap (pts)" if with_ci else f"{d} gap", f"gap:{d}", "pts")]
    cols += [Column("Mean EX %", "mean_ex", "pct"),
             Column(f"Mean drop vs {base} (pts)" if with_ci else "Drop (pts)", "mean_drop", "pts")]
    for p in others:
        cols += [Column(f"{dialect_label(d, fake)} EX % [{p}]", f"ex:{d}@{p}", "pct") for d in dialects]
    left_out = [d for d in dialects if d not in pooled]
    primary = getattr(st, "policy", "default")
    return View("leaderboard", "Leaderboard: EX % (pooled over datasets and instruction levels)"
                + (f", policy {primary}" if others else ""),
                f"EX = correct / scored questions, gold errors excluded; sorted by {base} EX. "
                f"Drop = {base} EX minus dialect EX, in percentage points. Last row: the gold SQL "
                f"itself on each dialect (not a model): its portability, a reference and not a bound "
                f"(a model writing the dialect's own SQL can exceed it). "
                + (f"{STANDIN_BADGE}: scored on a stand-in, not the real engine ({', '.join(f'{d}: {fake[d]}' for d in left_out)}); "
                   f"left out of the means (include_standins=true pools them)." if left_out else "")
                + ("Stand-in dialects are pooled in the means (include_standins=true)." if fake and not left_out else "")
                + (" Suite EX: correct on the original database and on every database of the question's "
                   "distilled suite (a suite database where the gold itself is ambiguous is left out); gap = EX "
                   "minus suite EX over the same questions, in points; on the gold row, the suite EX ceiling."
                   if suites else "")
                + _agreement_note(agr)
                + " Where each dialect ran: see 'Engines'."
                + (f" Columns '[policy]': EX of the same executions under that comparison policy "
                   f"(the other columns: policy {primary}); see 'EX under each policy'." if others else ""),
                tuple(cols), tuple(rows))


def _other_policies(st: Statistics) -> list[str]:
    """The store's policies other than the one the tables use (``Statistics.policies``)."""
    names = list(getattr(st, "policies", None) or [])
    return [p for p in names if p != getattr(st, "policy", None)]


def policies_view(st: Statistics) -> View | None:
    """EX per (model, dialect) under each comparison policy of the store (``policies=[...]``:
    every policy scored from the same executions), or None when the store holds one policy."""
    names = list(getattr(st, "policies", None) or [])
    if len(names) < 2:
        return None
    by: dict[tuple, dict] = defaultdict(dict)
    for r in st.ex_policies:
        row = by.setdefault((r["model"], r["dialect"]), {"model": r["model"], "dialect": r["dialect"]})
        row[f"ex@{r['policy']}"] = r["ex"]
        row[f"n@{r['policy']}"] = r["n"]
    cols = [Column("Model", "model"), Column("Dialect", "dialect")]
    for p in names:
        cols += [Column(f"EX % {p}", f"ex@{p}", "pct"), Column(f"n {p}", f"n@{p}", "int")]
    rows = sorted(by.values(), key=lambda r: (r["dialect"], r["model"]))
    return View("policies", "EX under each policy",
                "The same predictions and executions judged under each comparison policy "
                "(conf/policy/: default = this project's rules; testsuite = test-suite-sql-eval's; "
                "bird = BIRD's set(pred) == set(gold)); gold errors excluded from n.",
                tuple(cols), tuple(rows))


def provenance_view(st: Statistics) -> View:
    """Where each dialect ran: engine product and version, real or stand-in, settings, limits."""
    rows = tuple({**r, "kind": f"{STANDIN_BADGE} {r['standin']}" if r.get("standin") else "real"}
                 for r in getattr(st, "provenance", None) or [])
    cols = (Column("Dialect", "dialect"), Column("Engine", "engine"), Column("Product", "product"),
            Column("Version", "version"), Column("Real or stand-in", "kind"), Column("Endpoint", "endpoint"),
            Column("Result-changing settings", "settings"), Column("Limits", "limits"),
            Column("Runs", "runs", "int"), Column("Last run", "last_run"))
    return View("engines", "Engines: where each dialect ran",
                "As each run read it from the engine at its start (runs/<id>/manifest.json). A stand-in "
                "answers in place of the real engine (DuckDB underneath for fakesnow and bqemulator): it "
                "accepts SQL the real engine may refuse, so its EX is not the dialect's. Two rows for one "
                "dialect: its scores come from runs on different engines or settings.", cols, rows)


def cells_view(st: Statistics) -> View:
    """Long table: one row per (model, dataset, instruction level, dialect)."""
    drops = {(d["model"], d["dataset"], d["instruction_level"], d["dialect"]): d
             for d in st.drops}
    ran_on = engine_text(st)
    art = {(a["model"], a["dataset"], a["instruction_level"], a["dialect"]): a
           for a in getattr(st, "format_artefacts", None) or []}
    rows = []
    for r in st.ex_cells:
        cell = (r["model"], r["dataset"], r["instruction_level"], r["dialect"])
        d = drops.get(cell, {})
        a = art.get(cell, {})
        rows.append({**r, **ran_on.get(r["dialect"], {"engine": "unrecorded", "engine_version": "", "standin": ""}),
                     "fn_space": a.get("fn_space", 0), "identifier_case": a.get("identifier_case", 0),
                     "ci": (r["ex_lo"], r["ex_hi"]),
                     "ci_nt": (r["ex_no_timeout_lo"], r["ex_no_timeout_hi"]),
                     "drill": (f"{r['n'] - r['correct']} wrong", drill_href(r)),
                     "drop_points": d.get("drop_points"), "drop_relative": d.get("drop_relative"),
                     "suite_gap_points": (100 * r["suite_gap"] if r.get("suite_n") and _num(r.get("suite_gap"))
                                          else None)})
    rows.sort(key=lambda r: (r["dataset"], r["instruction_level"], r["dialect"],
                             -(r["ex"] if _num(r["ex"]) else -1.0), r["model"]))
    cols = (Column("Dataset", "dataset"), Column("Level", "instruction_level"),
            Column("Dialect", "dialect"), Column("Engine", "engine_label"), Column("Model", "model"),
            Column("n", "n", "int"),
            Column("Correct", "correct", "int"), Column("Questions", "drill", "link"),
            Column("EX %", "ex", "pct"),
            Column("95% CI", "ci", "ci"), Column("Gold errors", "gold_errors", "int"),
            Column("Unavailable", "unavailable", "int"), Column("Timeouts", "timeouts", "int"),
            Column("EX % w/o timeouts", "ex_no_timeout", "pct"),
            Column("Inconclusive", "inconclusive", "int"),
            Column("EX % unflagged", "ex_unflagged", "pct"),
            *((Column("Suite EX %", "suite_ex", "pct"), Column("EX - suite (pts)", "suite_gap_points", "pts"))
              if has_suite(st.ex_cells) else ()),
            Column("Fn spacing", "fn_space", "int"), Column("Identifier case", "identifier_case", "int"),
            Column(f"Drop vs {st.config.baseline} (pts)", "drop_points", "pts"),
            Column("Relative drop %", "drop_relative", "pct"))
    return View("cells", "Execution accuracy per cell",
                "n excludes gold errors (not the model's fault) and unavailable engines; "
                "timeouts count as wrong in EX and are excluded in the 'w/o timeouts' column; "
                "'EX % unflagged' counts only questions whose row carries no ambiguity flag "
                "(README: flags), beside EX over all. 'Fn spacing' and 'Identifier case': failures "
                "that are format artefacts (see 'Format artefacts').",
                cols, tuple(rows))


def artefacts_view(st: Statistics) -> View:
    """Failures per cell that come from how the SQL is written (statistics.artefacts)."""
    from polysql_ray.statistics.artefacts import FLAGS

    rows = tuple({**r, "share_fn": r["fn_space"] / r["failures"] if r["failures"] else None,
                  "share_case": r["identifier_case"] / r["failures"] if r["failures"] else None}
                 for r in getattr(st, "format_artefacts", None) or [] if r["fn_space"] or r["identifier_case"])
    cols = (Column("Dataset", "dataset"), Column("Level", "instruction_level"), Column("Dialect", "dialect"),
            Column("Model", "model"), Column("Failures", "failures", "int"),
            Column("Fn spacing", "fn_space", "int"), Column("% of failures", "share_fn", "pct"),
            Column("Identifier case", "identifier_case", "int"), Column("% of failures ", "share_case", "pct"))
    return View("format-artefacts", "Format artefacts: failures from how the SQL is written",
                "Counted among the failures, never changing a verdict, so tokenisation habits can be told "
                f"from dialect errors. Fn spacing: {FLAGS['fn_space']}. Identifier case: "
                f"{FLAGS['identifier_case']}. Cells without either are not listed.", cols, rows)


def engine_text(st: Statistics) -> dict[str, dict]:
    """``{dialect: {engine, engine_version, standin, engine_label}}`` from ``st.provenance``
    (several identities of one dialect joined with `` / ``)."""
    out: dict[str, dict] = {}
    for p in getattr(st, "provenance", None) or []:
        row = out.setdefault(str(p["dialect"]), {"engine": [], "engine_version": [], "standin": []})
        for k, v in (("engine", p.get("product")), ("engine_version", p.get("version")), ("standin", p.get("standin"))):
            if v and v not in row[k]:
                row[k].append(v)
    for row in out.values():
        for k in ("engine", "engine_version", "standin"):
            row[k] = " / ".join(row[k])
        row["engine_label"] = f"{row['engine']} {row['engine_version']}".strip() + (
            f" {STANDIN_BADGE}" if row["standin"] else "")
    return out


def drill_href(cell: dict) -> str:
    """Relative link of a cell's per-question drill-down page (``drill/<...>.html``)."""
    import re

    parts = [str(cell[k]) for k in ("dataset", "model", "dialect", "instruction_level")]
    return "drill/" + "__".join(re.sub(r"[^A-Za-z0-9._-]+", "_", p) for p in parts) + ".html"


def gold_portability_view(st: Statistics) -> View:
    """EX of the gold SQL itself on each dialect: the context of every model's drop."""
    cols = (Column("Dataset", "dataset"), Column("Dialect", "dialect"), Column("n", "n", "int"),
            Column("Gold SQL EX %", "ex", "pct"), Column("95% CI", "ci", "ci"),
            *((Column("Gold SQL suite EX %", "suite_ex", "pct"),) if has_suite(st.gold_portability) else ()))
    rows = tuple({**r, "ci": (r["ex_lo"], r["ex_hi"])} for r in st.gold_portability)
    return View("gold-portability", "Gold SQL portability: the gold SQL run unchanged on each dialect",
                "The gold SQL is written for the source dialect; its EX elsewhere is how much of it "
                "survives the dialect change unchanged. A reference, not a bound: a model that writes "
                "the target dialect's own SQL can exceed it. A model's drop up to the gold's own drop "
                "reflects source-dialect habits shared with the gold, not worse reasoning. "
                "Empty when the gold generator was not run (add {name: gold, generator: gold}).",
                cols, rows)


def dataset_view(st: Statistics) -> View:
    """EX per dataset, model and dialect (pooled over instruction levels)."""
    cols = (Column("Dataset", "dataset"), Column("Model", "model"), Column("Dialect", "dialect"),
            Column("n", "n", "int"), Column("EX %", "ex", "pct"), Column("95% CI", "ci", "ci"))
    rows = tuple({**r, "ci": (r["ex_lo"], r["ex_hi"])} for r in st.ex_dataset)
    return View("datasets", "EX per dataset (pooled over instruction levels)",
                "One row per dataset, model and dialect; the leaderboard above pools datasets.",
                cols, rows)


def paired_drops_view(st: Statistics) -> View:
    """Drop from the baseline on paired questions with a paired CI."""
    base = st.config.baseline
    cols = (Column("Model", "model"), Column("Dialect", "dialect"),
            Column("Paired questions", "n_pairs", "int"),
            Column(f"Right on {base} only", "only_baseline", "int"),
            Column("Right on dialect only", "only_dialect", "int"),
            Column("Drop (pts)", "drop_pts", "pts"), Column("95% paired CI (pts)", "drop_ci", "ci"))
    rows = tuple({**r, "drop_pts": 100 * r["drop"], "drop_ci": (r["drop_lo"], r["drop_hi"])}
                 for r in st.drops_paired)
    return View("drops-paired", f"Drop from {base} on paired questions",
                f"Questions scored on both {base} and the dialect; drop = (right on {base} only - "
                "right on the dialect only) / pairs, with a 95% Wald CI for paired proportions.",
                cols, rows)


def hierarchy_view(st: Statistics) -> View:
    """The dialect difficulty hierarchy."""
    cols = (Column("Position", "position", "int"), Column("Dialect", "dialect"),
            Column("Pooled EX %", "ex", "pct"), Column("n", "n", "int"),
            Column("vs next", "next_dialect"), Column("Paired questions", "n_pairs", "int"),
            Column("McNemar p", "p_value", "p"),
            Column(f"p ({st.config.p_adjust or 'unadjusted'})", "p_adjusted", "p"),
            Column("Significant gap", "significant"), Column("Tier", "tier", "int"))
    return View("hierarchy", "Dialect difficulty hierarchy",
                f"Dialects ordered by pooled EX; each adjacent pair tested with McNemar on "
                f"paired questions (alpha {st.config.alpha}); a new tier starts after each "
                f"significant gap.", cols, tuple(st.hierarchy))


def _pair_cols(with_model: bool, st_p_adjust: str = "holm") -> tuple[Column, ...]:
    cols = [Column("Model", "model")] if with_model else []
    cols += [Column("Dialect A", "dialect_a"), Column("Dialect B", "dialect_b"),
             Column("Pairs", "n_pairs", "int"), Column("Both right", "both", "int"),
             Column("Only A", "a_only", "int"), Column("Only B", "b_only", "int"),
             Column("Both wrong", "neither", "int"), Column("EX A %", "ex_a", "pct"),
             Column("EX B %", "ex_b", "pct"), Column("Cohen kappa", "kappa", "f3"),
             Column("McNemar p", "p_value", "p"),
             Column(f"p ({st_p_adjust})", "p_holm", "p"), Column("Exact test", "exact")]
    return tuple(cols)


def pairwise_views(st: Statistics) -> list[View]:
    """Pairwise agreement and McNemar tables, pooled and per model."""
    note = ("Pairs = the same (model, dataset, level, question) on both dialects, both "
            "without gold error. Exact binomial McNemar when fewer than 25 discordant pairs.")
    return [View("pairwise", "Per-query agreement between dialects (pooled over models)",
                 note, _pair_cols(False, st.config.p_adjust or "unadjusted"), tuple(st.pairwise_pooled)),
            View("pairwise-model", "Per-query agreement between dialects, per model",
                 note, _pair_cols(True, st.config.p_adjust or "unadjusted"), tuple(st.pairwise_model))]


def drops_view(st: Statistics) -> View:
    """Drop from the baseline per model and dialect (pooled)."""
    cols = (Column("Model", "model"), Column("Dialect", "dialect"),
            Column(f"{st.config.baseline} EX %", "ex_baseline", "pct"),
            Column("EX %", "ex", "pct"), Column("Drop (pts)", "drop_points", "pts"),
            Column("Relative drop %", "drop_relative", "pct"))
    return View("drops", f"Drop from {st.config.baseline} per model (pooled)",
                "Positive = lower EX than on the baseline dialect.", cols, tuple(st.drops_model))


def rank_views(st: Statistics) -> list[View]:
    """Model rank per dialect (pooled) and Kendall's tau against the baseline ranking."""
    rows = tuple({**r, "span": (r["rank_best"], r["rank_worst"]), "ci": (r["ex_lo"], r["ex_hi"])}
                 for r in st.rank_intervals)
    ranks = View("ranks", "Model rank per dialect (pooled), with the ranks the CIs allow",
                 "1 = best EX on that dialect. 'Plausible ranks' runs from 1 + the models whose 95% CI "
                 "lies wholly above this model's to the count of models minus those wholly below; "
                 "models listed under 'Tied with' have overlapping CIs and are not told apart.",
                 (Column("Dialect", "dialect"), Column("Rank", "rank", "int"),
                  Column("Plausible ranks", "span", "range"), Column("Model", "model"),
                  Column("EX %", "ex", "pct"), Column("95% CI", "ci", "ci"),
                  Column("Tied with", "tied_with")), rows)
    tau = View("rank-instability", f"Rank instability vs {st.config.baseline}",
               "Kendall's tau-b between the models' EX on the dialect and on the baseline "
               "(1 = same ranking); ALL = pooled.",
               (Column("Dataset", "dataset"), Column("Level", "instruction_level"),
                Column("Dialect", "dialect"), Column("Models", "n_models", "int"),
                Column("Kendall tau", "tau", "f3"), Column("p", "p_value", "p")),
               tuple(st.rank_instability))
    return [ranks, tau]


def taxonomy_view(st: Statistics) -> View:
    """Rule-based error classes per dialect (share of failures), as a wide table."""
    dialects = dialect_order(st)
    table: dict[tuple[str, str], dict] = {}
    for r in st.taxonomy_dialect:
        row = table.setdefault((r["family"], r["error_class"]),
                               {"family": r["family"], "error_class": r["error_class"]})
        row[f"share:{r['dialect']}"] = r["share"]
        row[f"count:{r['dialect']}"] = r["count"]
    rows = [table[k] for k in sorted(table)]
    cols = [Column("Family", "family"), Column("Error class", "error_class")]
    for d in dialects:
        cols.append(Column(f"{d} % of failures", f"share:{d}", "pct"))
    return View("taxonomy", "Error taxonomy (rule-based, share of failures per dialect)",
                "Classes from pred_status and the comparison reason; families: logical, schema, "
                "dialect_syntax, execution, generation.", tuple(cols), tuple(rows))


def judge_views(st: Statistics) -> list[View]:
    """Judge-based error families per (model, dialect) and their agreement with the rules;
    each judge named with its identity, a stand-in judge badged."""
    ident = {j["judge"]: j for j in getattr(st, "judges", None) or []}

    def named(rows):
        out = []
        for r in rows:
            j = ident.get(r["judge"], {})
            label = r["judge"] + (f" {STANDIN_BADGE}" if j.get("standin") else "")
            out.append({**r, "judge": label})
        return tuple(out)

    fake = sorted(n for n, j in ident.items() if j.get("standin"))
    who = "; ".join(f"{n}: {j.get('generator')} {j.get('model_id')}"
                    + (f" ({STANDIN_BADGE} {j['standin']})" if j.get("standin") else "") for n, j in sorted(ident.items()))
    warn = (f" {', '.join(fake)} {'is a stand-in' if len(fake) == 1 else 'are stand-ins'}: "
            "its families and agreement test the judge job's plumbing, not judgement." if fake else "")
    per = View("judge-taxonomy", "Error taxonomy (judge-based, share of judged failures)",
               "A judge model picks the first that applies of: schema linking, filtering, aggregation, "
               "dialect syntax, invalid evaluation (logic before syntax). Empty until "
               "`python -m jobs.judge` has run." + (f" Judges: {who}." if who else "") + warn,
               (Column("Judge", "judge"), Column("Model", "model"), Column("Dialect", "dialect"),
                Column("Family", "family"), Column("Count", "count", "int"),
                Column("% of judged failures", "share", "pct")),
               named(st.judge_taxonomy_model_dialect))
    agree = View("judge-agreement", "Judge vs rule-based families",
                 "Counts of judged failures by rule family (rows) and judge family; the diagonal "
                 "is agreement.",
                 (Column("Judge", "judge"), Column("Rule family", "rule_family"),
                  Column("Judge family", "judge_family"), Column("Count", "count", "int")),
                 named(st.judge_agreement))
    return [per, agree]


def all_views(st: Statistics) -> list[View]:
    """Every view, in report order."""
    return [leaderboard_view(st), *[v for v in (policies_view(st),) if v is not None],
            provenance_view(st), *([native_gold_view(st)] if getattr(st, "native_gold_agreement", None) else []),
            gold_portability_view(st), drops_view(st), paired_drops_view(st),
            dataset_view(st), hierarchy_view(st), *pairwise_views(st), *rank_views(st),
            taxonomy_view(st), artefacts_view(st), *judge_views(st), cells_view(st)]


def cells_csv_columns() -> Sequence[str]:
    """Columns of ``leaderboard.csv`` (one row per cell, raw numbers)."""
    return ("model", "dataset", "instruction_level", "dialect", "n_total", "gold_errors",
            "unavailable", "n", "correct", "ex", "ex_lo", "ex_hi", "timeouts", "inconclusive",
            "n_no_timeout", "ex_no_timeout", "ex_no_timeout_lo", "ex_no_timeout_hi",
            "n_unflagged", "correct_unflagged", "ex_unflagged", "drop_points", "drop_relative",
            "engine", "engine_version", "standin", "fn_space", "identifier_case",
            "suite_n", "suite_correct", "suite_ex", "suite_gap")
