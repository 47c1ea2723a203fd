"""Structural equivalence (ast.py) and composed checks (equivalence.py) on real SQLite files."""
from __future__ import annotations

import doctest
import sqlite3

import pytest

from polysql_ray.comparison.policy import ComparisonPolicy

from polysql_ray.comparison import equivalence as eq
from polysql_ray.comparison.ast import AstEquivalence
from polysql_ray.comparison.equivalence import (AstCheck, Case, FirstDecisive, Judge,
                                                ResultSetEquivalence, judged_equivalence,
                                                observed_equivalence, parse_judgement, score_sql)
from polysql_ray.engines.base import Limits

AST = AstEquivalence()

TEXTBOOK = [
    ("SELECT amount + 1 FROM orders", "SELECT 1 + amount FROM orders"),
    ("SELECT id FROM orders WHERE id IN (1, 2)", "SELECT id FROM orders WHERE id IN (2, 1)"),
    ("SELECT id FROM orders WHERE id > 1 AND amount < 30",
     "SELECT id FROM orders WHERE amount < 30 AND id > 1"),
    ("SELECT id FROM orders WHERE id > 1", "SELECT id FROM orders WHERE 1 < id"),
    ("SELECT Amount FROM Orders WHERE ID = 2", "select amount from orders where id = 2"),
]


class CountingEngine:
    """A real SQLite engine that counts its executions (not a mock: it delegates)."""

    name = "sqlite"
    dialect = "sqlite"

    def __init__(self):
        self.inner = eq.load_engine("sqlite")
        self.calls = 0

    def execute(self, location, sql, limits):
        self.calls += 1
        return self.inner.execute(location, sql, limits)

    def close(self):
        self.inner.close()


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "shop.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER, note TEXT)")
    con.executemany("INSERT INTO orders VALUES (?, ?, ?)", [(1, 10, "a"), (2, 20, None), (3, None, "c")])
    con.commit()
    con.close()
    return str(path)


@pytest.mark.parametrize("gold,pred", TEXTBOOK)
def test_textbook_pairs_proven_without_execution(gold, pred, tmp_path):
    missing = str(tmp_path / "does_not_exist.sqlite")
    assert AstCheck().check(Case(gold, pred, gold_location=missing)).verdict == "pass"
    # score_sql follows the pipeline: the gold still has to run, so a missing database is a gold error
    r = score_sql(gold, pred, database=missing)
    assert (r.verdict, r.reason) == ("gold_error", "gold_runtime") or r.verdict == "gold_error"


@pytest.mark.parametrize("gold,pred", TEXTBOOK)
def test_textbook_pairs_proven_run_only_the_gold(gold, pred, db):
    engine = CountingEngine()
    r = observed_equivalence(engines={"sqlite": engine}).check(
        Case(gold, pred, gold_location=db, pred_location=db))
    assert r.passed and r.basis == "proven"
    assert engine.calls == 1  # the gold (as in the pipeline: a failing gold is never a pass)
    # the same pair really agrees on execution
    r2 = ResultSetEquivalence(engines={"sqlite": engine}).check(Case(gold, pred, gold_location=db))
    assert r2.verdict == "pass" and r2.basis == "observed" and engine.calls == 3


def test_cte_wrapped_unknown_structurally_passes_by_execution(db):
    gold = "SELECT id FROM orders WHERE amount > 5"
    pred = "WITH big AS (SELECT id, amount FROM orders WHERE amount > 5) SELECT id FROM big"
    assert AST.check(gold, "sqlite", pred, "sqlite").decision == "unknown"
    r = score_sql(gold, pred, database=db)
    assert (r.verdict, r.basis) == ("pass", "observed")
    assert [(t["check"], t["verdict"]) for t in r.trail] == [("result_set", "pass")]


def test_wrong_filter_fails_with_diff(db):
    r = score_sql("SELECT id FROM orders WHERE id <> 2", "SELECT id FROM orders WHERE id = 2",
                  database=db)
    assert (r.verdict, r.basis) == ("fail", "observed")
    assert r.diff["missing_rows"] == 2 and r.diff["extra_rows"] == 1
    assert sorted(r.diff["missing_sample"]) == [(1,), (3,)] and r.diff["extra_sample"] == [(2,)]
    assert r.diff["gold_columns"] == r.diff["pred_columns"] == 1


