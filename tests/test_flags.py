"""Issue 10 rules in both directions, on real engines: column matching by content, the
test-suite emulation, the tie probe over aliases, and every ambiguity flag (present exactly
when its cause is)."""
from __future__ import annotations

import dataclasses
import sqlite3
import time

import duckdb
import pyarrow as pa
import pytest

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare
from polysql_ray.comparison.equivalence import score_sql
from polysql_ray.comparison.prepare import executed_sql
from polysql_ray.comparison.verdict import Pair, decide, semantic_flags
from polysql_ray.engines.base import ExecStatus, ExecutionResult
from polysql_ray.generation.base import GenStatus

POLICY = ComparisonPolicy()
TESTSUITE = ComparisonPolicy(abs_tol=0.0, rel_tol=0.0, order="order_by_anywhere", ties="positional", inconclusive_flags=(),
                             ties_at_limit="strict", extra_pred_columns=False, distinct="strip_all",
                             empty_equal=True)
ROWS = [(1, "Ann", 30, "FR", 7, None), (2, "Bob", 40, "US", 8, 3), (3, "Cid", 30, "US", 6, 1),
        (4, "Dee", 52, "FR", 9, None), (5, "Eve", 40, "DE", 5, 2), (6, "ann", 25, "US", 8, 4)]


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "club.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, country TEXT, "
                "score INTEGER, rank INTEGER)")
    con.executemany("INSERT INTO singer VALUES (?,?,?,?,?,?)", ROWS)
    con.commit()
    con.close()
    return str(path)


def score(gold, pred, db, tmp_path, dialect="sqlite", policy=POLICY):
    return score_sql(gold, pred, database=db, dialect=dialect, replicas_dir=str(tmp_path / "replicas"),
                     policy=policy)


def _ok(table):
    return ExecutionResult(ExecStatus.OK, table)


def _decide(gold_sql, gold, pred, policy=POLICY, probe=None, pair=None):
    return decide(GenStatus.OK, _ok(gold), None if probe is None else _ok(probe), _ok(pred),
                  analyze_gold(gold_sql, "sqlite"), policy, pair=pair)


# ------------------------------------------------------------------ columns matched by content
def test_reordered_projection_passes_on_another_engine_and_scrambled_rows_fail(db, tmp_path):
    r = score("SELECT name, age, country FROM singer", "SELECT country, name, age FROM singer", db, tmp_path,
              dialect="duckdb")
    assert (r.verdict, r.reason) == ("pass", "match") and "columns_reordered" in r.flags
    assert r.diff["column_mapping"] == [1, 2, 0]
    # same column multisets, values moved between rows: fails whatever the mapping
    r = score("SELECT name, age FROM singer",
              "SELECT name, (SELECT age FROM singer s2 WHERE s2.id = 7 - singer.id) FROM singer", db, tmp_path)
    assert r.verdict == "fail" and r.reason == "values" and "columns_reordered" not in r.flags
    r = score("SELECT name, age FROM singer", "SELECT name, age FROM singer", db, tmp_path)
    assert r.verdict == "pass" and "columns_reordered" not in r.flags


def test_wide_permutation_with_equal_column_multisets_is_found_without_factorial_search():
    import numpy as np

    rng = np.random.default_rng(0)
    n, k = 200, 14
    bits = rng.integers(0, 2, (n, k))
    bits[:, 0] = 1 - bits[:, 1]  # columns whose multisets coincide but rows differ
    gold = pa.table({f"c{i}": bits[:, i] for i in range(k)})
    perm = rng.permutation(k)
    rows = rng.permutation(n)
    pred = pa.table({f"p{j}": bits[rows, perm[j]] for j in range(k)})
    t0 = time.process_time()
    r = compare(gold, pred, analyze_gold("", "sqlite"), POLICY)
    assert r.match and "columns_reordered" in r.flags
    assert [perm[j] for j in r.diff.column_mapping] == list(range(k))
    # move one value to another row in one column: no mapping reproduces the rows
    bad = bits[rows].copy()
    i = int(np.nonzero(bad[:, perm[3]] != bad[0, perm[3]])[0][0])
    bad[[0, i], perm[3]] = bad[[i, 0], perm[3]]
    pred_bad = pa.table({f"p{j}": bad[:, perm[j]] for j in range(k)})
    r = compare(gold, pred_bad, analyze_gold("", "sqlite"), POLICY)
    assert not r.match and r.reason == "values"
    assert time.process_time() - t0 < 60  # bounded search (a factorial one would not return at k=14)


