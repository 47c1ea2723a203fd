"""Leaderboard figures (matplotlib, Agg backend, PNG).

* ``ex_by_dialect.png``: EX per dialect per model (pooled) with 95% CI error bars and the gold
  SQL's own EX per dialect (its portability: a reference, not a bound) as a dashed line.
* ``drops.png``: paired drop from the baseline per model and dialect, with the gold's own drop.
* ``agreement_heatmap.png``: dialect x dialect Cohen's kappa with discordant counts and
  Holm-adjusted McNemar p (readable when every p-value saturates).
* ``rank_bump.png``: each model's rank per dialect, with the rank range its CI allows.
* ``taxonomy.png``: error families per (model, dialect), rule-based and judge-based.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from collections import defaultdict  # noqa: E402

from polysql_ray.statistics.summary import Statistics  # noqa: E402

from .views import dialect_order, standins  # noqa: E402


def tick_labels(st: Statistics, dialects: list[str]) -> list[str]:
    """Dialect names for an axis, ``(stand-in)`` under those scored on a stand-in engine."""
    fake = standins(st)
    return [f"{d}\n(stand-in)" if d in fake else d for d in dialects]

#: (file name, caption) of every figure, in page order.
FIGURES = (
    ("ex_by_dialect.png", "EX per dialect and model (pooled), 95% Wilson CI; dashed: the gold SQL's "
                          "own EX on the dialect (its portability: a reference, not a bound)"),
    ("drops.png", "Drop from the source dialect on paired questions, 95% paired CI"),
    ("agreement_heatmap.png", "Per-question agreement between dialects: Cohen's kappa, discordant "
                              "counts, Holm-adjusted McNemar p"),
    ("rank_bump.png", "Model rank per dialect; bars span the ranks the 95% CIs allow (overlap = tie)"),
    ("taxonomy.png", "Error families per model and dialect, rule-based and judge-based"),
)

# Fixed metadata so the PNG bytes do not depend on the matplotlib version string or time.
_PNG_META = {"Software": None}
#: p-values below this are drawn (and labelled) as ``p<1e-12``.
_P_FLOOR = 1e-12


def _models(st: Statistics) -> list[str]:
    return sorted({r["model"] for r in st.ex_model_dialect})


def plot_ex_by_dialect(st: Statistics, path: Path) -> Path:
    """Grouped bars: x = dialect (easiest first), one bar per model, Wilson CI error bars."""
    dialects, models = dialect_order(st), _models(st)
    cells = {(r["model"], r["dialect"]): r for r in st.ex_model_dialect}
    width = 0.8 / max(1, len(models))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(dialects) * max(1, len(models)) ** 0.5 + 3), 4.8))
    x = np.arange(len(dialects))
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")
    for i, m in enumerate(models):
        ex, lo, hi = [], [], []
        for d in dialects:
            c = cells.get((m, d))
            v = c["ex"] if c and c["n"] else math.nan
            ex.append(100 * v)
            # max(0, .): a Wilson bound at EX = 100% equals EX up to float rounding (1e-16 below)
            lo.append(max(0.0, 100 * (v - c["ex_lo"])) if c and c["n"] else 0.0)
            hi.append(max(0.0, 100 * (c["ex_hi"] - v)) if c and c["n"] else 0.0)
        ax.bar(x - 0.4 + width * (i + 0.5), ex, width, yerr=[lo, hi], capsize=3,
               label=m, color=cmap(i % cmap.N), edgecolor="black", linewidth=0.4)
    gold = {r["dialect"]: r for r in st.gold_portability if r["dataset"] == "ALL"}
    labelled = False
    for j, d in enumerate(dialects):
        g = gold.get(d)
        if g and g["n"]:
            ax.hlines(100 * g["ex"], j - 0.45, j + 0.45, colors="black", linestyles="--", linewidth=1.4,
                      label=None if labelled else "gold SQL (reference)")
            labelled = True
    ax.set_xticks(x, tick_labels(st, dialects))
    ax.set_xlabel("Dialect (easiest first, by pooled EX)")
    ax.set_ylabel("Execution accuracy EX (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Execution accuracy per dialect and model (95% Wilson CI)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(title="Model", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def plot_agreement_heatmap(st: Statistics, path: Path) -> Path:
    """Dialect x dialect heatmap of pooled Cohen's kappa (colour), with the discordant counts
    and the Holm-adjusted McNemar p in each cell.

    Kappa and the discordant counts keep showing differences when every McNemar p-value is
    below 1e-12 (a full Spider sweep): the cell ``b / c`` reads "right only on the row dialect /
    right only on the column dialect".
    """
    dialects = dialect_order(st)
    k = len(dialects)
    kmat = np.full((k, k), np.nan)
    idx = {d: i for i, d in enumerate(dialects)}
    text: dict[tuple[int, int], str] = {}
    for r in st.pairwise_pooled:
        i, j = idx.get(r["dialect_a"]), idx.get(r["dialect_b"])
        if i is None or j is None:
            continue
        kmat[i, j] = kmat[j, i] = r["kappa"]
        p = r.get("p_holm", r["p_value"])
        ptxt = f"p<{_P_FLOOR:.0e}" if p <= _P_FLOOR else f"p={p:.2g}"
        kap = "n/a" if math.isnan(r["kappa"]) else f"{r['kappa']:.2f}"
        text[(i, j)] = f"κ={kap}\n{r['a_only']} / {r['b_only']}\n{ptxt}"
        text[(j, i)] = f"κ={kap}\n{r['b_only']} / {r['a_only']}\n{ptxt}"
    fig, ax = plt.subplots(figsize=(1.5 * k + 2.8, 1.15 * k + 1.9))
    im = ax.imshow(kmat, cmap="RdYlGn", vmin=-0.2, vmax=1.0)
    for i in range(k):
        for j in range(k):
            if i == j or (i, j) not in text:
                ax.text(j, i, "-", ha="center", va="center", color="gray")
                continue
            ax.text(j, i, text[(i, j)], ha="center", va="center", fontsize=8)
    ax.set_xticks(range(k), dialects, rotation=30, ha="right")
    ax.set_yticks(range(k), dialects)
    ax.set_title("Per-question agreement between dialects (pooled)\n"
                 "κ = Cohen's kappa; row only / column only right; "
                 f"McNemar p, {st.config.p_adjust or 'unadjusted'}", fontsize=9)
    cb = fig.colorbar(im, ax=ax, shrink=0.8)
    cb.set_label("Cohen's kappa (1 = same questions right)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def plot_drops(st: Statistics, path: Path) -> Path:
    """Paired drop from the baseline per model and dialect, 95% paired CI; the gold SQL's own
    drop (its portability, a reference) as a grey band per dialect."""
    base = st.config.baseline
    rows = [r for r in st.drops_paired if not math.isnan(r["drop"])]
    dialects = [d for d in dialect_order(st) if d != base]
    models = sorted({r["model"] for r in rows})
    gold = {r["dialect"]: r for r in st.gold_portability if r["dataset"] == "ALL"}
    fig, ax = plt.subplots(figsize=(max(7.0, 1.4 * len(dialects) * max(1, len(models)) ** 0.5 + 3), 4.8))
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")
    width = 0.8 / max(1, len(models))
    x = np.arange(len(dialects))
    cells = {(r["model"], r["dialect"]): r for r in rows}
    gb = gold.get(base)
    for j, d in enumerate(dialects):
        g = gold.get(d)
        if g and gb and g["n"] and gb["n"]:
            gd = 100 * (gb["ex"] - g["ex"])
            ax.fill_between([j - 0.45, j + 0.45], 0, gd, color="0.85", zorder=0,
                            label="gold SQL's own drop" if j == 0 else None)
    for i, m in enumerate(models):
        v, lo, hi = [], [], []
        for d in dialects:
            c = cells.get((m, d))
            val = 100 * c["drop"] if c else math.nan
            v.append(val)
            lo.append(max(0.0, val - 100 * c["drop_lo"]) if c else 0.0)
            hi.append(max(0.0, 100 * c["drop_hi"] - val) if c else 0.0)
        ax.bar(x - 0.4 + width * (i + 0.5), v, width, yerr=[lo, hi], capsize=3, label=m,
               color=cmap(i % cmap.N), edgecolor="black", linewidth=0.4)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, tick_labels(st, dialects))
    ax.set_ylabel(f"Drop from {base} (EX points, paired questions)")
    ax.set_title(f"Drop from {base} per model, 95% paired CI; grey: the gold SQL's own drop")
    ax.grid(axis="y", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def plot_taxonomy(st: Statistics, path: Path) -> Path:
    """Stacked bars: share of each error family among a cell's failures, per (model, dialect);
    rule-based on the left, judge-based on the right when the judge job has run."""
    from polysql_ray.statistics.taxonomy import FAMILIES

    panels = [("Rule-based (status and reason)", st.taxonomy_model_dialect)]
    if st.judge_taxonomy_model_dialect:
        judges = sorted({r["judge"] for r in st.judge_taxonomy_model_dialect})
        for jname in judges:
            panels.append((f"Judge-based ({jname})",
                           [r for r in st.judge_taxonomy_model_dialect if r["judge"] == jname]))
    keys = sorted({(r["model"], r["dialect"]) for _, rows in panels for r in rows})
    fams = [f for f in FAMILIES if any(r["family"] == f for _, rows in panels for r in rows)]
    colors = dict(zip(FAMILIES, ["#d62728", "#ff7f0e", "#1f77b4", "#9467bd", "#8c564b",
                                 "#2ca02c", "#7f7f7f"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.0 * len(panels) + 2, 0.32 * len(keys) + 2.2),
                             sharey=True, squeeze=False)
    y = np.arange(len(keys))
    for ax, (title, rows) in zip(axes[0], panels):
        share: dict[tuple[str, str, str], float] = defaultdict(float)
        for r in rows:
            share[(r["model"], r["dialect"], r["family"])] += r["share"]
        left = np.zeros(len(keys))
        for f in fams:
            w = np.array([100 * share.get((m, d, f), 0.0) for m, d in keys])
            ax.barh(y, w, left=left, color=colors[f], label=f, edgecolor="white", linewidth=0.3)
            left += w
        ax.set_title(title, fontsize=10)
        ax.set_xlim(0, 100)
        ax.set_xlabel("% of the cell's failures")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(y, [f"{m} · {d}" for m, d in keys], fontsize=8)
    axes[0][0].invert_yaxis()
    axes[0][-1].legend(title="Family", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle("Error taxonomy per model and dialect", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def plot_rank_bump(st: Statistics, path: Path) -> Path:
    """Bump chart: x = dialect (baseline first), y = model rank (1 at the top), one line per model."""
    dialects, models = dialect_order(st), _models(st)
    rank = {(r["model"], r["dialect"]): r["rank"] for r in st.ranks}
    span = {(r["model"], r["dialect"]): (r["rank_best"], r["rank_worst"]) for r in st.rank_intervals}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(dialects) + 3), max(3.5, 0.5 * len(models) + 2)))
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")
    x = np.arange(len(dialects))
    ends: dict[tuple[int, float], list[tuple[str, int]]] = {}
    for i, m in enumerate(models):
        y = [rank.get((m, d), np.nan) for d in dialects]
        ax.plot(x, y, "-o", color=cmap(i % cmap.N), linewidth=2, markersize=7, label=m,
                alpha=0.85)
        off = (i - (len(models) - 1) / 2) * 0.06  # side by side, so overlapping spans stay visible
        for j, d in enumerate(dialects):
            b, w = span.get((m, d), (np.nan, np.nan))
            if not np.isnan(b) and w > b:
                ax.vlines(x[j] + off, b, w, color=cmap(i % cmap.N), linewidth=5, alpha=0.35)
        last = max((j for j, v in enumerate(y) if not np.isnan(v)), default=None)
        if last is not None:
            ends.setdefault((last, y[last]), []).append((m, i))
    for (last, r), group in sorted(ends.items()):
        for k, (m, i) in enumerate(group):  # stack the labels of tied models
            ax.annotate(m, (x[last], r), xytext=(8, (k - (len(group) - 1) / 2) * 11),
                        textcoords="offset points", va="center", fontsize=9,
                        color=cmap(i % cmap.N))
    ax.set_xticks(x, tick_labels(st, dialects))
    ax.set_xlim(-0.3, len(dialects) - 0.1)
    ax.set_yticks(range(1, len(models) + 1))
    ax.set_ylim(len(models) + 0.5, 0.5)
    ax.set_xlabel(f"Dialect ({st.config.baseline} first, then easiest to hardest)")
    ax.set_ylabel("Model rank by EX (1 = best)")
    ax.set_title("Model rank per dialect (pooled); shaded bars: ranks the 95% CIs allow\n"
                 "(models whose bars overlap are tied)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(title="Model", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def write_figures(st: Statistics, out_dir: Path) -> list[Path]:
    """Write every figure of :data:`FIGURES` into ``out_dir``; returns their paths."""
    plots = (plot_ex_by_dialect, plot_drops, plot_agreement_heatmap, plot_rank_bump, plot_taxonomy)
    return [plot(st, out_dir / name) for plot, (name, _) in zip(plots, FIGURES)]
