"""The SQL text that actually runs under a comparison policy.

Only ``policy.distinct = "strip"`` rewrites SQL: the ``DISTINCT`` keyword right after every
``SELECT`` (the top-level query, subqueries and CTEs) is deleted from the gold and the predicted
query before they run, as the Spider test-suite evaluator does by default
(``keep_distinct=False``; Zhong et al., EMNLP 2020). ``DISTINCT`` inside an aggregate
(``COUNT(DISTINCT x)``) and ``DISTINCT ON (...)`` are kept: deleting them changes the answer to
the question, which is a known defect of test-suite's token-level deletion.

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


def strip_select_distinct(sql: str, dialect: str) -> str:
    """``sql`` without the DISTINCT keyword of every ``SELECT DISTINCT`` (module docstring)."""
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception:  # noqa: BLE001 - unreadable text runs as written
        return sql
    cuts = []
    for prev, tok, nxt in zip(tokens, tokens[1:], tokens[2:] + [None]):
        if tok.token_type is TokenType.DISTINCT and prev.token_type is TokenType.SELECT \
                and not (nxt is not None and nxt.token_type is TokenType.ON):
            cuts.append((tok.start, tok.end + 1))
    for start, end in reversed(cuts):
        while end < len(sql) and sql[end] in " \t\r\n":
            end += 1
        sql = sql[:start] + sql[end:]
    return sql


def executed_sql(sql: str, dialect: str, policy: ComparisonPolicy | None) -> str:
    """The text of ``sql`` (gold or predicted, in sqlglot dialect ``dialect``) that runs under
    ``policy``; ``sql`` itself unless ``policy.distinct == "strip"``."""
    if policy is not None and policy.distinct == "strip" and sql:
        return strip_select_distinct(sql, dialect)
    return sql
