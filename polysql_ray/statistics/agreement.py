"""Per-query agreement between dialects: Cohen's kappa, McNemar tests, difficulty hierarchy.

Pairing: the same question ``(model, dataset, instruction_level, question_id)`` scored on two
dialects, kept only when *both* rows count in EX (neither a gold error nor otherwise excluded,
see :mod:`polysql_ray.statistics.load`). For dialects A < B (by name) the 2x2 table is::

                 B correct   B wrong
    A correct    both        a_only
    A wrong      b_only      neither

PolySQL (arXiv 2605.07796) reports weak per-query agreement (kappa) across dialects and uses
McNemar's test to compare dialects (PostgreSQL vs MySQL p about 0.40).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import duckdb
import numpy as np
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.inter_rater import cohens_kappa
from statsmodels.stats.multitest import multipletests

from .load import PAIR_KEY, SCORES_TABLE

#: Below this many discordant pairs McNemar uses the exact binomial test.
EXACT_BELOW = 25


def cohen_kappa_2x2(both: int, a_only: int, b_only: int, neither: int) -> float:
    """Cohen's kappa of two binary raters (here: two dialects' correctness on paired questions).

    ``kappa = (p_o - p_e) / (1 - p_e)``, computed by ``statsmodels.stats.inter_rater.
    cohens_kappa`` on the 2x2 table ``[[both, a_only], [b_only, neither]]``.

    Returns:
        kappa in [-1, 1]; NaN when undefined (no pairs, or both raters constant and equal so
        that p_e == 1).
    """
    n = both + a_only + b_only + neither
    if n == 0:
        return math.nan
    pa, pb = (both + a_only) / n, (both + b_only) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    if math.isclose(pe, 1.0):
        return math.nan
    table = np.array([[both, a_only], [b_only, neither]], dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(cohens_kappa(table, return_results=False))


def mcnemar_test(a_only: int, b_only: int, exact: bool | None = None) -> tuple[float, float, bool]:
    """McNemar's test on the discordant pairs of a paired 2x2 table.

    Args:
        a_only: pairs where only dialect A is correct.
        b_only: pairs where only dialect B is correct.
        exact: force the exact binomial test (True) or the chi-square with continuity
            correction (False); default: exact when ``a_only + b_only < 25``.

    Returns:
        ``(statistic, p_value, exact_used)``; the exact test's statistic is
        ``min(a_only, b_only)``. With no discordant pairs p = 1.
        Source: ``statsmodels.stats.contingency_tables.mcnemar``.
    """
    if exact is None:
        exact = (a_only + b_only) < EXACT_BELOW
    res = mcnemar(np.array([[0, a_only], [b_only, 0]]), exact=exact, correction=True)
    p = float(res.pvalue)
    if math.isnan(p):  # chi-square with zero discordant pairs
        p = 1.0
    return float(res.statistic), min(1.0, p), bool(exact)


def pairwise_dialects(con: duckdb.DuckDBPyConnection, by: Sequence[str] = ("model",)) -> list[dict]:
    """Kappa and McNemar for every pair of dialects, per group.

    Args:
        con: connection prepared by :func:`polysql_ray.statistics.load.load_scores`.
        by: group columns (a subset of ``model, dataset, instruction_level``); ``()`` pools
            everything (pairs still match on model, dataset, level and question).

    Returns:
        Dicts sorted by group, dialect_a, dialect_b (dialect_a < dialect_b) with
        ``n_pairs, both, a_only, b_only, neither, ex_a, ex_b`` (EX on the paired questions),
        ``kappa``, ``mcnemar_stat``, ``p_value``, ``exact``.
    """
    for c in by:
        if c not in PAIR_KEY[:-1]:
            raise ValueError(f"group column {c!r} must be one of {PAIR_KEY[:-1]}")
    on = " AND ".join(f"a.{c} = b.{c}" for c in PAIR_KEY)
    gsel = "".join(f"a.{c} AS {c}, " for c in by)
    ggrp = "".join(f"a.{c}, " for c in by)
    rows = con.execute(
        f"""
        WITH s AS (SELECT {', '.join(PAIR_KEY)}, dialect, is_pass FROM {SCORES_TABLE}
                   WHERE NOT excluded)
        SELECT {gsel} a.dialect AS dialect_a, b.dialect AS dialect_b, count(*) AS n_pairs,
            count(*) FILTER (WHERE a.is_pass AND b.is_pass) AS both,
            count(*) FILTER (WHERE a.is_pass AND NOT b.is_pass) AS a_only,
            count(*) FILTER (WHERE NOT a.is_pass AND b.is_pass) AS b_only,
            count(*) FILTER (WHERE NOT a.is_pass AND NOT b.is_pass) AS neither
        FROM s a JOIN s b ON {on} AND a.dialect < b.dialect
        GROUP BY {ggrp} a.dialect, b.dialect
        ORDER BY {ggrp} a.dialect, b.dialect
        """
    ).fetchall()
    names = [*by, "dialect_a", "dialect_b", "n_pairs", "both", "a_only", "b_only", "neither"]
    out = []
    for row in rows:
        r = dict(zip(names, row))
        n = r["n_pairs"]
        r["ex_a"] = (r["both"] + r["a_only"]) / n
        r["ex_b"] = (r["both"] + r["b_only"]) / n
        r["kappa"] = cohen_kappa_2x2(r["both"], r["a_only"], r["b_only"], r["neither"])
        r["mcnemar_stat"], r["p_value"], r["exact"] = mcnemar_test(r["a_only"], r["b_only"])
        out.append(r)
    return out


def difficulty_hierarchy(
    pooled_ex: Sequence[dict], pooled_pairs: Sequence[dict], alpha: float = 0.05,
    adjust: str | None = "holm",
) -> list[dict]:
    """Order dialects by pooled EX and test each adjacent pair with McNemar.

    Args:
        pooled_ex: :func:`polysql_ray.statistics.ex.ex_table` grouped by ``("dialect",)``.
        pooled_pairs: :func:`pairwise_dialects` with ``by=()``.
        alpha: significance level.
        adjust: multiple-testing correction over the adjacent comparisons
            (a ``statsmodels.stats.multitest.multipletests`` method, e.g. ``holm``), or None.

    Returns:
        One dict per dialect, easiest first (EX descending, ties by name): ``position``
        (1 = easiest), ``dialect``, ``ex``, ``n``, ``next_dialect`` (the next harder one or
        None), ``n_pairs``, ``p_value``, ``p_adjusted``, ``significant`` (p_adjusted < alpha;
        False when untested) and ``tier`` (1 = easiest; a new tier starts after each
        significant gap, so dialects in one tier are statistically indistinguishable from
        their neighbours).
    """
    order = sorted((r for r in pooled_ex if r["n"]), key=lambda r: (-r["ex"], r["dialect"]))
    pairs = {(p["dialect_a"], p["dialect_b"]): p for p in pooled_pairs}
    out = []
    for i, r in enumerate(order):
        nxt = order[i + 1]["dialect"] if i + 1 < len(order) else None
        p = pairs.get(tuple(sorted((r["dialect"], nxt)))) if nxt else None
        out.append({"position": i + 1, "dialect": r["dialect"], "ex": r["ex"], "n": r["n"],
                    "next_dialect": nxt, "n_pairs": p["n_pairs"] if p else 0,
                    "p_value": p["p_value"] if p else math.nan})
    tested = [i for i, r in enumerate(out) if not math.isnan(r["p_value"])]
    adj = [out[i]["p_value"] for i in tested]
    if adjust and adj:
        adj = list(multipletests(adj, alpha=alpha, method=adjust)[1])
    for r in out:
        r["p_adjusted"] = math.nan
    for i, pa in zip(tested, adj):
        out[i]["p_adjusted"] = float(pa)
    tier = 1
    for r in out:
        r["tier"] = tier
        r["significant"] = bool(not math.isnan(r["p_adjusted"]) and r["p_adjusted"] < alpha)
        if r["significant"]:
            tier += 1
    return out


def holm_adjust(rows: list[dict], alpha: float = 0.05, method: str | None = "holm",
                within: Sequence[str] = ()) -> list[dict]:
    """Add ``p_holm`` (family-wise adjusted McNemar p) and ``significant`` to pairwise rows.

    The family is every dialect pair inside one group of ``within`` (e.g. per model);
    ``statsmodels.stats.multitest.multipletests(method=...)``. ``method=None`` copies p.
    Returns the same rows (mutated) for chaining.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in within), []).append(r)
    for rs in groups.values():
        ps = [r["p_value"] for r in rs]
        adj = list(multipletests(ps, alpha=alpha, method=method)[1]) if method and ps else ps
        for r, pa in zip(rs, adj):
            r["p_holm"] = float(pa)
            r["significant"] = bool(pa < alpha)
    return rows