def test_extra_predicted_and_duplicated_gold_columns(db, tmp_path):
    r = score("SELECT name, name, age FROM singer", "SELECT age, id, name, name FROM singer", db, tmp_path)
    assert r.verdict == "pass" and {"columns_reordered", "extra_pred_columns_used"} <= set(r.flags)
    r = score("SELECT name, name, age FROM singer", "SELECT age, id, name FROM singer", db, tmp_path)
    assert r.verdict == "fail"  # a duplicated gold column needs its own predicted column
    r = score("SELECT name, age FROM singer", "SELECT name, age, id FROM singer", db, tmp_path)
    assert r.verdict == "pass" and "extra_pred_columns_used" in r.flags and "columns_reordered" not in r.flags


def test_positional_columns_policy_fails_a_permutation(db, tmp_path):
    r = score("SELECT name, age FROM singer", "SELECT age, name FROM singer", db, tmp_path,
              policy=ComparisonPolicy(columns="positional"))
    assert r.verdict == "fail" and r.reason == "values"


# ------------------------------------------------------------------ policy=testsuite
def test_distinct_is_stripped_everywhere_as_test_suite_does():
    assert executed_sql("SELECT DISTINCT a FROM t WHERE b IN (SELECT DISTINCT b FROM u)", "sqlite", TESTSUITE) \
        == "SELECT a FROM t WHERE b IN (SELECT b FROM u)"
    # test-suite's parse.remove_distinct deletes the aggregate's DISTINCT too (issue 20)
    assert executed_sql("SELECT count(DISTINCT a) FROM t", "sqlite", TESTSUITE) == "SELECT count(a) FROM t"
    # distinct=strip keeps it; the default runs the text as written; DISTINCT ON always stays
    select_only = dataclasses.replace(TESTSUITE, distinct="strip")
    assert executed_sql("SELECT count(DISTINCT a) FROM t", "sqlite", select_only) == "SELECT count(DISTINCT a) FROM t"
    assert executed_sql("SELECT DISTINCT a FROM t", "sqlite", POLICY) == "SELECT DISTINCT a FROM t"
    assert executed_sql("SELECT DISTINCT ON (a) a FROM t", "postgres", TESTSUITE) == "SELECT DISTINCT ON (a) a FROM t"


def test_testsuite_passes_what_test_suite_passes_and_fails_what_it_fails(db, tmp_path):
    ts = lambda g, p: score(g, p, db, tmp_path, policy=TESTSUITE)  # noqa: E731
    # a subquery's SELECT DISTINCT against the gold's COUNT(DISTINCT ...): test-suite strips both
    # (count(country) = 6 = count(*) of the undistinct subquery) and passes it
    gold, pred = "SELECT count(DISTINCT country) FROM singer", \
        "SELECT count(*) FROM (SELECT DISTINCT country FROM singer)"
    assert ts(gold, pred).verdict == "pass"
    assert score(gold, pred, db, tmp_path).verdict == "pass"  # 3 = 3 as written
    # the other direction: NULLs tell count(x) from count(*), stripped or not
    assert ts("SELECT count(DISTINCT rank) FROM singer", "SELECT count(*) FROM singer").verdict == "fail"


