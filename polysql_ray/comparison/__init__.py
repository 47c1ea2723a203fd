"""The evaluation method itself: comparing gold and predicted result sets (EX).

Public API: :class:`ComparisonPolicy` (versioned, Hydra group ``policy``),
:func:`analyze_gold` / :class:`GoldShape` (ORDER BY keys, LIMIT, probe query),
:func:`compare` / :func:`compare_batch` returning :class:`Comparison` (match, reason, flags,
diff), :func:`decide` / :class:`Verdict` (the one decision path shared by the pipeline and
:func:`score_sql`) and :func:`canonical_column` (canonical Arrow values). The rules are
documented in :mod:`polysql_ray.comparison.policy`.
"""
from .normalize import Canon, canonical_column
from .policy import ComparisonPolicy
from .result_set import REASONS, Comparison, Diff, compare, compare_batch
from .shape import GoldShape, analyze_gold
from .verdict import Verdict, decide


def score_sql(*args, **kwargs):
    """See :func:`polysql_ray.comparison.equivalence.score_sql`."""
    from .equivalence import score_sql as _score_sql

    return _score_sql(*args, **kwargs)

__all__ = ["Canon", "canonical_column", "ComparisonPolicy", "REASONS", "Comparison", "Diff",
           "compare", "compare_batch", "GoldShape", "analyze_gold", "Verdict", "decide", "score_sql"]
