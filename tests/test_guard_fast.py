"""The guard's tokenizer-free answer (``guard.runs_unrefused``) never differs from the guard.

``EmbeddedEngine.refuse`` skips :func:`check_statement` when :func:`runs_unrefused` says the
statement certainly goes to the engine (``pass`` or ``defer``); here that claim is checked
against the guard itself on the hostile catalogue, the guard's own cases, edge texts and a
deterministic fuzz of SQL fragments, in every dialect an engine of the project uses.
"""
from __future__ import annotations

import random

import pytest

import hostile_cases as hc
from polysql_ray.engines.base import Limits
from polysql_ray.engines.guard import MAX_NESTING, check_statement, runs_unrefused
from polysql_ray.engines.registry import make_engine

DIALECTS = ("sqlite", "duckdb", "clickhouse", "mysql", "postgres", "bigquery", "snowflake")

EDGES = [
    "SELECT 1", "select 1;", "SELECT 1 ;; ; \n", "WITH a AS (SELECT 1) SELECT * FROM a;;",
    "SELECT 1; SELECT 2", "SELECT 1;\nDROP TABLE t", "SELECT 'a;b'", "SELECT 'unterminated",
    "SELECT 1 -- ;\n; DELETE FROM t", "SELECT\t1", "SELECT\n1", "SELECT\u00a01", "SELECT\u20281",
    "SELECTx", "SELECT(1)", "WITH(x)", "WITHx AS (SELECT 1) SELECT 1", "  \n\tSELECT 1",
    "\u00a0SELECT 1", "\ufeffSELECT 1", "\u017fELECT 1", "SELECT \x00", "SELECT '\ud800'",
    "SELECT " + "(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1),
    "SELECT " + "(" * MAX_NESTING + "1" + ")" * MAX_NESTING, hc.DEEP_PARENS,
    "SELECT 1 /*! DROP TABLE t */", "SELECT 1 /*M! DROP TABLE t */", "SELECT 1 # ;\n; DROP t",
    "SELECT $$;$$", "SELECT `a;b`", "SELECT [a;b]", "SELECT {# ; #} 1", "SELECT 1 /* ; */",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r",
    "SELECT BEGIN SHOW ;", "SELECT 1\r\n;\r\n", ";SELECT 1", "SELECT;", "WITH ;",
]

FRAGMENTS = ["SELECT", "WITH", " ", "\n", ";", "(", ")", "'", '"', "`", "[", "]", "--", "/*", "*/",
             "#", "$$", "{#", "#}", "x", "1", "DROP", "BEGIN", "SHOW", "/*!", "\\", "E'", "e"]


def fuzz(n: int = 3000) -> list[str]:
    rng = random.Random(24)
    out = []
    for _ in range(n):
        body = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12)))
        out.append(rng.choice(["SELECT ", "WITH ", " SELECT\n", "select\t", "With "]) + body)
    return out


def corpus() -> list[str]:
    cases = [c.sql for name in dir(hc) if name.isupper() and isinstance(getattr(hc, name), list)
             for c in getattr(hc, name) if isinstance(c, hc.Case)]
    assert len(cases) > 100  # the catalogue is really read
    return cases + EDGES + fuzz()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_runs_unrefused_implies_pass_or_defer(dialect):
    taken = 0
    for sql in corpus():
        if runs_unrefused(sql, dialect):
            taken += 1
            verdict = check_statement(sql, dialect)
            assert verdict.action in ("pass", "defer"), (sql, verdict)
    assert taken > 500  # the shortcut is really exercised


@pytest.mark.parametrize("sql", ["SELECT 1", "select * from t;", "WITH a AS (SELECT 1) SELECT * FROM a",
                                 "SELECT 'unterminated"])
def test_plain_selects_take_the_shortcut(sql):
    assert runs_unrefused(sql, "sqlite")


@pytest.mark.parametrize("sql", ["SELECT 1; SELECT 2", "PRAGMA writable_schema=1", "-- c\nSELECT 1",
                                 hc.DEEP_PARENS, "SELECT \x00", "(SELECT 1)", "\u017fELECT 1"])
def test_refusable_texts_go_to_the_guard(sql):
    assert not runs_unrefused(sql, "sqlite")


def test_mysql_executable_comment_goes_to_the_guard():
    assert runs_unrefused("SELECT 1 /*! DROP TABLE t */", "sqlite")
    assert not runs_unrefused("SELECT 1 /*! DROP TABLE t */", "mysql")


def test_refuse_answers_as_the_full_guard(tmp_path, monkeypatch):
    """SqliteEngine.refuse with and without the shortcut: the same result on every text."""
    import sqlite3

    from polysql_ray.engines import guard

    db = tmp_path / "d.sqlite"
    sqlite3.connect(db).close()
    engine = make_engine("sqlite")
    limits = Limits(max_sql_chars=5000)
    texts = corpus()

    def answers():
        out = []
        for sql in texts:
            r = engine.refuse(sql, str(db), limits)
            out.append(None if r is None else (r.status, r.error))
        return out

    fast = answers()
    monkeypatch.setattr(guard, "runs_unrefused", lambda sql, dialect: False)
    assert answers() == fast
    engine.close()
