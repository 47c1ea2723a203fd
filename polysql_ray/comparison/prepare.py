"""The SQL text that actually runs under a comparison policy.

Only ``policy.distinct`` rewrites SQL, in the gold and the predicted query alike, before they run:

* ``strip``: the ``DISTINCT`` keyword right after every ``SELECT`` (the top-level query,
  subqueries and CTEs) is deleted; ``DISTINCT`` inside an aggregate (``COUNT(DISTINCT x)``) is kept;
* ``strip_all``: every ``DISTINCT`` keyword is deleted, inside aggregates too, as the Spider
  test-suite evaluator does by default (``keep_distinct=False``; Zhong et al., EMNLP 2020;
  test-suite-sql-eval ``parse.remove_distinct`` drops every sqlparse token whose text is
  ``distinct`` in any case). Its known defect is reproduced on purpose: ``COUNT(DISTINCT x)``
  runs as ``COUNT(x)``.

``DISTINCT ON (...)`` (PostgreSQL, DuckDB) is kept by both: without its keyword the text no
longer parses (test-suite's SQLite has no ``DISTINCT ON``).

The rewrite works on the token stream (sqlglot's tokenizer, in the query's dialect) and cuts
the keyword out of the original text, so nothing else in the query changes. Text the
tokenizer cannot read is returned unchanged (the engine then reports the error).

Example::

    >>> from polysql_ray.comparison.policy import ComparisonPolicy
    >>> executed_sql("SELECT DISTINCT a, COUNT(DISTINCT b) FROM t", "sqlite",
    ...              ComparisonPolicy(distinct="strip"))
    'SELECT a, COUNT(DISTINCT b) FROM t'
"""
from __future__ import annotations

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

from .policy import ComparisonPolicy


def strip_select_distinct(sql: str, dialect: str, everywhere: bool = False) -> str:
    """``sql`` without the DISTINCT keyword of every ``SELECT DISTINCT``; with ``everywhere``,
    without every DISTINCT keyword but ``DISTINCT ON`` (module docstring)."""
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception:  # noqa: BLE001 - unreadable text runs as written
        return sql
    cuts = []
    if everywhere and tokens and tokens[0].token_type is TokenType.DISTINCT \
            and not (len(tokens) > 1 and tokens[1].token_type is TokenType.ON):
        cuts.append((tokens[0].start, tokens[0].end + 1))
    for prev, tok, nxt in zip(tokens, tokens[1:], tokens[2:] + [None]):
        if tok.token_type is TokenType.DISTINCT and (everywhere or prev.token_type is TokenType.SELECT) \
                and not (nxt is not None and nxt.token_type is TokenType.ON):
            cuts.append((tok.start, tok.end + 1))
    for start, end in reversed(cuts):
        while end < len(sql) and sql[end] in " \t\r\n":
            end += 1
        sql = sql[:start] + sql[end:]
    return sql


def executed_sql(sql: str, dialect: str, policy: ComparisonPolicy | None) -> str:
    """The text of ``sql`` (gold or predicted, in sqlglot dialect ``dialect``) that runs under
    ``policy``; ``sql`` itself unless ``policy.distinct`` is ``strip`` or ``strip_all``."""
    if policy is not None and policy.distinct in ("strip", "strip_all") and sql:
        return strip_select_distinct(sql, dialect, everywhere=policy.distinct == "strip_all")
    return sql