def test_current_timestamp_flagged_and_policy_makes_it_inconclusive(db):
    sql = "SELECT current_timestamp FROM orders"
    assert AST.check(sql, "sqlite", sql, "sqlite").reason.startswith("nondeterministic")
    r = score_sql(sql, sql, database=db)
    assert r.basis == "observed" and "time_dependent_gold" in r.flags
    r = score_sql(sql, sql, database=db, policy=ComparisonPolicy(inconclusive_flags=("time_dependent_gold",)))
    assert r.verdict == "inconclusive" and "time_dependent_gold" in r.flags
    r = score_sql("SELECT id FROM orders", "SELECT id FROM orders", database=db)
    assert "time_dependent_gold" not in r.flags


@pytest.mark.parametrize("sql", ["SELECT id FROM orders LIMIT 2", "SELECT random()",
                                 "SELECT id FROM orders ORDER BY amount LIMIT 1",
                                 "SELECT group_concat(note) FROM orders"])
def test_nondeterministic_never_proven(sql):
    r = AST.check(sql, "sqlite", sql, "sqlite")
    assert r.decision == "unknown" and "nondeterministic" in r.reason


def test_p_and_not_p_is_not_false(db):
    gold, pred = "SELECT id FROM orders WHERE amount > 15 AND NOT amount > 15", \
        "SELECT id FROM orders WHERE FALSE"
    assert AST.check(gold, "sqlite", pred, "sqlite").decision == "unknown"
    # and the select-list version really differs when amount is NULL
    r = score_sql("SELECT (amount > 15 AND NOT amount > 15) FROM orders", "SELECT FALSE FROM orders",
                  database=db)
    assert r.verdict == "fail" and r.basis == "observed"


def test_alias_renaming_and_output_names():
    g = "SELECT T1.note AS n FROM orders AS T1 JOIN orders AS T2 ON T1.id = T2.amount"
    p = "select a.note from orders a inner join orders b on a.id = b.amount"
    assert AST.check(g, "sqlite", p, "sqlite").equivalent
    # swapping which alias is used where is a different query
    p2 = "select b.note from orders a inner join orders b on a.id = b.amount"
    assert not AST.check(g, "sqlite", p2, "sqlite").equivalent


def test_unsound_rewrites_not_proven():
    pairs = [
        ("SELECT a + b + c FROM t", "SELECT a + (b + c) FROM t"),        # float re-association
        ("SELECT a - b FROM t", "SELECT b - a FROM t"),
        ("SELECT x FROM t WHERE c = \"France\"", "SELECT x FROM t WHERE c = \"france\""),  # may be strings
        ("SELECT x FROM t WHERE a.x = b.y", "SELECT x FROM t WHERE b.y = a.x"),  # sqlite collation
        ("SELECT x FROM t WHERE a ^ a", "SELECT x FROM t WHERE a"),
        ("SELECT 7 / 2", "SELECT 2 / 7"),
    ]
    for g, p in pairs:
        assert AST.check(g, "sqlite", p, "sqlite").decision == "unknown", (g, p)


def test_postgres_identifier_rules():
    assert AST.check("SELECT Name FROM T", "postgres", 'SELECT "name" FROM "t"', "postgres").equivalent
    assert not AST.check('SELECT "Name" FROM t', "postgres", "SELECT name FROM t", "postgres").equivalent


# ---------------------------------------------------------------- cross-dialect allowlist

SCHEMA = {"orders": {"id": "INTEGER", "amount": "INTEGER", "note": "TEXT"}}


@pytest.mark.parametrize("gold,pred,pred_dialect", [
    ("SELECT id FROM orders WHERE amount = 10 AND note IS NULL",
     "SELECT id FROM orders WHERE note IS NULL AND amount = 10", "postgres"),
    ("SELECT count(*) FROM orders WHERE id IN (1, 2)", "SELECT COUNT(*) FROM orders WHERE id IN (2, 1)",
     "duckdb"),
    ("SELECT id FROM orders WHERE amount > 1", "SELECT id FROM orders WHERE 1 < amount", "postgres"),
    ("SELECT note FROM orders WHERE note < 'b'", "SELECT note FROM orders WHERE 'b' > note", "duckdb"),
])
def test_cross_dialect_inside_allowlist(gold, pred, pred_dialect):
    assert AST.check(gold, "sqlite", pred, pred_dialect, schema=SCHEMA).equivalent


