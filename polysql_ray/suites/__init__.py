"""Distilled database suites (test-suite accuracy): fuzzed candidate databases per source
database, distilled so that the gold queries' neighbors fail on at least one of them.

Public API: :func:`suite_for` (build or reuse the suite of one db_id), :class:`Suite`,
:class:`SuiteDatabase`, :class:`SuiteSettings` (``suite.*`` config), :data:`SUITE_VERSION`.
Method: Zhong, Yu and Klein, EMNLP 2020, "Semantic Evaluation for Text-to-SQL with Distilled
Test Suites". Stages: ``generate.py`` (fuzzing), ``neighbors.py`` (near-miss queries),
``distill.py`` (greedy distillation, the cache).
"""
from polysql_ray.suites.spec import SUITE_VERSION, Suite, SuiteDatabase, SuiteSettings


def suite_for(*args, **kwargs):
    """See :func:`polysql_ray.suites.distill.suite_for`."""
    from polysql_ray.suites.distill import suite_for as _suite_for

    return _suite_for(*args, **kwargs)


__all__ = ["SUITE_VERSION", "Suite", "SuiteDatabase", "SuiteSettings", "suite_for"]
