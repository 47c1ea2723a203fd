"""Execution accuracy (EX) with confidence intervals, and the drop from the source dialect.

EX of a cell = correct / n, where n counts the cell's questions minus the excluded ones
(gold errors and unavailable engines, see :mod:`polysql_ray.statistics.load`). Timeouts stay
in n (they are the prediction's fault under the sandbox limits) and are reported separately,
together with an EX that excludes them (README "Untrusted SQL").

Confidence intervals: Wilson score interval by default (``statsmodels.stats.proportion.
proportion_confint(method="wilson")``), which behaves well near 0 and 1 and for small n;
``"bootstrap"`` resamples questions (nonparametric bootstrap of a mean of n binary outcomes,
which is exactly a Binomial(n, EX) draw per replicate; fixed seed, percentile interval).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .load import CELL, SCORES_TABLE

if TYPE_CHECKING:  # duckdb loads where a connection is opened (driver memory during a run)
    import duckdb

#: CI methods accepted by :func:`proportion_ci` (``bootstrap`` plus statsmodels' methods).
CI_METHODS = ("wilson", "bootstrap", "beta", "agresti_coull", "jeffreys", "normal")


def proportion_ci(
    k: int, n: int, alpha: float = 0.05, method: str = "wilson", n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Two-sided (1 - alpha) confidence interval of a proportion k/n.

    Args:
        k: successes (correct predictions), 0 <= k <= n.
        n: trials (questions in the EX denominator).
        alpha: 1 - confidence level (0.05 gives a 95% CI).
        method: ``wilson`` (default; Wilson 1927), ``bootstrap`` (percentile bootstrap over
            questions, ``n_boot`` replicates, ``seed``), or another statsmodels
            ``proportion_confint`` method (``beta`` = Clopper-Pearson ...).

    Returns:
        ``(low, high)`` as fractions in [0, 1]; ``(nan, nan)`` when n == 0.

    Raises:
        ValueError: unknown method or k outside [0, n].
    """
    if method not in CI_METHODS:
        raise ValueError(f"unknown CI method {method!r}; expected one of {CI_METHODS}")
    if n == 0:
        return (math.nan, math.nan)
    if not 0 <= k <= n:
        raise ValueError(f"k={k} outside [0, n={n}]")
    if method == "bootstrap":
        draws = np.random.default_rng(seed).binomial(n, k / n, size=n_boot) / n
        lo, hi = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
        return (float(lo), float(hi))
    from statsmodels.stats.proportion import proportion_confint  # ~1 s of imports: only when asked

    lo, hi = proportion_confint(k, n, alpha=alpha, method=method)
    return (float(max(0.0, lo)), float(min(1.0, hi)))


def _ratio(k: int, n: int) -> float:
    return k / n if n else math.nan


#: Suite EX counts of every :func:`ex_table` row (0 when the store has no suite verdicts).
SUITE_FIELDS = ("suite_n", "suite_correct", "suite_ex_correct", "suite_unavailable")


