"""Issue 20 item 3: the two type coincidences, each decided by its policy knob (equal | flagged |
inconclusive) and flagged whenever it decides the verdict; real engines (SQLite source, DuckDB,
PostgreSQL and MariaDB targets), both directions (a wrong answer of the same shape is never
passed nor flagged)."""
from __future__ import annotations

import os
import sqlite3

import pyarrow as pa
import pytest

from conftest_servers import SERVERS, server_reachable  # noqa: E402

from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare
from polysql_ray.comparison.equivalence import score_sql
from polysql_ray.comparison.policy import COINCIDENCES

MODES = ("equal", "flagged", "inconclusive")
#: mode -> (verdict, flag raised) of a prediction that differs from the gold only by the coincidence
EXPECTED = {"equal": "pass", "flagged": "fail", "inconclusive": "inconclusive"}

TARGETS = ["duckdb"] + [d for d in ("postgres", "mysql") if server_reachable(*SERVERS[d][:2])
                        or os.environ.get("POLYSQL_REQUIRE_SERVERS") == "1"]

#: dialect -> (the midnight-timestamp answer, the integer answer) written for that dialect
DATE_PLUS_7 = {"duckdb": "SELECT id, d + INTERVAL 7 DAY FROM ev ORDER BY id",
               "postgres": "SELECT id, date_trunc('day', d + interval '7 days') FROM ev ORDER BY id",
               "mysql": "SELECT id, TIMESTAMP(d + INTERVAL 7 DAY) FROM ev ORDER BY id"}
YEAR = {d: "SELECT id, EXTRACT(YEAR FROM d) FROM ev ORDER BY id" for d in ("duckdb", "postgres", "mysql")}
GOLD_DATE = "SELECT id, date(d, '+7 days') FROM ev ORDER BY id"
GOLD_YEAR = "SELECT id, strftime('%Y', d) FROM ev ORDER BY id"


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("coinc") / "ev.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE ev (id INTEGER PRIMARY KEY, d DATE)")
    con.executemany("INSERT INTO ev VALUES (?, ?)", [(1, "2024-03-01"), (2, "2021-06-15"), (3, "1999-12-31")])
    con.commit()
    con.close()
    return str(path), str(path.parent / "replicas")


def _score(db, gold, pred, dialect, **knobs):
    path, replicas = db
    return score_sql(gold, pred, database=path, dialect=dialect, replicas_dir=replicas,
                     policy=ComparisonPolicy(**knobs))


#: knob -> (gold, the target dialect's answer, the same answer made wrong, reason without the rule)
CASES = {"midnight_timestamp": (GOLD_DATE, DATE_PLUS_7, lambda sql: sql.replace("7", "8"), "values"),
         "integer_string": (GOLD_YEAR, YEAR, lambda sql: sql.replace("FROM d)", "FROM d) + 1"), "types")}


@pytest.mark.parametrize("dialect", TARGETS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("knob", COINCIDENCES)
def test_each_coincidence_under_each_value(db, knob, mode, dialect):
    gold, answer, wrong, strict_reason = CASES[knob]
    r = _score(db, gold, answer[dialect], dialect, **{knob: mode})
    assert r.verdict == EXPECTED[mode], r
    assert knob in r.flags and not set(r.flags) & (set(COINCIDENCES) - {knob})
    if mode != "equal":
        assert r.reason == strict_reason  # '2021' vs 2021 differ only by type
    # the other direction: the same shape of answer, one off, fails under every value, unflagged
    r = _score(db, gold, wrong(answer[dialect]), dialect, **{knob: mode})
    assert (r.verdict, r.reason) == ("fail", "values") and knob not in r.flags


def test_same_types_carry_no_coincidence_flag(db):
    # the gold on its own engine: identical types, nothing coincides
    for gold in (GOLD_DATE, GOLD_YEAR):
        r = _score(db, gold, gold, "sqlite")
        assert r.verdict == "pass" and not set(r.flags) & set(COINCIDENCES)
    # a text year on DuckDB (strftime returns VARCHAR there too) meets the text gold as text
    r = _score(db, GOLD_YEAR, "SELECT id, strftime(d, '%Y') FROM ev ORDER BY id", "duckdb")
    assert r.verdict == "pass" and not set(r.flags) & set(COINCIDENCES)


def _cmp(gold, pred, **knobs):
    return compare(gold, pred, analyze_gold("SELECT x FROM t", "sqlite"), ComparisonPolicy(**knobs))


def test_the_rules_edges():
    ts = pa.array([1709856000_000000], pa.timestamp("us"))  # 2024-03-08 00:00:00
    noon = pa.array([1709856000_000000 + 12 * 3600_000000], pa.timestamp("us"))
    date = pa.table({"x": pa.array(["2024-03-08"])})
    assert _cmp(date, pa.table({"x": ts})).match
    assert not _cmp(date, pa.table({"x": noon})).match  # 12:00 is not the date
    # the text of a midnight timestamp meets it too (the rule stays an equivalence)
    assert _cmp(pa.table({"x": pa.array(["2024-03-08 00:00:00"])}), pa.table({"x": ts})).match
    # DATE vs a midnight TIMESTAMP (DuckDB source vs PostgreSQL target)
    d32 = pa.table({"x": pa.array([19790], pa.date32())})
    c = _cmp(d32, pa.table({"x": ts}))
    assert c.match and "midnight_timestamp" in c.flags
    assert not _cmp(d32, pa.table({"x": ts}), midnight_timestamp="flagged").match
    # integer-valued strings: leading zeros and a sign, never a decimal point or spaces
    for text, num, equal in (("03", 3, True), ("-7", -7, True), ("+7", 7, True), ("3.0", 3, False),
                             (" 3", 3, False), ("1e3", 1000, False), ("2021", 2021.0, True),
                             ("2021", 2021.5, False)):
        c = _cmp(pa.table({"x": pa.array([text])}), pa.table({"x": pa.array([num])}))
        assert c.match is equal, (text, num)
        assert ("integer_string" in c.flags) is equal
    # string_number_equal governs the other numeric strings only
    assert _cmp(pa.table({"x": ["3.5"]}), pa.table({"x": [3.5]}), string_number_equal=True).match
    assert not _cmp(pa.table({"x": ["2021"]}), pa.table({"x": [2021]}), string_number_equal=True,
                    integer_string="flagged").match
    # beyond float's exact integers the per-value path decides (no overflow, no crash)
    big = "123456789012345678901"
    assert _cmp(pa.table({"x": [big]}), pa.table({"x": pa.array([int(big)], pa.decimal128(38, 0))})).match
    assert not _cmp(pa.table({"x": [big]}), pa.table({"x": pa.array([2 * int(big)], pa.decimal128(38, 0))})).match


def test_knob_values_are_checked():
    with pytest.raises(ValueError, match="midnight_timestamp"):
        ComparisonPolicy(midnight_timestamp="yes")
    with pytest.raises(ValueError, match="integer_string"):
        ComparisonPolicy.from_config({"integer_string": "strict"})
    # each value is its own policy: scores under another value are keyed apart
    fps = {ComparisonPolicy(integer_string=m).fingerprint() for m in MODES}
    assert len(fps) == 3