@pytest.mark.parametrize("gold,pred,pred_dialect", [
    ("SELECT amount / 3 FROM orders", "SELECT amount / 3 FROM orders", "postgres"),   # int division
    ("SELECT id FROM orders WHERE note LIKE 'A%'", "SELECT id FROM orders WHERE note LIKE 'A%'", "duckdb"),
    ("SELECT note FROM orders ORDER BY id", "SELECT note FROM orders ORDER BY id", "duckdb"),  # NULLs
    ("SELECT note FROM orders WHERE note < 'b'", "SELECT note FROM orders WHERE note < 'b'", "postgres"),
    ("SELECT id FROM orders WHERE note = 1", "SELECT id FROM orders WHERE note = 1", "postgres"),  # cast
    ("SELECT id FROM orders WHERE id = 1", "SELECT id FROM orders WHERE id = 1", "mysql"),
    ("SELECT amount + 1 FROM orders", "SELECT amount + 1 FROM orders", "duckdb"),
    ("SELECT upper(note) FROM orders", "SELECT upper(note) FROM orders", "duckdb"),
])
def test_cross_dialect_outside_allowlist(gold, pred, pred_dialect):
    r = AST.check(gold, "sqlite", pred, pred_dialect, schema=SCHEMA)
    assert r.decision == "unknown", r
    # the same text in the same dialect is proven: the refusal is about the dialect pair
    assert AST.check(gold, "sqlite", gold, "sqlite").equivalent


def test_cross_dialect_postgres_resolves_the_replicas_names():
    """The prediction runs on the replica, whose PostgreSQL copy of an SQLite source stores
    ``Orders.Id`` as ``orders.id`` (engines/identifiers.replica_name_for): unquoted names in any
    case resolve there, the quoted source spelling does not (42P01/42703)."""
    schema = {"Orders": {"Id": "INTEGER"}}
    g = "SELECT id FROM orders WHERE id = 1"
    assert AST.check(g, "sqlite", g, "postgres", schema=schema).equivalent
    assert AST.check(g, "sqlite", "SELECT ID FROM Orders WHERE Id = 1", "postgres", schema=schema).equivalent
    for quoted in ('SELECT "Id" FROM "Orders" WHERE "Id" = 1', 'SELECT "Id" FROM orders WHERE "Id" = 1'):
        assert not AST.check(g, "sqlite", quoted, "postgres", schema=schema).equivalent, quoted
    # a name the copy keeps exactly (not a regular identifier) must be quoted as stored
    spaced = {"order items": {"Qty": "INTEGER"}}
    assert AST.check('SELECT qty FROM "order items"', "sqlite", 'SELECT qty FROM "order items"', "postgres",
                     schema=spaced).equivalent
    assert not AST.check('SELECT qty FROM "order items"', "sqlite", 'SELECT "Qty" FROM "order items"',
                         "postgres", schema=spaced).equivalent
    assert AST.check(g, "sqlite", g, "postgres").reason == "schema_needed_for_identifiers"


@pytest.mark.parametrize("literal,portable", [
    ("10", True), ("2.5", True), ("0.001", True), ("123456789012345", True), ("1e3", True), ("0.0", True),
    ("1e999", False), ("1e-999", False),           # PostgreSQL numeric vs SQLite REAL (inf, 0.0)
    ("3.0000000000000001", False), ("9223372036854775808", False),  # 17 digits; beyond int64
])
def test_cross_dialect_literals_must_mean_the_same_number(literal, portable):
    """``price < 1e999`` runs on SQLite (inf) and fails on PostgreSQL (22003, overflow against
    a double): the proof needs literals both engines read as the same number."""
    schema = {"items": {"id": "INTEGER", "price": "REAL"}}
    sql = f"SELECT id FROM items WHERE price < {literal}"
    res = AST.check(sql, "sqlite", sql, "postgres", schema=schema)
    assert res.equivalent is portable, res
    if not portable:
        assert res.reason.startswith("literal_not_portable"), res
    # SQLite and DuckDB both read an exponent literal as a double: 1e999 is inf on both
    if "e" in literal and not portable:
        assert AST.check(sql, "sqlite", sql, "duckdb", schema=schema).equivalent


