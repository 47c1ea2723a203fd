"""Result-set comparison (issue 2 item 6): every rule in both directions, on real engines.

Gold result sets come from SQLite (the source engine), predicted ones mostly from DuckDB, so
the Arrow types are the drivers' real ones (DuckDB: DECIMAL, DATE, BOOLEAN, HUGEINT,
TIMESTAMPTZ; SQLite: int/float/str, dynamically typed).
"""
from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from omegaconf import OmegaConf

from polysql_ray.comparison import ComparisonPolicy, GoldShape, analyze_gold, compare, compare_batch

REPO = Path(__file__).resolve().parents[1]
POLICY = ComparisonPolicy()

ROWS = [  # id, name, age, country, score, born, active  (ages 30 and 40 tied)
    (1, "Ann", 30, "FR", 7.25, "1990-01-02", 1),
    (2, "Bob", 40, "US", 8.5, "1980-05-06", 0),
    (3, "Cid", 30, "US", 6.0, "1991-07-08", 1),
    (4, "Dee", 52, "FR", 9.75, "1968-03-04", 0),
    (5, "Eve", 40, "DE", 5.5, "1979-11-12", 1),
    (6, "Fay", 25, "US", 8.5, "1995-09-10", 1),
]


def _sqlite_array(vals: list) -> pa.Array:
    """Arrow array of a SQLite column; mixed Python types become a dense union (as SQLite allows)."""
    try:
        return pa.array(vals)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        kinds = sorted({type(v).__name__ for v in vals})
        children = [pa.array([v for v in vals if type(v).__name__ == k]) for k in kinds]
        tid = pa.array([kinds.index(type(v).__name__) for v in vals], pa.int8())
        counters, offs = [0] * len(kinds), []
        for v in vals:
            i = kinds.index(type(v).__name__)
            offs.append(counters[i])
            counters[i] += 1
        return pa.UnionArray.from_dense(tid, pa.array(offs, pa.int32()), children)


@pytest.fixture(scope="module")
def sq():
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE singer(id INTEGER, name TEXT, age INTEGER, country TEXT, "
                "score REAL, born TEXT, active INTEGER)")
    con.executemany("INSERT INTO singer VALUES (?,?,?,?,?,?,?)", ROWS)

    def run(sql: str) -> pa.Table:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        rows = cur.fetchall()
        cols = list(zip(*rows)) if rows else [[] for _ in names]
        return pa.Table.from_arrays([_sqlite_array(list(c)) for c in cols], names=names)
    return run


@pytest.fixture(scope="module")
def dk():
    con = duckdb.connect()
    con.execute("CREATE TABLE singer(id INTEGER, name VARCHAR, age INTEGER, country VARCHAR, "
                "score DOUBLE, born DATE, active BOOLEAN)")
    con.executemany("INSERT INTO singer VALUES (?,?,?,?,?,?,?)",
                    [r[:5] + (r[5], bool(r[6])) for r in ROWS])
    return lambda sql: con.sql(sql).to_arrow_table()


def cmp(gold_sql, gold, pred, policy=POLICY, probe=None, dialect="sqlite"):
    return compare(gold, pred, analyze_gold(gold_sql, dialect), policy, probe)


def check(sq, dk, gold_sql, pred_sql, policy=POLICY):
    """Dual execution as the pipeline does it: gold on SQLite (+probe), pred on DuckDB."""
    shape = analyze_gold(gold_sql, "sqlite")
    probe = sq(shape.probe_sql) if shape.probe_sql else None
    return compare(sq(gold_sql), dk(pred_sql), shape, policy, probe)


# --------------------------------------------------------------- right answers that look different
def test_row_order_without_order_by_passes(sq, dk):
    r = check(sq, dk, "SELECT name FROM singer", "SELECT name FROM singer ORDER BY name DESC")
    assert r.match and r.reason == "match"