def test_testsuite_rules_in_both_directions(db, tmp_path):
    ts = lambda g, p: score(g, p, db, tmp_path, policy=TESTSUITE)  # noqa: E731
    # permuted columns accepted, extra predicted columns rejected
    assert ts("SELECT name, age FROM singer", "SELECT age, name FROM singer").verdict == "pass"
    assert ts("SELECT name, age FROM singer", "SELECT name, age, id FROM singer").reason == "column_count"
    # DISTINCT deleted from both, then bags: a missing DISTINCT passes, a wrong column still fails
    assert ts("SELECT DISTINCT country FROM singer", "SELECT country FROM singer").verdict == "pass"
    assert ts("SELECT DISTINCT country FROM singer", "SELECT name FROM singer").verdict == "fail"
    r = score("SELECT DISTINCT country FROM singer", "SELECT country FROM singer", db, tmp_path)
    assert r.verdict == "fail" and "duplicates" in r.flags  # the default keeps bag semantics, flagged
    # COUNT(DISTINCT x) runs as COUNT(x) (test-suite's deletion, reproduced): it passes there,
    # and fails under the default policy, which runs both as written
    assert ts("SELECT count(DISTINCT country) FROM singer", "SELECT count(country) FROM singer").verdict == "pass"
    assert score("SELECT count(DISTINCT country) FROM singer", "SELECT count(country) FROM singer", db,
                 tmp_path).verdict == "fail"
    # another row tied at an ORDER BY ... LIMIT cut: test-suite fails it, the default passes and flags it
    gold, other = "SELECT name FROM singer ORDER BY age LIMIT 2", \
        "SELECT name FROM singer ORDER BY age, id DESC LIMIT 2"
    assert ts(gold, "SELECT name FROM singer ORDER BY age, id LIMIT 2").verdict == "pass"
    assert ts(gold, other).verdict == "fail"
    r = score(gold, other, db, tmp_path)
    assert r.verdict == "pass" and "ties_at_limit" in r.flags
    # "order by" anywhere in the gold: rows compare as lists under test-suite, as bags by default
    g = "SELECT name FROM singer WHERE id IN (SELECT id FROM singer ORDER BY age LIMIT 3)"
    p = "SELECT name FROM singer WHERE id IN (SELECT id FROM singer ORDER BY age LIMIT 3) ORDER BY name DESC"
    assert ts(g, p).verdict == "fail" and score(g, p, db, tmp_path).verdict == "pass"
    # two empty results are equal whatever their columns under test-suite only
    e1, e2 = "SELECT name, age FROM singer WHERE id > 99", "SELECT name FROM singer WHERE id > 99"
    assert ts(e1, e2).verdict == "pass" and score(e1, e2, db, tmp_path).reason == "column_count"


# ------------------------------------------------------------------ tie probe over aliases
def test_tie_probe_resolves_select_aliases_inside_case(db, tmp_path):
    gold = ("SELECT name, age AS years FROM singer "
            "ORDER BY CASE WHEN years >= 40 THEN 0 ELSE 1 END")
    shape = analyze_gold(gold, "sqlite")
    con = sqlite3.connect(db)  # the probe runs on SQLite: the alias inside CASE was replaced by its expression
    assert len(con.execute(shape.probe_sql).fetchall()) == len(ROWS)
    con.close()
    # rows tied on the CASE key in another order: pass, and no "probe unavailable" flag
    pred = "SELECT name, age FROM singer ORDER BY CASE WHEN age >= 40 THEN 0 ELSE 1 END, id DESC"
    for dialect in ("sqlite", "duckdb"):
        r = score(gold, pred, db, tmp_path, dialect=dialect)
        assert r.verdict == "pass" and "tie_probe_unavailable" not in r.flags, (dialect, r)
    # the wrong order of the keys themselves still fails
    r = score(gold, "SELECT name, age FROM singer ORDER BY CASE WHEN age >= 40 THEN 1 ELSE 0 END", db, tmp_path)
    assert r.verdict == "fail" and r.reason == "order"


def test_probe_that_cannot_run_is_flagged():
    gold_sql = "SELECT name FROM t ORDER BY score"
    gold = pa.table({"name": ["a", "b"]})
    shape = analyze_gold(gold_sql, "sqlite")
    assert shape.probe_sql
    v = decide(GenStatus.OK, _ok(gold), ExecutionResult(ExecStatus.RUNTIME, None, "no such column"),
               _ok(gold), shape, POLICY)
    assert "tie_probe_unavailable" in v.flags
    v = decide(GenStatus.OK, _ok(gold), _ok(pa.table({"name": ["a", "b"], "k": [1, 2]})), _ok(gold), shape, POLICY)
    assert "tie_probe_unavailable" not in v.flags


