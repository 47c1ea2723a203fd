"""The evaluation method itself: comparing gold and predicted result sets (EX).

Public API: :class:`ComparisonPolicy` (versioned, Hydra group ``policy``),
:func:`analyze_gold` / :class:`GoldShape` (ORDER BY keys, LIMIT, probe query),
:func:`compare` / :func:`compare_batch` returning :class:`Comparison` (match, reason, flags,
diff), and :func:`canonical_column` (canonical Arrow values). See docs/evaluation-notes.md §2.
"""
from .normalize import Canon, canonical_column
from .policy import ComparisonPolicy
from .result_set import REASONS, Comparison, Diff, compare, compare_batch
from .shape import GoldShape, analyze_gold

__all__ = ["Canon", "canonical_column", "ComparisonPolicy", "REASONS", "Comparison", "Diff",
           "compare", "compare_batch", "GoldShape", "analyze_gold"]