@pytest.mark.parametrize("sql,why", [
    ("SELECT id FROM items WHERE stock", "bare_value_as_condition"),
    ("SELECT id FROM items WHERE NOT stock", "bare_value_as_condition"),
    ("SELECT id FROM items WHERE stock = 1 AND id", "bare_value_as_condition"),
    ("SELECT id, (SELECT stock FROM items) FROM items", "scalar_subquery_rows"),
    ("SELECT id AS k FROM items WHERE k > 1", "output_alias_reference"),
    ("SELECT DISTINCT name FROM items ORDER BY id", "distinct_order_key_not_selected"),
    ("SELECT * FROM items GROUP BY id", "star_in_aggregating_select"),
])
def test_cross_dialect_text_that_fails_on_postgres_is_not_proven(sql, why):
    """Each runs on SQLite and fails on PostgreSQL (42804 argument of WHERE must be boolean,
    21000 more than one row, 42703 alias in WHERE, 42P10 DISTINCT/ORDER BY, 42803): identical
    text is still no proof across the pair. The same text within one dialect stays provable."""
    schema = {"items": {"id": "INTEGER", "stock": "INTEGER", "name": "TEXT"}}
    res = AST.check(sql, "sqlite", sql, "postgres", schema=schema)
    assert res.decision == "unknown" and res.reason == f"not_dialect_invariant:{why}", res
    assert AST.check(sql, "sqlite", sql, "sqlite").equivalent


def test_cross_dialect_single_row_subquery_and_predicates_stay_provable():
    schema = {"items": {"id": "INTEGER", "stock": "INTEGER", "name": "TEXT"}}
    for sql in ("SELECT (SELECT max(stock) FROM items)",
                "SELECT id FROM items WHERE stock IS NULL OR NOT (stock = 1)"):
        assert AST.check(sql, "sqlite", sql, "postgres", schema=schema).equivalent, sql
    for gold, pred in (("SELECT DISTINCT id FROM items ORDER BY id",  # SQLite places NULLs first
                        "SELECT DISTINCT id FROM items ORDER BY id NULLS FIRST"),
                       ("SELECT stock, count(*) FROM items GROUP BY stock",
                        "SELECT stock, COUNT(*) FROM items GROUP BY stock")):
        assert AST.check(gold, "sqlite", pred, "postgres", schema=schema).equivalent, pred


def test_cross_dialect_end_to_end_duckdb_proof_reads_sqlite_schema(db):
    case = Case("SELECT id FROM orders WHERE amount = 10", "SELECT id FROM orders WHERE 10 = amount",
                gold_dialect="sqlite", pred_dialect="duckdb", gold_engine="sqlite",
                pred_engine="duckdb", gold_location=db, pred_location="/nonexistent.duckdb")
    r = AstCheck().check(case)
    assert (r.verdict, r.basis) == ("pass", "proven")


# ---------------------------------------------------------------- composition and judge

def test_first_decisive_trail_and_judge(db):
    prompts = []

    def judge(prompt):
        prompts.append(prompt)
        return "The predicted query drops NULL rows.\n**Verdict:** FAIL"

    r = judged_equivalence(judge).check(Case("SELECT id FROM orders", "SELECT id FROM orders WHERE amount > 0",
                                             gold_location=db, question="All order ids?"))
    assert (r.verdict, r.basis) == ("fail", "judged")
    assert [t["check"] for t in r.trail] == ["ast", "judge"]
    assert "All order ids?" in prompts[0] and "orders" in prompts[0] and "3 rows" in prompts[0]
    # proven pairs never reach the judge
    r2 = judged_equivalence(judge).check(Case(*TEXTBOOK[0], gold_location=db))
    assert r2.basis == "proven" and len(prompts) == 1