# ------------------------------------------------------------------ ambiguity flags
def test_null_order_flag_only_across_engines_that_place_nulls_differently(db, tmp_path):
    gold = "SELECT name FROM singer ORDER BY rank"
    r = score(gold, gold, db, tmp_path, dialect="duckdb")  # DuckDB puts NULLs last, SQLite first
    assert r.verdict == "fail" and r.reason == "order" and "null_order" in r.flags
    r = score(gold, "SELECT name FROM singer ORDER BY rank NULLS FIRST", db, tmp_path, dialect="duckdb")
    assert r.verdict == "pass" and "null_order" not in r.flags
    r = score("SELECT name FROM singer ORDER BY age, id", "SELECT name FROM singer ORDER BY age, id", db, tmp_path,
              dialect="duckdb")
    assert "null_order" not in r.flags  # no NULL key: nothing to place
    r = score(gold, "SELECT name FROM singer ORDER BY rank DESC", db, tmp_path)  # same engine
    assert r.verdict == "fail" and "null_order" not in r.flags


def test_integer_division_flag(db, tmp_path):
    gold = "SELECT score / age FROM singer"
    r = score(gold, gold, db, tmp_path, dialect="duckdb")  # SQLite 7/30 = 0, DuckDB 0.2333
    assert r.verdict == "fail" and "integer_division" in r.flags
    assert "integer_division" not in score(gold, gold, db, tmp_path).flags  # same engine
    assert "integer_division" not in score("SELECT score FROM singer", "SELECT score FROM singer", db, tmp_path,
                                           dialect="duckdb").flags


def test_bool_as_int_flag():
    gold_sql = "SELECT active FROM t"
    gold = pa.table({"active": pa.array([1, 0], pa.int64())})
    v = _decide(gold_sql, gold, pa.table({"active": pa.array([True, False])}))
    assert v.verdict == "pass" and "bool_as_int" in v.flags
    v = _decide(gold_sql, gold, gold)
    assert v.verdict == "pass" and "bool_as_int" not in v.flags


def test_decimal_scale_flag():
    gold_sql = "SELECT avg(x) FROM t"
    gold = pa.table({"a": [1 / 3]})
    four = pa.table({"a": pa.array([__import__("decimal").Decimal("0.3333")], pa.decimal128(10, 4))})
    v = _decide(gold_sql, gold, four)  # MySQL div_precision_increment=4: the same answer, flagged
    assert v.verdict == "pass" and "decimal_scale" in v.flags
    off_by_one = pa.table({"a": pa.array([__import__("decimal").Decimal("0.3334")], pa.decimal128(10, 4))})
    assert _decide(gold_sql, gold, off_by_one).verdict == "fail"
    two = pa.table({"a": pa.array([__import__("decimal").Decimal("0.33")], pa.decimal128(10, 2))})
    v = _decide(gold_sql, gold, two)  # ROUND(x, 2) is another answer, below the engine's scale
    assert v.verdict == "fail" and "decimal_scale" in v.flags
    exact = pa.table({"a": pa.array([__import__("decimal").Decimal("0.2500")], pa.decimal128(10, 4))})
    v = _decide(gold_sql, pa.table({"a": [0.25]}), exact)
    assert v.verdict == "pass" and "decimal_scale" not in v.flags  # rounding changed nothing
    far = pa.table({"a": pa.array([__import__("decimal").Decimal("0.5000")], pa.decimal128(10, 4))})
    assert "decimal_scale" not in _decide(gold_sql, gold, far).flags
    assert "decimal_scale" not in _decide(gold_sql, gold, pa.table({"a": [0.4]})).flags


def test_collation_flag_from_data_and_from_sql():
    gold_sql = "SELECT name FROM t"
    v = _decide(gold_sql, pa.table({"name": ["Ann", "Bob"]}), pa.table({"name": ["ann", "Bob"]}))
    assert v.verdict == "fail" and "collation" in v.flags
    assert "collation" not in _decide(gold_sql, pa.table({"name": ["Ann"]}), pa.table({"name": ["Eve"]})).flags
    like = "SELECT name FROM t WHERE name LIKE 'a%'"
    assert "collation" in semantic_flags(Pair(like, like, "sqlite", "duckdb", "sqlite", "duckdb"))
    assert "collation" not in semantic_flags(Pair(like, like, "sqlite", "sqlite", "sqlite", "sqlite"))
    assert "collation" in semantic_flags(Pair(like, like, "sqlite", "postgres", "sqlite", "postgres"))
    assert "collation" not in semantic_flags(Pair(like, like, "sqlite", "mysql", "sqlite", "mysql"))  # both ci
    plain = "SELECT id FROM t WHERE id = 3"
    assert semantic_flags(Pair(plain, plain, "sqlite", "mysql", "sqlite", "mysql")) == ()