def test_group_by_order_aliases_and_count_variants_pass(sq, dk):
    r = check(sq, dk, "SELECT country, count(*) FROM singer GROUP BY country",
              "SELECT country AS c, count(id) AS n FROM singer GROUP BY country ORDER BY n, c DESC")
    assert r.match, r


def test_int_vs_float_int32_vs_int64_decimal_vs_float(sq, dk):
    assert cmp("", sq("SELECT 3"), dk("SELECT 3.0::DOUBLE")).match
    assert cmp("", sq("SELECT 2"), dk("SELECT 2::INTEGER")).match
    assert cmp("", sq("SELECT 12.5"), dk("SELECT 12.500000000::DECIMAL(20,9)")).match
    # SQLite AVG is a float, DuckDB SUM of INTEGER is HUGEINT -> decimal128(38,0)
    assert check(sq, dk, "SELECT sum(age), avg(score) FROM singer",
                 "SELECT sum(age), avg(score)::DECIMAL(18,6) FROM singer").match


def test_big_decimals_do_not_overflow(dk):
    big = dk("SELECT 123456789012345678901234::DECIMAL(38,0) AS v")
    assert cmp("", big, dk("SELECT 123456789012345678901234::DECIMAL(38,0) AS w")).match
    r = cmp("", big, dk("SELECT 123456789012345678901235::DECIMAL(38,0)"))  # exact integers
    assert not r.match and r.reason == "values"
    assert cmp("", dk("SELECT 1e25::DECIMAL(38,2)"), dk("SELECT 1e25::DOUBLE")).match


def test_bool_vs_int_and_date_vs_iso_string(sq, dk):
    assert check(sq, dk, "SELECT name, active, born FROM singer",
                 "SELECT name, active, born FROM singer").match
    strict = dataclasses.replace(POLICY, bool_as_int=False, date_string_equal=False)
    r = check(sq, dk, "SELECT active FROM singer", "SELECT active FROM singer", strict)
    assert not r.match and r.reason == "types"


def test_timestamps_naive_vs_utc_and_iso_text(sq, dk):
    gold = sq("SELECT '2020-01-02T03:04:05.000'")
    assert cmp("", gold, dk("SELECT TIMESTAMPTZ '2020-01-02 05:04:05+02'")).match
    assert cmp("", gold, dk("SELECT TIMESTAMP '2020-01-02 03:04:05'")).match
    assert not cmp("", gold, dk("SELECT TIMESTAMP '2020-01-02 03:04:06'")).match


def test_extra_pred_column_tolerated_and_flagged(sq, dk):
    r = check(sq, dk, "SELECT name, age FROM singer", "SELECT id, name, age FROM singer")
    assert r.match and "extra_pred_columns_used" in r.flags and r.diff.column_mapping == (1, 2)
    r = check(sq, dk, "SELECT name, age FROM singer", "SELECT id, name, age FROM singer",
              dataclasses.replace(POLICY, extra_pred_columns=False))
    assert not r.match and r.reason == "column_count"


def test_extra_columns_with_duplicate_multisets_choose_rowwise(sq):
    gold = sq("SELECT id, id FROM singer")  # both gold columns hold the same multiset
    # pred col 1 has the same multiset as id but scrambled across rows; col 2 is id again
    pred = sq("SELECT id, 7 - id, id, name FROM singer")
    r = cmp("", gold, pred)
    assert r.match and r.diff.column_mapping == (0, 2)
    scrambled = sq("SELECT id, 7 - id, name FROM singer")
    assert not cmp("", gold, scrambled).match


def test_ties_reordered_under_order_by_pass(sq, dk):
    r = check(sq, dk, "SELECT name, age FROM singer ORDER BY age",
              "SELECT name, age FROM singer ORDER BY age, name DESC")
    assert r.match, r
    # key not an output column: the probe supplies it
    r = check(sq, dk, "SELECT name FROM singer ORDER BY age DESC",
              "SELECT name FROM singer ORDER BY age DESC, id DESC")
    assert r.match, r