def ex_table(
    con: duckdb.DuckDBPyConnection,
    by: Sequence[str] = CELL,
    alpha: float = 0.05,
    ci_method: str | None = "wilson",
) -> list[dict]:
    """EX per group of the loaded ``scores`` table.

    Args:
        con: connection prepared by :func:`polysql_ray.statistics.load.load_scores`.
        by: group columns; the default is one evaluation cell
            ``(model, dataset, dialect, instruction_level)``; ``("model", "dialect")`` pools
            datasets and instruction levels (micro-average over questions).
        alpha, ci_method: see :func:`proportion_ci`; ``ci_method=None`` computes no interval
            (every ``*_lo``/``*_hi`` is None), for callers that show none (the run's own table).

    Returns:
        One dict per group, sorted by the group columns, with the group columns and:
        ``n_total`` (rows), ``gold_errors``, ``unavailable`` (other excluded rows),
        ``n`` (EX denominator), ``correct``, ``timeouts``, ``inconclusive``,
        ``exec_errors`` (counted predictions that did not execute for a reason other than a
        timeout: syntax, schema, runtime ...), ``proven`` (verdicts decided structurally),
        ``ex``, ``ex_lo``, ``ex_hi`` (fractions), ``n_no_timeout``, ``ex_no_timeout``,
        ``ex_no_timeout_lo``, ``ex_no_timeout_hi``; ``n_unflagged``, ``correct_unflagged``,
        ``ex_unflagged``: the same over rows that carry no ambiguity flag
        (:data:`polysql_ray.comparison.policy.AMBIGUITY_FLAGS`). EX is NaN when n == 0.
        Suite EX (:data:`SUITE_FIELDS`): ``suite_n`` counted rows with a suite verdict,
        ``suite_correct`` suite-correct among them, ``suite_ex_correct`` EX-correct among
        them, ``suite_unavailable``; ``suite_ex`` = suite_correct / suite_n and ``suite_gap``
        = (suite_ex_correct - suite_correct) / suite_n (fractions; NaN when suite_n == 0).
    """
    from polysql_ray.comparison.policy import AMBIGUITY_FLAGS

    flagged = ("regexp_matches(coalesce(flags, ''), '(^|,)(" + "|".join(AMBIGUITY_FLAGS)
               + ")(,|$)')")
    # suite EX (README "Distilled test suites"): over the counted rows that carry a suite
    # verdict (the question's database has a suite; a suite execution that could not run is
    # left out, as an unavailable engine is); suite_ex_correct: EX passes among those rows
    has_suite = "suite_verdict" in {r[0] for r in con.execute(f"DESCRIBE {SCORES_TABLE}").fetchall()}
    counted = "NOT excluded AND suite_verdict IS NOT NULL AND suite_verdict <> 'unavailable'"
    suite = (f"count(*) FILTER (WHERE {counted}) AS suite_n, "
             f"count(*) FILTER (WHERE {counted} AND suite_verdict = 'pass') AS suite_correct, "
             f"count(*) FILTER (WHERE {counted} AND is_pass) AS suite_ex_correct, "
             f"count(*) FILTER (WHERE NOT excluded AND suite_verdict = 'unavailable') AS suite_unavailable"
             if has_suite else "0 AS suite_n, 0 AS suite_correct, 0 AS suite_ex_correct, 0 AS suite_unavailable")
    cols = ", ".join(by)
    group = f"GROUP BY {cols} ORDER BY {cols}" if by else ""
    select = f"{cols}, " if by else ""
    rows = con.execute(
        f"""
        SELECT {select}
            count(*) AS n_total,
            count(*) FILTER (WHERE is_gold_error) AS gold_errors,
            count(*) FILTER (WHERE excluded AND NOT is_gold_error) AS unavailable,
            count(*) FILTER (WHERE NOT excluded) AS n,
            count(*) FILTER (WHERE NOT excluded AND is_pass) AS correct,
            count(*) FILTER (WHERE NOT excluded AND is_timeout) AS timeouts,
            count(*) FILTER (WHERE NOT excluded AND verdict = 'inconclusive') AS inconclusive,
            count(*) FILTER (WHERE NOT excluded AND NOT is_pass AND NOT is_timeout
                             AND starts_with(coalesce(reason, ''), 'pred_')) AS exec_errors,
            count(*) FILTER (WHERE basis = 'proven') AS proven,
            count(*) FILTER (WHERE NOT excluded AND NOT {flagged}) AS n_unflagged,
            count(*) FILTER (WHERE NOT excluded AND is_pass AND NOT {flagged}) AS correct_unflagged,
            {suite}
        FROM {SCORES_TABLE} {group}
        """
    ).fetchall()
    names = [*by, "n_total", "gold_errors", "unavailable", "n", "correct", "timeouts", "inconclusive",
             "exec_errors", "proven", "n_unflagged", "correct_unflagged", *SUITE_FIELDS]
    out = []
    for row in rows:
        rec = dict(zip(names, row))
        n, k = rec["n"], rec["correct"]
        rec["ex"] = _ratio(k, n)
        rec["ex_lo"], rec["ex_hi"] = proportion_ci(k, n, alpha, ci_method) if ci_method else (None, None)
        n2 = n - rec["timeouts"]
        rec["n_no_timeout"] = n2
        rec["ex_no_timeout"] = _ratio(k, n2)
        rec["ex_no_timeout_lo"], rec["ex_no_timeout_hi"] = (proportion_ci(k, n2, alpha, ci_method) if ci_method
                                                            else (None, None))
        rec["ex_unflagged"] = _ratio(rec["correct_unflagged"], rec["n_unflagged"])
        sn = rec["suite_n"]
        rec["suite_ex"] = _ratio(rec["suite_correct"], sn)
        rec["suite_gap"] = _ratio(rec["suite_ex_correct"] - rec["suite_correct"], sn)  # EX - suite EX, same rows
        out.append(rec)
    return out