def test_duplicates_flag(db, tmp_path):
    r = score("SELECT DISTINCT country FROM singer", "SELECT country FROM singer", db, tmp_path)
    assert r.verdict == "fail" and "duplicates" in r.flags
    r = score("SELECT DISTINCT country FROM singer", "SELECT DISTINCT name FROM singer", db, tmp_path)
    assert r.verdict == "fail" and "duplicates" not in r.flags


@pytest.mark.parametrize("sql,flag", [
    ("SELECT strftime('%Y', 'now') - age FROM singer", "time_dependent_gold"),
    ("SELECT name FROM singer WHERE born < current_date", "time_dependent_gold"),
    ("SELECT name FROM singer ORDER BY random()", "nondeterministic_gold"),
    ("SELECT name FROM singer LIMIT 3", "nondeterministic_gold"),
])
def test_determinism_flags_present(sql, flag):
    assert flag in analyze_gold(sql, "sqlite").flags


@pytest.mark.parametrize("sql", [
    "SELECT name FROM singer ORDER BY age LIMIT 3",  # top-level cut: checked on data by the probe
    "SELECT count(*) FROM singer WHERE age > (SELECT max(age) FROM singer)",
    "SELECT 'now is the time' FROM singer WHERE name = 'now x'",
])
def test_determinism_flags_absent(sql):
    flags = analyze_gold(sql, "sqlite").flags
    assert "time_dependent_gold" not in flags and "nondeterministic_gold" not in flags


def test_tie_at_a_nested_cut_is_found_on_the_data_and_scored_inconclusive(db, tmp_path):
    # Ann and Cid are both 30: which score the subquery keeps depends on the engine's row order
    tied = "SELECT name FROM singer WHERE score IN (SELECT score FROM singer ORDER BY age LIMIT 2)"
    assert analyze_gold(tied, "sqlite").ties_probe_sql
    for dialect in ("sqlite", "duckdb"):
        r = score(tied, tied, db, tmp_path, dialect=dialect)
        assert r.verdict == "inconclusive" and "nondeterministic_gold" in r.flags, dialect
    r = score(tied, tied, db, tmp_path, policy=dataclasses.replace(POLICY, inconclusive_flags=()))
    assert r.verdict == "pass" and "nondeterministic_gold" in r.flags
    unique = "SELECT name FROM singer WHERE score IN (SELECT score FROM singer ORDER BY age LIMIT 3)"
    r = score(unique, unique.replace("SELECT name", "SELECT singer.name"), db, tmp_path)
    assert r.verdict == "pass" and "nondeterministic_gold" not in r.flags
    # a correlated nested cut cannot be probed on its own: counted as a possible tie
    corr = ("SELECT name FROM singer s WHERE score = (SELECT score FROM singer t WHERE t.country = s.country "
            "ORDER BY age LIMIT 1)")
    assert "nondeterministic_gold" in score(corr, corr, db, tmp_path).flags


def test_ungrouped_column_flag_found_on_the_data(db, tmp_path):
    bare = "SELECT country, name FROM singer GROUP BY country"  # US has three names
    r = score(bare, bare, db, tmp_path)
    assert "ungrouped_column" in r.flags and r.verdict == "pass"  # flagged, not inconclusive by default
    keyed = "SELECT id, name FROM singer GROUP BY id"  # one name per id: the same on every engine
    assert "ungrouped_column" not in score(keyed, keyed, db, tmp_path).flags
    grouped = "SELECT country, count(*) FROM singer GROUP BY country"
    assert analyze_gold(grouped, "sqlite").ties_probe_sql is None


