"""Statistics over the results store: EX with CIs, drops, kappa, McNemar, ranks, error taxonomy.

Everything reads the deduplicated store through DuckDB (:mod:`.load`); tables are lists of
dicts sorted deterministically so reports built from them are byte-stable.

The names below are imported on first use (PEP 562), so importing one submodule (the run's
EX table uses :mod:`.ex` and :mod:`.load`) does not load statsmodels and SciPy's statistics
(about a second) for the others.
"""
from __future__ import annotations

from polysql_ray.lazy import lazy_exports

_EXPORTS = {
    "agreement": ("cohen_kappa_2x2", "difficulty_hierarchy", "mcnemar_test", "pairwise_dialects"),
    "ex": ("CI_METHODS", "drop_from_baseline", "ex_table", "proportion_ci"),
    "load": ("ANALYSIS_KEY", "CELL", "PAIR_KEY", "CountingPolicy", "LoadSummary", "load_scores", "store_files"),
    "ranking": ("model_ranks", "rank_instability"),
    "summary": ("Statistics", "StatsConfig", "compute_statistics"),
    "taxonomy": ("JUDGE_LABELS", "RULES", "JudgeResult", "TaxonomyRule", "build_judge_prompt", "classify_row",
                 "error_taxonomy", "judge_error_class", "parse_judge_label"),
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