def drop_from_baseline(
    ex_rows: Iterable[dict], baseline: str = "sqlite", within: Sequence[str] | None = None
) -> list[dict]:
    """EX drop of every dialect relative to the baseline (source) dialect.

    The paper (PolySQL section 1) reports an average drop of 10.1% from SQLite.

    Args:
        ex_rows: output of :func:`ex_table`; must include a ``dialect`` column.
        baseline: the reference dialect (the source engine's, usually ``sqlite``).
        within: columns that must match between a row and its baseline row; default: every
            group column of ``ex_rows`` other than ``dialect``.

    Returns:
        One dict per non-baseline row that has a baseline row, sorted by ``within`` then
        dialect: the ``within`` columns, ``dialect``, ``ex_baseline``, ``ex``,
        ``drop_points`` (baseline - dialect, in percentage points) and ``drop_relative``
        (drop / baseline EX as a fraction; NaN when the baseline EX is 0).
    """
    rows = list(ex_rows)
    if not rows:
        return []
    if within is None:
        known = {"n_total", "gold_errors", "unavailable", "n", "correct", "timeouts", "inconclusive",
                 "exec_errors", "proven", "n_unflagged", "correct_unflagged"}
        within = [c for c in rows[0] if c != "dialect" and c not in known and not c.startswith("ex")
                  and c != "n_no_timeout" and not c.startswith("suite_")]
    key = lambda r: tuple(r[c] for c in within)  # noqa: E731
    base = {key(r): r for r in rows if r["dialect"] == baseline}
    out = []
    for r in rows:
        b = base.get(key(r))
        if r["dialect"] == baseline or b is None:
            continue
        points = 100.0 * (b["ex"] - r["ex"])
        rel = (b["ex"] - r["ex"]) / b["ex"] if b["ex"] else math.nan
        out.append({**{c: r[c] for c in within}, "dialect": r["dialect"],
                    "ex_baseline": b["ex"], "ex": r["ex"],
                    "drop_points": points, "drop_relative": rel})
    out.sort(key=lambda r: (*key(r), r["dialect"]))
    return out


def paired_drop(pairs: Iterable[dict], baseline: str = "sqlite", alpha: float = 0.05,
                within: Sequence[str] = ("model",)) -> list[dict]:
    """Drop from the baseline dialect on *paired* questions, with a paired confidence interval.

    For the questions scored on both the baseline and dialect D (both counted in EX), with
    ``b`` = right on the baseline only and ``c`` = right on D only among ``n`` pairs, the drop
    is ``(b - c) / n`` and its (1 - alpha) Wald interval for a difference of paired proportions
    uses ``se = sqrt(b + c - (b - c)**2 / n) / n`` (Agresti, *Categorical Data Analysis*,
    section 10.1). Paired, so it is much narrower than the difference of two Wilson intervals.

    Args:
        pairs: :func:`polysql_ray.statistics.agreement.pairwise_dialects` rows.
        baseline: the source dialect.
        within: group columns of ``pairs`` to keep.

    Returns:
        Dicts sorted by ``within`` then dialect: ``within`` columns, ``dialect``, ``n_pairs``,
        ``only_baseline`` (b), ``only_dialect`` (c), ``ex_baseline``, ``ex`` (both on the paired
        questions), ``drop`` and ``drop_lo``, ``drop_hi`` (fractions; positive = lower on D).
    """
    from scipy.stats import norm

    z = float(norm.ppf(1 - alpha / 2))
    out = []
    for p in pairs:
        if baseline not in (p["dialect_a"], p["dialect_b"]):
            continue
        base_is_a = p["dialect_a"] == baseline
        other = p["dialect_b"] if base_is_a else p["dialect_a"]
        b, c = (p["a_only"], p["b_only"]) if base_is_a else (p["b_only"], p["a_only"])
        n = p["n_pairs"]
        d = (b - c) / n if n else math.nan
        se = math.sqrt(max(0.0, b + c - (b - c) ** 2 / n)) / n if n else math.nan
        out.append({**{k: p[k] for k in within}, "dialect": other, "n_pairs": n,
                    "only_baseline": b, "only_dialect": c,
                    "ex_baseline": p["ex_a"] if base_is_a else p["ex_b"],
                    "ex": p["ex_b"] if base_is_a else p["ex_a"],
                    "drop": d, "drop_lo": d - z * se, "drop_hi": d + z * se})
    out.sort(key=lambda r: (*(r[k] for k in within), r["dialect"]))
    return out