def test_ties_at_limit_lenient_accepts_any_tied_choice_and_flags(sq, dk):
    gold_sql = "SELECT name FROM singer ORDER BY age LIMIT 2"  # ages 25, 30, 30: tie at the cut
    other = "SELECT name FROM singer ORDER BY age, id DESC LIMIT 2"  # Fay + Cid instead of Ann
    r = check(sq, dk, gold_sql, other)
    assert r.match and "ties_at_limit" in r.flags
    r = check(sq, dk, gold_sql, other, dataclasses.replace(POLICY, ties_at_limit="strict"))
    assert not r.match and r.reason == "values" and "ties_at_limit" in r.flags


def test_float_tolerance_inside_multiset_and_at_rounding_boundary():
    gold = pa.table({"x": [1.0000001, 1.0], "s": ["b", "a"]})
    pred = pa.table({"x": [1.0, 1.0000001], "s": ["b", "a"]})
    assert cmp("", gold, pred).match  # pairing must follow tolerance, not sort order
    assert cmp("", pa.table({"x": [0.1234549999]}), pa.table({"x": [0.1234550001]})).match
    g2 = pa.table({"x": [1.0, 1.0 + 8e-6], "y": [2.0 + 8e-6, 2.0]})
    p2 = pa.table({"x": [1.0 + 4e-6, 1.0 + 4e-6], "y": [2.0, 2.0 + 8e-6]})
    assert cmp("", g2, p2).match  # two float columns: bipartite matching


def test_string_number_policy(sq, dk):
    # an integer-valued string is policy.integer_string's (default equal, flagged: issue 20)
    r = cmp("", sq("SELECT '5'"), dk("SELECT 5"))
    assert r.match and "integer_string" in r.flags
    r = cmp("", sq("SELECT '5'"), dk("SELECT 5"), dataclasses.replace(POLICY, integer_string="flagged"))
    assert not r.match and r.reason == "types" and "integer_string" in r.flags
    # any other numeric string is string_number_equal's
    r = cmp("", sq("SELECT '5.5'"), dk("SELECT 5.5"))
    assert not r.match and r.reason == "types"
    assert cmp("", sq("SELECT '5.5'"), dk("SELECT 5.5"),
               dataclasses.replace(POLICY, string_number_equal=True)).match


def test_mixed_sqlite_column(sq, dk):
    gold = sq("SELECT x FROM (SELECT 1 AS x UNION ALL SELECT 'a' UNION ALL SELECT 2.5 UNION ALL SELECT NULL)")
    assert pa.types.is_union(gold.column(0).type)
    assert cmp("", gold, dk("SELECT * FROM (VALUES ('a'), (NULL)) t(x)"),).reason == "row_count"
    pred = sq("SELECT x FROM (SELECT NULL AS x UNION ALL SELECT 2.5 UNION ALL SELECT 'a' "
              "UNION ALL SELECT 1.0)")
    assert cmp("", gold, pred).match
    wrong = sq("SELECT x FROM (SELECT NULL AS x UNION ALL SELECT 2.5 UNION ALL SELECT 'b' UNION ALL SELECT 1)")
    assert not cmp("", gold, wrong).match


# --------------------------------------------------------------- wrong answers that look similar
def test_missing_order_by_fails_with_order_reason(sq, dk):
    r = check(sq, dk, "SELECT name FROM singer ORDER BY name", "SELECT name FROM singer ORDER BY name DESC")
    assert not r.match and r.reason == "order" and r.diff.first_order_mismatch == 0
    assert check(sq, dk, "SELECT name FROM singer ORDER BY name", "SELECT name FROM singer ORDER BY name").match


def test_missing_distinct_fails(sq, dk):
    r = check(sq, dk, "SELECT DISTINCT country FROM singer", "SELECT country FROM singer")
    assert not r.match and r.reason == "row_count" and r.diff.extra_rows == 3
    # same row count, different multiplicities: a set comparison would accept this
    r = cmp("", sq("SELECT 'a' UNION ALL SELECT 'a' UNION ALL SELECT 'b'"),
            dk("SELECT * FROM (VALUES ('a'), ('b'), ('b'))"))
    assert not r.match and r.reason == "values" and r.diff.missing_rows == 1 and r.diff.extra_rows == 1


