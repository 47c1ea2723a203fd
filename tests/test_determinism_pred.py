"""Prediction-side determinism: a prediction whose result is not a function of the data gets a
verdict that is the same in every run (``inconclusive`` with ``nondeterministic_pred``, or the
observed verdict when every possible result is judged alike).

The gold side was already checked (``nondeterministic_gold``); these are the prediction's own
cases: a tie at its ``ORDER BY ... LIMIT`` cut, LIMIT without ORDER BY, a nested cut in a tie,
random functions, and columns that are neither grouped nor aggregated on MariaDB (which returns
any row's value). The Spider cases q562, q573, q574, q954 and q955 on MariaDB, with the real
predictions of the four shared prediction sets, flipped between runs before.
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SERVERS, SPIDER, register_server_replication, server_reachable  # noqa: E402

from polysql_ray.comparison import ComparisonPolicy  # noqa: E402
from polysql_ray.comparison.equivalence import score_sql  # noqa: E402
from polysql_ray.comparison.result_set import cut_choices  # noqa: E402
from polysql_ray.comparison.shape import analyze_prediction  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PREDICTIONS = Path(os.environ.get("POLYSQL_SHARED", REPO.parent / "shared")) / "data" / "predictions" / "spider_dev"


def test_prediction_shape_separates_static_from_data_dependent_nondeterminism():
    assert analyze_prediction("SELECT a FROM t ORDER BY random() LIMIT 2", "sqlite").static
    assert analyze_prediction("SELECT a FROM t WHERE x = (SELECT y FROM u LIMIT 1)", "sqlite").static
    top = analyze_prediction("SELECT a FROM t LIMIT 3", "sqlite")  # decided on the data: the cut probe
    assert not top.static and top.limit == 3 and "LIMIT 103" in top.cut_probe_sql and top.cut_keys == ()
    ordered = analyze_prediction("SELECT a FROM t ORDER BY b DESC LIMIT 1", "mysql")
    assert ordered.cut_keys == (-1,) and "b AS __polysql_key0" in ordered.cut_probe_sql
    assert analyze_prediction("SELECT a, b FROM t GROUP BY a", "mysql").ties_probe_sql
    assert analyze_prediction("SELECT a FROM t", "sqlite") == analyze_prediction("not sql at all (", "sqlite")
    deep = analyze_prediction("SELECT " + " + ".join(["a"] * 5000) + " FROM t", "sqlite")
    assert deep.limit is None  # no RecursionError


def test_cut_choices_lists_every_result_the_engine_could_return():
    con = duckdb.connect()
    pred = con.sql("SELECT 'a' AS n, 3 AS s").to_arrow_table()
    probe = con.sql("SELECT * FROM (VALUES ('a', 3), ('b', 3), ('c', 1)) t(n, s)").to_arrow_table()
    alts = cut_choices(pred, probe, 1, (1,), ComparisonPolicy())
    assert [a.column(0).to_pylist() for a in alts] == [["a"], ["b"]]
    untied = con.sql("SELECT * FROM (VALUES ('a', 3), ('b', 2)) t(n, s)").to_arrow_table()
    assert cut_choices(pred, untied, 1, (1,), ComparisonPolicy()) is None
    alike = con.sql("SELECT * FROM (VALUES ('a', 3), ('a', 3)) t(n, s)").to_arrow_table()
    assert cut_choices(pred, alike, 1, (1,), ComparisonPolicy()) is None  # every choice is the same row
    assert cut_choices(pred, probe.slice(0, 1), 1, (1,), ComparisonPolicy()) is None  # nothing past the cut


@pytest.fixture(scope="module")
def ties_db(tmp_path_factory):
    d = tmp_path_factory.mktemp("ties")
    path = d / "ties.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, grp TEXT, score INTEGER, bonus INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)",
                    [(1, "ann", "x", 9, 1), (2, "bob", "x", 7, 5), (3, "cid", "y", 7, 5), (4, "dan", "y", 2, 0)])
    con.commit()
    con.close()
    return path, d / "replicas"


def _score(db, gold, pred, dialect="sqlite"):
    path, replicas = db
    return score_sql(gold, pred, database=str(path), dialect=dialect, replicas_dir=str(replicas), dataset="ties")


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_a_tie_at_the_predictions_own_cut_is_inconclusive_only_when_another_choice_changes_the_verdict(
        ties_db, dialect):
    gold = "SELECT name FROM t ORDER BY score DESC LIMIT 1"  # ann: no tie in the gold
    # bonus 5 ties bob and cid: the engine may return either; both are wrong -> decided fail
    r = _score(ties_db, gold, "SELECT name FROM t ORDER BY bonus DESC LIMIT 1", dialect)
    assert (r.verdict, r.reason) == ("fail", "values") and "nondeterministic_pred" not in r.flags
    # 7 ties bob and cid in the gold too: every choice of the prediction is one the gold accepts
    same = "SELECT name FROM t ORDER BY score DESC LIMIT 1 OFFSET 1"
    r = _score(ties_db, "SELECT name FROM t WHERE score = 7 ORDER BY score LIMIT 1", same, dialect)
    assert r.verdict == "pass" and "nondeterministic_pred" not in r.flags, r.explanation
    # ORDER BY grp LIMIT 1 ties ann and bob: ann passes, bob fails -> inconclusive in every run
    r = _score(ties_db, gold, "SELECT name FROM t ORDER BY grp LIMIT 1", dialect)
    assert (r.verdict, "nondeterministic_pred" in r.flags) == ("inconclusive", True), r.explanation
    # LIMIT without ORDER BY that cuts: any row; one that cuts nothing: decided
    r = _score(ties_db, gold, "SELECT name FROM t LIMIT 1", dialect)
    assert (r.verdict, "nondeterministic_pred" in r.flags) == ("inconclusive", True)
    r = _score(ties_db, "SELECT count(*) FROM t", "SELECT count(*) FROM t LIMIT 1", dialect)
    assert r.verdict == "pass" and not r.flags
    # random functions: nondeterministic whatever the data
    r = _score(ties_db, gold, "SELECT name FROM t WHERE score > 8 OR random() < 0", dialect)
    assert (r.verdict, "nondeterministic_pred" in r.flags) == ("inconclusive", True)


def test_the_gold_run_as_its_own_prediction_keeps_its_verdict(ties_db):
    for gold in ("SELECT name FROM t ORDER BY score DESC LIMIT 2", "SELECT name FROM t ORDER BY bonus DESC LIMIT 1",
                 "SELECT grp, count(*) FROM t GROUP BY grp ORDER BY count(*) DESC LIMIT 1"):
        r = _score(ties_db, gold, gold)
        assert r.verdict == "pass" and "nondeterministic_pred" not in r.flags, (gold, r.explanation)


def test_ungrouped_columns_flag_the_prediction_only_where_the_engine_returns_any_row(ties_db):
    gold = "SELECT grp, max(score) FROM t GROUP BY grp"
    pred = "SELECT grp, max(score), name FROM t GROUP BY grp"  # name: several values per group
    r = _score(ties_db, gold, pred)  # SQLite: the max() row's name, a function of the data
    assert "nondeterministic_pred" not in r.flags and r.verdict == "pass"
    if not server_reachable(*SERVERS["mysql"][:2]):
        pytest.skip("MariaDB unreachable")
    register_server_replication()
    r = _score(ties_db, gold, pred, "mysql")
    assert (r.verdict, "nondeterministic_pred" in r.flags) == ("inconclusive", True), r.explanation


#: Spider dev questions whose MariaDB verdicts flipped between runs (issue 23).
FLIPPED = (562, 573, 574, 954, 955)


@pytest.mark.slow
@pytest.mark.servers
def test_spider_cases_that_flipped_on_mariadb_score_the_same_every_run():
    if not server_reachable(*SERVERS["mysql"][:2]):
        pytest.skip("MariaDB unreachable")
    if not (SPIDER / "dev.json").exists() or not PREDICTIONS.is_dir():
        pytest.skip("shared Spider data absent")
    register_server_replication()
    import tempfile

    dev = json.loads((SPIDER / "dev.json").read_text())
    files = sorted(PREDICTIONS.glob("*.sql"))
    replicas = tempfile.mkdtemp(prefix="polysql_flip_")
    runs = []
    for _ in range(2):
        got = {}
        for f in files:
            lines = f.read_bytes().decode("utf-8").splitlines()
            for q in FLIPPED:
                db = dev[q]["db_id"]
                r = score_sql(dev[q]["query"], lines[q], database=str(SPIDER / "database" / db / f"{db}.sqlite"),
                              dialect="mysql", replicas_dir=replicas, dataset="spider")
                got[(f.stem, q)] = (r.verdict, r.reason, r.flags)
        runs.append(got)
    # verdict and flags are the same every run; an inconclusive item keeps what this run observed
    # (MariaDB did pick other tied rows between the two runs here): its reason and the flags that
    # explain that outcome may differ, its verdict and nondeterminism flags may not
    def stable(v, f):
        return (v, tuple(x for x in f if x.startswith("nondeterministic"))) if v == "inconclusive" else (v, f)

    assert {k: stable(v, f) for k, (v, _, f) in runs[0].items()} == \
        {k: stable(v, f) for k, (v, _, f) in runs[1].items()}
    got = runs[0]
    # the predictions whose own result MariaDB may pick differently are not decided by the pick
    assert got[("c3sql_gpt35", 562)][0] == "inconclusive" and "nondeterministic_pred" in got[("c3sql_gpt35", 562)][2]
    assert got[("codes_15b_sft", 562)][0] == "inconclusive"
    assert got[("codes_15b_sft", 573)][0] == "inconclusive" and "nondeterministic_pred" in got[("codes_15b_sft", 573)][2]
    assert all(v == "inconclusive" for (m, q), (v, _, _) in got.items() if q in (954, 955))
    for (model, q), (verdict, reason, flags) in got.items():
        if verdict in ("pass", "fail") and not reason.startswith("pred_"):
            # decided: either the prediction has a single result, or every result it can have is
            # judged alike (the flag is absent)
            assert "nondeterministic_pred" not in flags, (model, q)