def test_bare_column_of_a_tied_min_max_row_is_nondeterministic(db, tmp_path):
    """SQLite takes a bare column from the min()/max() row; when two rows with different bare
    values hold the extreme, it takes either (sqlite.org/lang_select.html): not a function of the
    data, so ``nondeterministic_gold`` and inconclusive by default, found on the data."""
    tied = "SELECT max(score), name FROM singer WHERE country = 'US'"  # score 8: Bob and ann
    r = score(tied, "SELECT 8, 'Bob'", db, tmp_path)  # one of the two rows SQLite may take
    assert "nondeterministic_gold" in r.flags and r.verdict == "inconclusive"
    unique = "SELECT min(score), name FROM singer"  # score 5: Eve alone
    r = score(unique, "SELECT 5, 'Eve'", db, tmp_path)
    assert "nondeterministic_gold" not in r.flags and "ungrouped_column" in r.flags and r.verdict == "pass"
    assert score(unique, "SELECT 5, 'Bob'", db, tmp_path).verdict == "fail"
    per_group = "SELECT country, max(score), name FROM singer GROUP BY country"  # US: Bob and ann at 8
    r = score(per_group, "SELECT 'FR', 9, 'Dee' UNION ALL SELECT 'US', 8, 'Bob' UNION ALL SELECT 'DE', 5, 'Eve'",
              db, tmp_path)
    assert r.verdict == "inconclusive" and "nondeterministic_gold" in r.flags
    no_tie = "SELECT country, max(age), name FROM singer GROUP BY country"  # one oldest per country
    r = score(no_tie, "SELECT 'FR', 52, 'Dee' UNION ALL SELECT 'US', 40, 'Bob' UNION ALL SELECT 'DE', 40, 'Eve'",
              db, tmp_path)
    assert r.verdict == "pass" and "nondeterministic_gold" not in r.flags and "ungrouped_column" in r.flags
    wrapped = analyze_gold(f"({tied})", "sqlite").ties_probe_sql  # a parenthesised query: the same check
    assert wrapped == analyze_gold(tied, "sqlite").ties_probe_sql and " AS x" in wrapped
    # two aggregates: SQLite's rule does not apply, so no extreme-tie check (ungrouped flag only)
    assert "x" not in (analyze_gold("SELECT max(score), count(*), name FROM singer", "sqlite").ties_probe_sql
                       .split(" AS ")[-1])


def test_inconclusive_flags_policy_turns_flagged_verdicts_inconclusive(db, tmp_path):
    pol = dataclasses.replace(POLICY, inconclusive_flags=("duplicates",))
    r = score("SELECT DISTINCT country FROM singer", "SELECT country FROM singer", db, tmp_path, policy=pol)
    assert r.verdict == "inconclusive" and "duplicates" in r.flags
    r = score("SELECT DISTINCT country FROM singer", "SELECT DISTINCT name FROM singer", db, tmp_path, policy=pol)
    assert r.verdict == "fail"
    with pytest.raises(ValueError):
        ComparisonPolicy(inconclusive_flags=("no_such_flag",))


def test_clock_dependent_scores_from_an_earlier_date_are_not_reused():
    """Any dataset's gold that reads the clock is keyed by the clock value it reads (one rule,
    datasets.clock): a score stored on an earlier date has another key and is not reused; a
    gold that does not read the clock keeps its key."""
    import datetime as dt

    from types import SimpleNamespace

    from polysql_ray.datasets.clock import mark_clock_dependent
    from polysql_ray.store.parquet import score_key

    def keys(now):
        exs = [SimpleNamespace(question_id=q, gold_sql=sql, extra={})
               for q, sql in [("clock", "SELECT count(*) FROM t WHERE d < date('now')"),
                              ("clock_fn", "SELECT now()"), ("plain", "SELECT count(*) FROM t")]]
        mark_clock_dependent(exs, now)
        return {e.question_id: score_key("cell", e.question_id if not e.extra.get("clock")
                                         else f"{e.question_id}@{e.extra['clock']}") for e in exs}, exs

    today, exs = keys(dt.datetime(2031, 5, 2, tzinfo=dt.timezone.utc))
    yesterday, _ = keys(dt.datetime(2031, 5, 1, tzinfo=dt.timezone.utc))
    assert {k for k in today if today[k] != yesterday[k]} == {"clock", "clock_fn"}
    assert [("time_dependent_gold" in e.extra.get("flags", ())) for e in exs] == [True, True, False]