def test_scrambled_columns_and_swapped_columns_fail(sq, dk):
    r = check(sq, dk, "SELECT name, age FROM singer", "SELECT name, age FROM singer ORDER BY name")
    assert r.match
    gold = sq("SELECT name, age FROM singer")
    names = sorted(r[1] for r in ROWS)
    ages = sorted(r[2] for r in ROWS)  # each column sorted on its own: same column multisets
    r = cmp("", gold, pa.table({"name": names, "age": ages}))
    assert not r.match and r.reason == "values" and r.diff.missing_sample
    r = cmp("", gold, dk("SELECT age, name FROM singer"))  # permuted projection: matched by content
    assert r.match and "columns_reordered" in r.flags and r.diff.column_mapping == (1, 0)
    r = cmp("", gold, dk("SELECT age, name FROM singer"), dataclasses.replace(POLICY, columns="positional"))
    assert r.reason == "values" and "columns_reordered" not in r.flags


def test_numbers_beyond_tolerance_fail(sq, dk):
    assert cmp("", sq("SELECT 123456"), dk("SELECT 123457")).reason == "values"
    assert cmp("", sq("SELECT 123456.0"), dk("SELECT 123457.0::DOUBLE")).reason == "values"
    assert cmp("", sq("SELECT 0.12344"), dk("SELECT 0.12346::DOUBLE")).reason == "values"
    assert cmp("", sq("SELECT 0.12344"), dk("SELECT 0.123445::DOUBLE")).match


def test_null_vs_empty_string_vs_empty_result(sq, dk):
    assert cmp("", sq("SELECT NULL"), dk("SELECT ''")).reason == "values"
    assert not cmp("", sq("SELECT ''"), dk("SELECT NULL")).match
    r = cmp("", sq("SELECT NULL"), dk("SELECT 1 WHERE false"))
    assert not r.match and r.reason == "row_count"
    assert cmp("", sq("SELECT NULL"), dk("SELECT NULL::INTEGER")).match
    assert cmp("", sq("SELECT name FROM singer WHERE 0"), dk("SELECT name FROM singer WHERE false")).match


def test_wrong_row_among_ties_fails(sq, dk):
    gold_sql = "SELECT name FROM singer ORDER BY age LIMIT 2"
    r = check(sq, dk, gold_sql, "SELECT name FROM singer ORDER BY age, id LIMIT 3 OFFSET 1")
    assert not r.match and r.reason == "row_count"
    r = check(sq, dk, gold_sql, "SELECT name FROM singer WHERE name IN ('Fay', 'Bob') ORDER BY age")
    assert not r.match and r.reason in ("order", "values")
    # under ORDER BY without LIMIT, a row moved across tie groups fails
    r = check(sq, dk, "SELECT name, age FROM singer ORDER BY age",
              "SELECT name, age FROM singer ORDER BY age = 30, age")
    assert not r.match and r.reason == "order"


def test_missing_column_fails(sq, dk):
    r = check(sq, dk, "SELECT name, age FROM singer", "SELECT name FROM singer")
    assert not r.match and r.reason == "column_count"


def test_no_result_and_batch(sq, dk):
    shape = analyze_gold("SELECT name FROM singer", "sqlite")
    out = compare_batch([(sq("SELECT name FROM singer"), None, shape, None),
                         (sq("SELECT name FROM singer"), dk("SELECT name FROM singer"), shape, None),
                         (sq("SELECT 1"), dk("SELECT 2"), GoldShape.unparsed(), None)], POLICY)
    assert [c.reason for c in out] == ["no_result", "match", "values"]
    assert "unparsed_gold" in out[2].flags