def test_first_decisive_returns_last_when_nothing_decides():
    class Undecided:
        name = "undecided"

        def check(self, case):
            return eq.EquivalenceResult("inconclusive", "judged", "no idea")

    r = FirstDecisive([AstCheck(), Undecided()]).check(Case("SELECT random()", "SELECT 1"))
    assert r.verdict == "inconclusive" and r.explanation == "no idea"
    assert [t["check"] for t in r.trail] == ["ast", "undecided"]
    with pytest.raises(ValueError):
        FirstDecisive([])


@pytest.mark.parametrize("answer,expected", [
    ("VERDICT: PASS", "pass"), ("verdict: fail", "fail"), ("PASS", "pass"),
    ("It could PASS at first sight, but the final answer: FAIL", "fail"),
    ("Verdict - **PASS**\nnot FAIL", "pass"), ("It does not pass.", "fail"), ("yes", "pass"),
    ("I am not sure.", None), ("", None),
])
def test_parse_judgement(answer, expected):
    assert parse_judgement(answer) == expected


def test_judge_error_is_inconclusive(db):
    def broken(prompt):
        raise RuntimeError("backend down")

    r = Judge(broken, samples=False).check(Case("SELECT 1", "SELECT 2", gold_location=db))
    assert r.verdict == "inconclusive" and "backend down" in r.explanation


def test_gold_failure_is_gold_error_pred_failure_fails(db):
    r = ResultSetEquivalence().check(Case("SELECT nope FROM orders", "SELECT id FROM orders", gold_location=db))
    assert r.verdict == "gold_error" and r.reason.startswith("gold_")  # as in the pipeline
    r = ResultSetEquivalence(limits=Limits(timeout_s=5)).check(
        Case("SELECT id FROM orders", "SELECT nope FROM orders", gold_location=db))
    assert r.verdict == "fail" and r.explanation.startswith("pred_")


def test_module_doctest():
    failures, tried = doctest.testmod(eq, verbose=False)
    assert tried >= 5 and failures == 0


def test_cross_dialect_ungrouped_column_is_not_proven():
    """SQLite accepts a bare column outside GROUP BY; DuckDB rejects the same text. Found by the
    quickstart sweep (school_08): identical SQL must not be proven across that line."""
    from polysql_ray.comparison.ast import AstEquivalence

    sql = ("SELECT c.title, count(e.student_id) FROM courses AS c LEFT JOIN enrollments AS e "
           "ON c.course_id = e.course_id GROUP BY c.course_id")
    res = AstEquivalence().check(sql, "sqlite", sql, "duckdb")
    assert res.decision == "unknown"
    assert res.reason == "not_dialect_invariant:ungrouped_column"
    # the same text within one dialect, and a fully grouped query across dialects, stay provable
    assert AstEquivalence().check(sql, "sqlite", sql, "sqlite").decision == "equivalent"
    grouped = "SELECT count(*) FROM courses GROUP BY course_id"
    assert AstEquivalence().check(grouped, "sqlite", grouped, "duckdb").decision == "equivalent"


def test_cross_dialect_reserved_word_is_not_proven():
    """Spider q830 `SELECT avg(Attendance) FROM show`: valid SQLite, a syntax error in DuckDB
    (SHOW is reserved there). Found by the Spider sweep in verify mode."""
    from polysql_ray.comparison.ast import AstEquivalence, reserved_words

    assert "show" in reserved_words("duckdb") and "show" not in reserved_words("sqlite")
    schema = {"show": {"Show_ID": "int", "Attendance": "real"}}
    sql = "SELECT avg(Attendance) FROM show"
    res = AstEquivalence().check(sql, "sqlite", sql, "duckdb", schema=schema)
    assert res.decision == "unknown" and "reserved_word_in_duckdb" in res.reason, res
    assert AstEquivalence().check(sql, "sqlite", sql, "sqlite").decision == "equivalent"
    quoted = 'SELECT avg(Attendance) FROM "show"'
    assert AstEquivalence().check(sql, "sqlite", quoted, "duckdb", schema=schema).decision == "equivalent"