def test_a_row_of_literals_never_answers_a_count(db, tmp_path):
    """Extra predicted columns are tolerated, but not as a lottery: ``SELECT 0, 1, ..., 300``
    holds every small count, and without a bound it passed every COUNT(*) question."""
    shotgun = "SELECT " + ", ".join(str(i) for i in range(301))
    r = score("SELECT count(*) FROM singer", shotgun, db, tmp_path)
    assert r.verdict == "fail" and r.reason == "column_count"
    r = score("SELECT count(*) FROM singer", "SELECT 5, 6, 7", db, tmp_path)  # few, but constants
    assert r.verdict == "fail" and r.reason == "column_count"
    r = score("SELECT count(*) FROM singer", "SELECT 6", db, tmp_path)  # no extra column: as before
    assert r.verdict == "pass"
    # many extra columns of data: a lottery too, beyond policy.max_extra_pred_columns
    wide = "SELECT " + ", ".join(f"count(age) + {i}" for i in range(-3, 9)) + " FROM singer"
    r = score("SELECT count(*) FROM singer", wide, db, tmp_path)
    assert r.verdict == "fail" and r.reason == "column_count"
    r = score("SELECT count(*) FROM singer", wide, db, tmp_path,
              policy=dataclasses.replace(POLICY, max_extra_pred_columns=11))
    assert r.verdict == "pass" and "extra_pred_columns_used" in r.flags


def test_a_row_of_guesses_that_read_no_row_never_answers(db, tmp_path):
    """Functions of literals, aggregates annihilated by arithmetic and uncorrelated scalar
    subqueries are guesses too when two or more of them sit in one row with extra columns
    (new-user review: each of these passed before)."""
    gold = "SELECT count(*) FROM singer"
    for shotgun in ("SELECT " + ", ".join(f"abs({i})" for i in range(11)),
                    "SELECT " + ", ".join(f"count(*) * 0 + {i}" for i in range(11)) + " FROM singer"):
        r = score(gold, shotgun, db, tmp_path)
        assert r.verdict == "fail" and r.reason == "column_count", shotgun
    names = "SELECT " + ", ".join(f"(SELECT name FROM singer WHERE id = {i})" for i in range(1, 7))
    r = score("SELECT name FROM singer WHERE id = 3", names, db, tmp_path)
    assert r.verdict == "fail" and r.reason == "column_count"
    # the right single answer, with or without one extra data-free column beside data, still passes
    assert score(gold, "SELECT count(*), 'x' FROM singer", db, tmp_path).verdict == "pass"
    assert score(gold, "SELECT count(*), max(age) FROM singer", db, tmp_path).verdict == "pass"
    assert score("SELECT name FROM singer WHERE id = 3",
                 "SELECT (SELECT name FROM singer WHERE id = 3)", db, tmp_path).verdict == "pass"


def test_extra_columns_of_data_and_harmless_literals_still_pass(db, tmp_path):
    r = score("SELECT count(*) FROM singer", "SELECT count(*), avg(age) FROM singer", db, tmp_path)
    assert r.verdict == "pass" and "extra_pred_columns_used" in r.flags
    r = score("SELECT name FROM singer WHERE age > 35", "SELECT *, 'x' FROM singer WHERE age > 35", db, tmp_path)
    assert r.verdict == "pass" and r.diff["column_mapping"] == [1]
    # a literal beside the answer is an extra column, never the answer: mapping skips it
    r = score("SELECT name FROM singer WHERE age > 35", "SELECT 'Bob', name FROM singer WHERE age > 35",
              db, tmp_path)
    assert r.verdict == "pass" and r.diff["column_mapping"] == [1]
    assert {"extra_pred_columns_used", "columns_reordered"} <= set(r.flags)
    r = score("SELECT count(*) FROM singer", "SELECT count(*), 1 FROM singer", db, tmp_path)
    assert r.verdict == "pass" and r.diff["column_mapping"] == [0] and "extra_pred_columns_used" in r.flags
