"""Model ranks per dialect and rank instability (Kendall's tau against the baseline dialect).

PolySQL (arXiv 2605.07796) finds that model rankings on SQLite differ markedly from rankings
on other dialects. We rank models by EX within each scope and dialect, and measure agreement
of each dialect's ranking with the baseline's by Kendall's tau-b (``scipy.stats.kendalltau``,
which handles ties) over the models evaluated on both.
"""
from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence

from scipy.stats import kendalltau, rankdata

#: Scope value used for columns pooled over (e.g. ``dataset = "ALL"``).
ALL = "ALL"


def _scope(r: dict, scope: Sequence[str]) -> tuple:
    return tuple(r.get(c, ALL) for c in scope)


def _ranked_groups(ex_rows: Iterable[dict], scope: Sequence[str]):
    """``(scope values + dialect, rows, ranks)`` per ranking group, rows with n == 0 left out;
    ranks by EX descending, ties sharing the best rank (``rankdata(method="min")``)."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in ex_rows:
        if r["n"]:
            groups[(*_scope(r, scope), r["dialect"])].append(r)
    for g, rows in sorted(groups.items()):
        yield g, rows, rankdata([-r["ex"] for r in rows], method="min")


def model_ranks(ex_rows: Iterable[dict], scope: Sequence[str] = ()) -> list[dict]:
    """Rank models by EX within each (scope, dialect); 1 = best, ties share the best rank.

    Args:
        ex_rows: :func:`polysql_ray.statistics.ex.ex_table` rows with ``model`` and ``dialect``.
        scope: extra columns defining independent rankings (e.g. ``("dataset",)``).

    Returns:
        Dicts sorted by scope, dialect, rank, model: scope columns, ``dialect``, ``model``,
        ``ex``, ``rank`` (int, ``method="min"``). Rows with n == 0 are skipped.
    """
    out = []
    for g, rows, ranks in _ranked_groups(ex_rows, scope):
        for r, k in zip(rows, ranks):
            out.append({**dict(zip(scope, g[:-1])), "dialect": g[-1], "model": r["model"],
                        "ex": r["ex"], "rank": int(k)})
    out.sort(key=lambda r: (*_scope(r, scope), r["dialect"], r["rank"], r["model"]))
    return out


def rank_instability(
    ex_rows: Iterable[dict], baseline: str = "sqlite", scope: Sequence[str] = ()
) -> list[dict]:
    """Kendall's tau between each dialect's model ranking and the baseline's.

    Args:
        ex_rows: :func:`polysql_ray.statistics.ex.ex_table` rows with ``model``, ``dialect``.
        baseline: the reference dialect (usually ``sqlite``).
        scope: columns within which rankings are compared (``()`` = pooled rows).

    Returns:
        Dicts sorted by scope then dialect, one per non-baseline dialect: scope columns,
        ``dialect``, ``n_models`` (models with EX on both), ``tau`` (tau-b; NaN when fewer
        than 2 models or a constant ranking), ``p_value``.
    """
    ex: dict[tuple, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in ex_rows:
        if r["n"]:
            ex[_scope(r, scope)][r["dialect"]][r["model"]] = r["ex"]
    out = []
    for s in sorted(ex):
        base = ex[s].get(baseline, {})
        for dialect in sorted(d for d in ex[s] if d != baseline):
            models = sorted(set(base) & set(ex[s][dialect]))
            tau = p = math.nan
            if len(models) >= 2:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = kendalltau([base[m] for m in models], [ex[s][dialect][m] for m in models])
                tau, p = float(res.statistic), float(res.pvalue)
            out.append({**dict(zip(scope, s)), "dialect": dialect, "n_models": len(models),
                        "tau": tau, "p_value": p})
    return out


def rank_intervals(ex_rows: Iterable[dict], scope: Sequence[str] = ()) -> list[dict]:
    """Ranks that do not rank noise: each model's range of plausible ranks per dialect.

    Model M is *clearly better* than N when M's CI lower bound lies above N's upper bound
    (``ex_lo``/``ex_hi`` of :func:`polysql_ray.statistics.ex.ex_table`, Wilson by default).
    M's best plausible rank is 1 + the models clearly better than M; its worst is the number
    of models minus those clearly worse. Models whose intervals overlap share ranks.

    Returns:
        Dicts sorted by scope, dialect, rank: scope columns, ``dialect``, ``model``, ``ex``,
        ``ex_lo``, ``ex_hi``, ``rank`` (point rank by EX, ``min`` ties), ``rank_best``,
        ``rank_worst``, ``tied_with`` (comma-separated models whose CIs overlap M's).
    """
    out = []
    for g, rows, ranks in _ranked_groups(ex_rows, scope):
        for r, k in zip(rows, ranks):
            better = sum(1 for o in rows if o is not r and o["ex_lo"] > r["ex_hi"])
            worse = sum(1 for o in rows if o is not r and o["ex_hi"] < r["ex_lo"])
            tied = sorted(o["model"] for o in rows if o is not r
                          and not (o["ex_lo"] > r["ex_hi"] or o["ex_hi"] < r["ex_lo"]))
            out.append({**dict(zip(scope, g[:-1])), "dialect": g[-1], "model": r["model"],
                        "ex": r["ex"], "ex_lo": r["ex_lo"], "ex_hi": r["ex_hi"], "rank": int(k),
                        "rank_best": 1 + better, "rank_worst": len(rows) - worse,
                        "tied_with": ",".join(tied)})
    out.sort(key=lambda r: (*_scope(r, scope), r["dialect"], r["rank"], r["model"]))
    return out