# --------------------------------------------------------------- policy object
def test_policy_yaml_mirrors_defaults_and_overrides_change_fingerprint():
    cfg = OmegaConf.load(REPO / "conf" / "policy" / "default.yaml")
    pol = ComparisonPolicy.from_config(cfg)
    assert pol == ComparisonPolicy() and pol.fingerprint() == ComparisonPolicy().fingerprint()
    other = {"version": "cmp-x", "order": "bag", "ties": "positional", "columns": "positional",
             "distinct": "strip", "ties_at_limit": "strict", "duplicates": "set",
             "inconclusive_flags": "[null_order]", "decimal_rounding_min_scale": 6,
             "max_extra_pred_columns": 3, "midnight_timestamp": "flagged",
             "integer_string": "inconclusive"}
    for f in dataclasses.fields(ComparisonPolicy):
        if f.name == "name":  # a label: the same rules under another name share their scores
            renamed = OmegaConf.merge(cfg, OmegaConf.from_dotlist(["name=mine"]))
            assert ComparisonPolicy.from_config(renamed).fingerprint() == pol.fingerprint()
            continue
        v = getattr(pol, f.name)
        new = str(not v).lower() if isinstance(v, bool) else v * 10 + 1e-3 if isinstance(v, float) \
            else other[f.name]
        over = OmegaConf.merge(cfg, OmegaConf.from_dotlist([f"{f.name}={new}"]))
        assert ComparisonPolicy.from_config(over).fingerprint() != pol.fingerprint(), f.name
    with pytest.raises(ValueError):
        ComparisonPolicy.from_config({"abs_tolerance": 1e-4})
    with pytest.raises(ValueError):
        ComparisonPolicy(order="sorted")
    strict = ComparisonPolicy.from_config(OmegaConf.merge(cfg, OmegaConf.load(REPO / "conf" / "policy" / "strict.yaml")))
    assert strict.extra_pred_columns is False and strict.ties_at_limit == "strict" and strict.columns == "positional"


