"""Statistics over the results store: EX with CIs, drops, kappa, McNemar, ranks, error taxonomy.

Everything reads the deduplicated store through DuckDB (:mod:`.load`); tables are lists of
dicts sorted deterministically so reports built from them are byte-stable.
"""
from .agreement import cohen_kappa_2x2, difficulty_hierarchy, mcnemar_test, pairwise_dialects
from .ex import CI_METHODS, drop_from_baseline, ex_table, proportion_ci
from .load import (ANALYSIS_KEY, CELL, PAIR_KEY, CountingPolicy, LoadSummary, load_scores,
                   store_files)
from .ranking import model_ranks, rank_instability
from .summary import Statistics, StatsConfig, compute_statistics
from .taxonomy import (JUDGE_LABELS, RULES, JudgeResult, TaxonomyRule, build_judge_prompt,
                       classify_row, error_taxonomy, judge_error_class, parse_judge_label)

__all__ = [
    "ANALYSIS_KEY", "CELL", "CI_METHODS", "JUDGE_LABELS", "PAIR_KEY", "RULES",
    "CountingPolicy", "JudgeResult", "LoadSummary", "Statistics", "StatsConfig", "TaxonomyRule",
    "build_judge_prompt", "classify_row", "cohen_kappa_2x2", "compute_statistics",
    "difficulty_hierarchy", "drop_from_baseline", "error_taxonomy", "ex_table",
    "judge_error_class", "load_scores", "mcnemar_test", "model_ranks", "pairwise_dialects",
    "parse_judge_label", "proportion_ci", "rank_instability", "store_files",
]
