"""Table-driven tests for SQL extraction from real model-output shapes (issue 4)."""
from __future__ import annotations

import pytest

from polysql_ray.generation.base import GenStatus
from polysql_ray.generation.extraction import extract_sql, strip_statement

OK, NO_SQL, TRUNC = GenStatus.OK, GenStatus.NO_SQL, GenStatus.TRUNCATED

CASES = [
    # (id, text, finish_reason, expected sql, expected status)
    ("plain_block", "```sql\nSELECT name FROM singer;\n```", None, "SELECT name FROM singer", OK),
    (
        "cot_then_block",
        "Let's think step by step. We need the singers older than 30, so we filter on age.\n"
        "The table singer has a column Age.\n\n```sql\nSELECT Name\nFROM singer\nWHERE Age > 30\n```\n",
        "stop",
        "SELECT Name\nFROM singer\nWHERE Age > 30",
        OK,
    ),
    (
        "several_blocks_take_last",
        "First attempt:\n```sql\nSELECT * FROM singer\n```\nThat returns too many columns. Fixed:\n"
        "```sql\nSELECT count(*) FROM singer;\n```\nThis counts the singers.",
        "stop",
        "SELECT count(*) FROM singer",
        OK,
    ),
    ("tag_sqlite", "```sqlite\nSELECT 1\n```", None, "SELECT 1", OK),
    ("tag_postgresql", "Answer:\n```postgresql\nSELECT \"Name\" FROM \"singer\"\n```", None,
     'SELECT "Name" FROM "singer"', OK),
    ("tag_mysql", "```mysql\nSELECT `Name` FROM `singer`\n```", None, "SELECT `Name` FROM `singer`", OK),
    ("tag_SQL_upper", "```SQL\nselect a from t\n```", None, "select a from t", OK),
    ("bare_fence", "```\nSELECT a FROM t\n```", None, "SELECT a FROM t", OK),
    ("tilde_fence", "~~~sql\nSELECT a FROM t\n~~~", None, "SELECT a FROM t", OK),
    ("inline_fence", "```SELECT a FROM t```", None, "SELECT a FROM t", OK),
    ("inline_fence_with_tag", "The answer is:\n```sql SELECT a FROM t```", None, "SELECT a FROM t", OK),
    ("sql_on_fence_line", "```SELECT a\nFROM t\n```", None, "SELECT a\nFROM t", OK),
    (
        "last_sql_block_not_result_table",
        "```sql\nSELECT name FROM singer\n```\nExpected output:\n```\n| name |\n| Joe |\n```",
        "stop",
        "SELECT name FROM singer",
        OK,
    ),
    ("cte_block", "```sql\nWITH t AS (SELECT 1 AS x)\nSELECT x FROM t\n```", None,
     "WITH t AS (SELECT 1 AS x)\nSELECT x FROM t", OK),
    ("leading_comment_in_block", "```sql\n-- count singers\nSELECT count(*) FROM singer\n```", None,
     "-- count singers\nSELECT count(*) FROM singer", OK),
    (
        "prose_with_is_not_cte",
        "With the table singer we can count rows.\nSELECT count(*) FROM singer;\nThat is all.",
        "stop",
        "SELECT count(*) FROM singer",
        OK,
    ),
    ("prose_with_only", "With this schema I cannot answer the question.", "stop", "", NO_SQL),
    ("prose_Select_only", "Select the right table first, then count its rows.", "stop", "", NO_SQL),
    (
        "fallback_cte",
        "The query is:\nWITH older AS (\n  SELECT * FROM singer WHERE Age > 30\n)\nSELECT count(*) FROM older;",
        "stop",
        "WITH older AS (\n  SELECT * FROM singer WHERE Age > 30\n)\nSELECT count(*) FROM older",
        OK,
    ),
    ("fallback_lowercase_raw", "select name from singer where age > 20", None,
     "select name from singer where age > 20", OK),
    (
        "fallback_multiline_with_subquery",
        "SELECT name FROM singer\nWHERE age > (\n  SELECT avg(age) FROM singer\n)\n\nThis picks older singers.",
        "stop",
        "SELECT name FROM singer\nWHERE age > (\n  SELECT avg(age) FROM singer\n)",
        OK,
    ),
    (
        "think_tags_take_answer",
        "<think>\nMaybe ```sql\nSELECT * FROM singer\n``` no, we need names.\nSELECT name FROM x\n</think>\n\n"
        "```sql\nSELECT Name FROM singer\n```",
        "stop",
        "SELECT Name FROM singer",
        OK,
    ),
    ("think_answer_no_fence", "<think>draft: SELECT 1</think>\nSELECT 2;", "stop", "SELECT 2", OK),
    ("think_never_closed_length", "<think>\nLet me see. SELECT a FROM", "length", "", TRUNC),
    ("think_never_closed_stop", "<think>\nI am unsure.", "stop", "", NO_SQL),
    ("think_then_nothing", "<think>SELECT a FROM t</think>\nI cannot answer.", "stop", "", NO_SQL),
    ("truncated_open_fence", "```sql\nSELECT name, age FROM singer WHERE", None,
     "SELECT name, age FROM singer WHERE", TRUNC),
    ("truncated_by_length", "Reasoning...\nSELECT name FROM singer WHERE age >", "length",
     "SELECT name FROM singer WHERE age >", TRUNC),
    ("closed_block_but_length", "```sql\nSELECT 1\n```\nAlso consider", "length", "SELECT 1", TRUNC),
    ("empty", "", None, "", NO_SQL),
    ("none", None, None, "", NO_SQL),
    ("crlf", "```sql\r\nSELECT a FROM t;\r\n```\r\n", None, "SELECT a FROM t", OK),
    ("trailing_semicolons_spaces", "```sql\nSELECT a FROM t ; ;\n```", None, "SELECT a FROM t", OK),
]


@pytest.mark.parametrize("text,finish,sql,status", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_extract_sql_cases(text, finish, sql, status):
    ex = extract_sql(text, finish)
    assert ex.status == status, ex
    assert ex.sql == sql
    if status != OK:
        assert ex.reason


def test_sqlite_tag_is_not_split_characterwise():
    # The reference regex ```[sql]*``` left "ite" in front of the statement.
    ex = extract_sql("```sqlite\nSELECT 1\n```")
    assert not ex.sql.startswith("ite")


def test_trailing_semicolon_is_consistent():
    a = extract_sql("```sql\nSELECT 1;\n```").sql
    b = extract_sql("```sql\nSELECT 1\n```").sql
    c = extract_sql("SELECT 1;").sql
    assert a == b == c == "SELECT 1"
    assert strip_statement("SELECT ';'; \n") == "SELECT ';'"


def test_method_is_recorded():
    assert extract_sql("```sql\nSELECT 1\n```").method == "fence"
    assert extract_sql("SELECT 1").method == "fallback"
    assert extract_sql("```sql\nSELECT").method == "fence_open"
    assert extract_sql("nothing").method == "none"
