"""Leaderboard figures (matplotlib, Agg backend, PNG).

* ``ex_by_dialect.png``: EX per dialect per model (pooled) with 95% CI error bars.
* ``mcnemar_heatmap.png``: dialect x dialect McNemar p-values (pooled over models), with kappa.
* ``rank_bump.png``: each model's rank per dialect (bump chart), baseline first.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402

from polysql_ray.statistics.summary import Statistics  # noqa: E402

from .views import dialect_order  # noqa: E402

#: (file name, caption) of every figure, in page order.
FIGURES = (
    ("ex_by_dialect.png", "Execution accuracy per dialect and model (pooled), 95% CI"),
    ("mcnemar_heatmap.png", "McNemar p-values between dialects (pooled over models)"),
    ("rank_bump.png", "Model rank per dialect"),
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
    ax.set_xticks(x, dialects)
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


def plot_mcnemar_heatmap(st: Statistics, path: Path) -> Path:
    """Dialect x dialect heatmap of pooled McNemar p-values (log colour), kappa annotated."""
    dialects = dialect_order(st)
    k = len(dialects)
    pmat = np.full((k, k), np.nan)
    kmat = np.full((k, k), np.nan)
    idx = {d: i for i, d in enumerate(dialects)}
    for r in st.pairwise_pooled:
        i, j = idx.get(r["dialect_a"]), idx.get(r["dialect_b"])
        if i is None or j is None:
            continue
        pmat[i, j] = pmat[j, i] = max(r["p_value"], _P_FLOOR)
        kmat[i, j] = kmat[j, i] = r["kappa"]
    fig, ax = plt.subplots(figsize=(1.1 * k + 2.5, 0.9 * k + 1.8))
    im = ax.imshow(pmat, cmap="viridis", norm=LogNorm(vmin=1e-6, vmax=1.0))
    for i in range(k):
        for j in range(k):
            if i == j or np.isnan(pmat[i, j]):
                ax.text(j, i, "-", ha="center", va="center", color="gray")
                continue
            p = pmat[i, j]
            star = "*" if p < st.config.alpha else ""
            kap = "n/a" if np.isnan(kmat[i, j]) else f"{kmat[i, j]:.2f}"
            ptxt = f"p<{_P_FLOOR:.0e}" if p <= _P_FLOOR else f"p={p:.3g}"
            txt = f"{ptxt}{star}\nκ={kap}"
            ax.text(j, i, txt, ha="center", va="center", fontsize=8,
                    color="white" if p < 1e-2 else "black")
    ax.set_xticks(range(k), dialects, rotation=30, ha="right")
    ax.set_yticks(range(k), dialects)
    ax.set_title(f"McNemar p-values between dialects (pooled)\n* p < {st.config.alpha}; "
                 "κ = Cohen's kappa", fontsize=10)
    cb = fig.colorbar(im, ax=ax, shrink=0.8)
    cb.set_label("McNemar p-value (log scale)")
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def plot_rank_bump(st: Statistics, path: Path) -> Path:
    """Bump chart: x = dialect (baseline first), y = model rank (1 at the top), one line per model."""
    dialects, models = dialect_order(st), _models(st)
    rank = {(r["model"], r["dialect"]): r["rank"] for r in st.ranks}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(dialects) + 3), max(3.5, 0.5 * len(models) + 2)))
    cmap = plt.get_cmap("tab10" if len(models) <= 10 else "tab20")
    x = np.arange(len(dialects))
    ends: dict[tuple[int, float], list[tuple[str, int]]] = {}
    for i, m in enumerate(models):
        y = [rank.get((m, d), np.nan) for d in dialects]
        ax.plot(x, y, "-o", color=cmap(i % cmap.N), linewidth=2, markersize=7, label=m,
                alpha=0.85)
        last = max((j for j, v in enumerate(y) if not np.isnan(v)), default=None)
        if last is not None:
            ends.setdefault((last, y[last]), []).append((m, i))
    for (last, r), group in sorted(ends.items()):
        for k, (m, i) in enumerate(group):  # stack the labels of tied models
            ax.annotate(m, (x[last], r), xytext=(8, (k - (len(group) - 1) / 2) * 11),
                        textcoords="offset points", va="center", fontsize=9,
                        color=cmap(i % cmap.N))
    ax.set_xticks(x, dialects)
    ax.set_xlim(-0.3, len(dialects) - 0.1)
    ax.set_yticks(range(1, len(models) + 1))
    ax.set_ylim(len(models) + 0.5, 0.5)
    ax.set_xlabel(f"Dialect ({st.config.baseline} first, then easiest to hardest)")
    ax.set_ylabel("Model rank by EX (1 = best)")
    ax.set_title("Model rank per dialect (pooled over datasets and levels)")
    ax.grid(alpha=0.3)
    ax.legend(title="Model", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=_PNG_META)
    plt.close(fig)
    return path


def write_figures(st: Statistics, out_dir: Path) -> list[Path]:
    """Write every figure of :data:`FIGURES` into ``out_dir``; returns their paths."""
    plots = (plot_ex_by_dialect, plot_mcnemar_heatmap, plot_rank_bump)
    return [plot(st, out_dir / name) for plot, (name, _) in zip(plots, FIGURES)]