# --------------------------------------------------------------- property: bag core on random data
@pytest.mark.parametrize("seed", range(8))
def test_random_permutation_with_noise_matches_and_one_change_fails(seed):
    """Shuffled rows + float noise far below tolerance match; one value moved past it fails."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    ints = rng.integers(0, 3, n).astype(object)
    ints[rng.random(n) < 0.2] = None
    fl = np.round(rng.random(n), 2)  # many duplicates -> ties inside exact groups
    strs = rng.choice(["a", "b", None], n)
    gold = pa.table({"i": pa.array(list(ints), pa.int64()), "f": fl, "f2": fl * 3, "s": list(strs)})
    perm = rng.permutation(n)
    noisy = fl[perm] + rng.normal(0, 1e-7, n)
    pred = pa.table({"i": pa.array(list(ints[perm]), pa.int32()), "f": noisy, "f2": fl[perm] * 3,
                     "s": pa.array(list(strs[perm]), pa.large_string())})
    assert cmp("", gold, pred).match
    k = int(rng.integers(0, n))
    bad = noisy.copy()
    bad[k] += 1e-3
    r = cmp("", gold, pred.set_column(1, "f", pa.array(bad)))
    assert not r.match and r.reason == "values" and r.diff.missing_rows == r.diff.extra_rows == 1


def test_duplicates_set_policy_ignores_missing_distinct_but_default_fails_it():
    """policy.duplicates=set (test-suite-like) passes a missing DISTINCT that the default bag
    policy fails; a wrong value still fails under both."""
    import pyarrow as pa

    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.comparison.result_set import compare
    from polysql_ray.comparison.shape import analyze_gold

    gold = pa.table({"name": ["a", "b"]})
    pred = pa.table({"name": ["a", "b", "a"]})
    wrong = pa.table({"name": ["a", "c", "a"]})
    shape = analyze_gold("SELECT DISTINCT name FROM t", "sqlite")
    bag, st = ComparisonPolicy(), ComparisonPolicy(duplicates="set")
    assert compare(gold, pred, shape, bag).reason == "row_count"
    assert compare(gold, pred, shape, st).match
    assert not compare(gold, wrong, shape, st).match
    assert bag.fingerprint() != st.fingerprint()


def _retyped(t: pa.Table) -> pa.Table:
    """``t`` with the same values under other Arrow types (int64 -> int32, string ->
    large_string), so that :func:`identical` is False and compare takes its full path."""
    cols = []
    for c in t.columns:
        if pa.types.is_int64(c.type):
            c = c.cast(pa.int32())
        elif pa.types.is_string(c.type):
            c = c.cast(pa.large_string())
        cols.append(c)
    return pa.Table.from_arrays(cols, names=t.column_names)


@pytest.mark.parametrize("gold_sql", [
    "SELECT name, age FROM singer",
    "SELECT name FROM singer ORDER BY age LIMIT 2",         # tie at the cut: ties_at_limit
    "SELECT name, age FROM singer ORDER BY age",            # ties inside the list
    "SELECT name FROM singer ORDER BY age DESC",            # key only in the probe
    "SELECT country, count(*) FROM singer GROUP BY country ORDER BY count(*) DESC LIMIT 1",
    "SELECT name FROM singer WHERE age > 99",               # empty
    "SELECT age FROM singer",                               # duplicates
])
@pytest.mark.parametrize("policy", [POLICY, dataclasses.replace(POLICY, ties_at_limit="strict"),
                                    dataclasses.replace(POLICY, duplicates="set"),
                                    dataclasses.replace(POLICY, ties="positional", columns="positional")])
def test_identical_result_fast_path_equals_full_comparison(sq, gold_sql, policy):
    """A prediction identical to the gold is decided without canonicalising (result_set.identical):
    the Comparison (reason, flags, diff) is the one the full path gives the same values."""
    from polysql_ray.comparison.result_set import identical

    shape = analyze_gold(gold_sql, "sqlite")
    probe = sq(shape.probe_sql) if shape.probe_sql else None
    gold = sq(gold_sql)
    other = _retyped(gold)
    assert identical(gold, gold) and (not identical(gold, other) or gold.num_rows == 0)
    fast = compare(gold, gold, shape, policy, probe)
    assert fast.match and fast == compare(gold, other, shape, policy, probe)


@pytest.mark.parametrize("n_tied,n_probe", [(3, 3), (3, 1 + 100), (1 + 100, 1 + 100)])
def test_identical_result_keeps_tie_flags_at_the_cut(n_tied, n_probe):
    """ties_at_limit and ties_truncated (tie group running to the end of a full probe window)
    are gold-side flags: an identical prediction carries them exactly as the full path does."""
    from polysql_ray.comparison.shape import TIE_WINDOW

    shape = analyze_gold("SELECT name FROM p ORDER BY born LIMIT 1", "sqlite")
    probe = pa.table({"name": [f"n{i}" for i in range(n_probe)],
                      "k": [None] * n_tied + [f"{i:04d}" for i in range(n_probe - n_tied)]})
    gold = pa.table({"name": ["n0"]})
    fast = compare(gold, gold, shape, POLICY, probe)
    assert fast == compare(gold, _retyped(gold), shape, POLICY, probe)
    assert "ties_at_limit" in fast.flags
    assert ("ties_truncated" in fast.flags) == (n_tied >= 1 + TIE_WINDOW)


def test_identical_needs_same_types_values_and_no_nan():
    from polysql_ray.comparison.result_set import identical

    a = pa.table({"x": [1, 2], "y": ["a", None]})
    assert identical(a, pa.table({"other": [1, 2], "names": ["a", None]}))  # names never count
    assert not identical(a, pa.table({"x": [2, 1], "y": [None, "a"]}))       # order counts
    assert not identical(a, _retyped(a))
    nan = pa.table({"f": [float("nan")]})
    assert not identical(nan, nan)  # NaN takes the full path (its tolerance rule decides)


# --------------------------------------------------------------- integer gold, engine-imposed DECIMAL scale
def test_integer_gold_is_matched_exactly_by_a_float(sq, dk):
    """An integer gold has no float noise to absorb: a float prediction must round to it within
    abs_tol; rel_tol (1e-9 of 1e9 is 1) never lets 1000000000.0 pass for 1000000001."""
    gold = sq("SELECT 1000000001")
    for wrong in ("1000000000.0", "1000000002.0", "1000000001.5"):
        r = cmp("", gold, dk(f"SELECT {wrong}::DOUBLE"))
        assert not r.match and r.reason == "values", (wrong, r)
    assert cmp("", gold, dk("SELECT 1000000001.0::DOUBLE")).match
    assert cmp("", sq("SELECT 7"), dk("SELECT 7 + 1e-12")).match         # float noise below abs_tol
    assert cmp("", gold, dk("SELECT 1000000001.0000::DECIMAL(14,4)")).match
    # a float gold keeps the full tolerance (its own accumulation noise): 3.0000000000000004 vs 3
    assert cmp("", sq("SELECT 0.1 * 3 * 10"), dk("SELECT 3")).match
    assert cmp("", sq("SELECT 1000000001.0"), dk("SELECT 1000000001")).match
    # NULLs still pair, and the ints stay in their rows
    r = cmp("", sq("SELECT 1, 5 UNION ALL SELECT NULL, 6"), dk("SELECT 1.0::DOUBLE, 5 UNION ALL SELECT NULL, 6"))
    assert r.match, r


def test_engine_decimal_scale_matches_the_rounded_float(sq, dk):
    """MySQL's div_precision_increment=4 returns AVG/quotients as DECIMAL(.,4): 3.3333 is the
    same answer as SQLite's 3.3333333333333335 at that scale; a smaller scale (ROUND(x, 2)) or a
    value off by one unit in the last place is another answer."""
    gold = sq("SELECT 10 / 3.0, 2 / 3.0")
    r = cmp("", gold, dk("SELECT 3.3333::DECIMAL(10,4), 0.6667::DECIMAL(10,4)"))
    assert r.match, r
    assert not cmp("", gold, dk("SELECT 3.33::DECIMAL(10,2), 0.67::DECIMAL(10,2)")).match
    assert not cmp("", gold, dk("SELECT 3.3334::DECIMAL(10,4), 0.6667::DECIMAL(10,4)")).match
    assert not cmp("", gold, dk("SELECT 3.3333::DECIMAL(10,4), 0.6667::DECIMAL(10,4)"),
                   dataclasses.replace(POLICY, decimal_rounding_min_scale=None)).match
    # a half rounds away from zero, as the engine rounds the exact quotient
    assert cmp("", sq("SELECT 0.12345, -0.12345"), dk("SELECT 0.1235::DECIMAL(10,4), -0.1235::DECIMAL(10,4)")).match
    with pytest.raises(ValueError, match="decimal_rounding_min_scale"):
        ComparisonPolicy(decimal_rounding_min_scale=-1)


def test_extra_column_bound_unit():
    """compare() directly: constants named by the caller never stand for a gold column when
    there are extra columns; the bound counts the other extra columns; positional alike."""
    gold = pa.table({"c": [6]})
    shot = pa.table({f"p{i}": [i] for i in range(10)})
    shape = analyze_gold("SELECT count(*) FROM singer", "sqlite")
    assert compare(gold, shot, shape, POLICY).match  # without the SQL's facts: data alone
    r = compare(gold, shot, shape, POLICY, pred_constants=tuple(range(10)))
    assert not r.match and r.reason == "column_count"
    r = compare(gold, shot, shape, POLICY, pred_constants=tuple(range(10)))
    r = compare(gold, shot, shape, POLICY, pred_constants=(0, 1, 2, 3, 4, 5, 7, 8, 9))  # 6 is data
    assert r.match and r.diff.column_mapping == (6,) and "extra_pred_columns_used" in r.flags
    r = compare(gold, shot, shape, dataclasses.replace(POLICY, max_extra_pred_columns=8))
    assert not r.match and r.reason == "column_count"
    pos = dataclasses.replace(POLICY, columns="positional")
    assert not compare(pa.table({"c": [0]}), shot, shape, pos, pred_constants=(0,)).match
    assert compare(pa.table({"c": [0]}), shot, shape, pos, pred_constants=(3,)).match
    nocol = dataclasses.replace(POLICY, extra_pred_columns=False)  # untouched: column_count as ever
    assert compare(gold, shot, shape, nocol).reason == "column_count"


def test_matches_is_compare_match(sq, dk):
    """result_set.matches (no explanations, no diff) answers exactly compare(...).match."""
    from polysql_ray.comparison.result_set import matches

    pairs = [("SELECT name FROM singer", "SELECT name FROM singer WHERE age > 26"),
             ("SELECT country FROM singer", "SELECT DISTINCT country FROM singer"),
             ("SELECT name, age FROM singer ORDER BY age", "SELECT age, name FROM singer ORDER BY age DESC"),
             ("SELECT name, age FROM singer ORDER BY age", "SELECT age, name FROM singer ORDER BY age"),
             ("SELECT lower(name) FROM singer", "SELECT upper(name) FROM singer"),
             ("SELECT count(*) FROM singer", "SELECT count(*), 0 FROM singer"),
             ("SELECT score FROM singer", "SELECT score + 1e-7 FROM singer"), ("SELECT id FROM singer", "SELECT 1")]
    for policy in (POLICY, dataclasses.replace(POLICY, duplicates="set"), dataclasses.replace(POLICY, columns="positional")):
        for g, p in pairs:
            shape = analyze_gold(g, "sqlite")
            probe = sq(shape.probe_sql) if shape.probe_sql else None
            gold, pred = sq(g), dk(p)
            for consts in ((), (1,)):
                assert matches(gold, pred, shape, policy, probe, pred_constants=consts) == \
                    compare(gold, pred, shape, policy, probe, pred_constants=consts).match, (g, p, policy)


def test_multiset_equal_answers_as_unmatched_rows_does():
    """multiset_equal (the yes/no of the mapping search and the re-checks) is the emptiness of
    unmatched_rows on exact codes and on one or two tolerance columns, with inf, NaN placeholders
    and values within and beyond the tolerance."""
    import numpy as np

    from polysql_ray.comparison.result_set import multiset_equal, unmatched_rows

    policy = ComparisonPolicy()
    rng = np.random.default_rng(7)
    values = [0.0, -0.0, 1.0, 1.0 + 1e-7, 1.00002, 2.0, np.inf, -np.inf, np.nan, 1e9, 1e9 + 1]
    seen = set()
    for _ in range(3000):
        n, ke = int(rng.integers(0, 7)), int(rng.integers(1, 3))
        kf = min(int(rng.integers(0, 3)), ke)
        ge = rng.integers(-1, 2, (n, ke)).astype(np.int64)
        gf = rng.choice(values, (n, kf)).astype(np.float64)
        perm = rng.permutation(n)
        pe, pf = ge[perm].copy(), gf[perm].copy()
        if n and rng.random() < 0.6:
            i = int(rng.integers(0, n))
            if kf and rng.random() < 0.7:
                pf[i, int(rng.integers(0, kf))] = rng.choice([0.0, 1.0 + 2e-6, 1.0 + 1e-6, np.nan, np.inf, 1e9 + 0.5])
            else:
                pe[i, int(rng.integers(0, ke))] = int(rng.integers(-1, 2))
        ug, up, _ = unmatched_rows(ge, pe, gf, pf, policy)
        expected = len(ug) == 0 and len(up) == 0
        assert multiset_equal(ge, pe, gf, pf, policy) == expected, (ge, gf, pe, pf)
        seen.add((kf, expected))
    assert seen == {(kf, e) for kf in (0, 1, 2) for e in (True, False)}
