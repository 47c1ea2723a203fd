"""The quickstart benchmark's expectations, verified against real SQLite.

Every prediction row carries ``expect`` (pass | fail | ambiguous). This file recomputes the
verdict with the simplest sound sqlite3 comparison -- a multiset of rows, or, where the
gold orders (``order_keys``), the ordered sequence of groups of rows tied on the ORDER BY
keys, each group a multiset -- and asserts it matches. Floats are compared after rounding
to 6 decimals (the curated values are far from any rounding boundary); 3 and 3.0 are equal.
"""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from polysql_ray import quickstart
from polysql_ray.datasets import load_dataset
from polysql_ray.generation.registry import make_generator
from polysql_ray.generation.base import GenStatus


@pytest.fixture(scope="module")
def qs_dir(tmp_path_factory) -> Path:
    return quickstart.materialize(tmp_path_factory.mktemp("qs"))


@pytest.fixture(scope="module")
def examples(qs_dir):
    return load_dataset({"name": "quickstart", "layout": "quickstart", "root": str(qs_dir)})


def _canon(v):
    if isinstance(v, bool):
        return ("n", int(v))
    if isinstance(v, (int, float)):
        f = round(float(v), 6)
        return ("n", f + 0.0)
    if v is None:
        return ("null",)
    return (type(v).__name__, v)


def _run(db: str, sql: str):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [tuple(_canon(v) for v in row) for row in con.execute(sql).fetchall()]
    finally:
        con.close()


def _groups(rows, keys):
    out = []
    for r in rows:
        k = tuple(r[i] for i in keys)
        if out and out[-1][0] == k:
            out[-1][1][r] += 1
        else:
            out.append((k, Counter([r])))
    return out


def verdict(example, pred_sql: str) -> str:
    """pass | fail | ambiguous, by plain sqlite3 execution (see module docstring)."""
    db = example.database.location
    gold = _run(db, example.gold_sql)
    if not pred_sql.strip():
        return "fail"
    try:
        pred = _run(db, pred_sql)
    except sqlite3.Error:
        return "fail"
    keys = example.extra.get("order_keys")
    if keys is None:
        same = Counter(gold) == Counter(pred)
    else:
        same = _groups(gold, keys) == _groups(pred, keys)
    if same:
        return "pass"
    if "ties_at_limit" in example.extra["tags"] and keys is not None and len(gold) == len(pred) \
            and [tuple(r[i] for i in keys) for r in gold] == [tuple(r[i] for i in keys) for r in pred]:
        return "ambiguous"   # same ORDER BY key values, other rows among those tied at the cut
    return "fail"


def test_materialize_is_idempotent_and_deterministic(qs_dir, tmp_path):
    shop = qs_dir / "database" / "shop" / "shop.sqlite"
    before = (shop.stat().st_mtime_ns, shop.read_bytes())
    assert quickstart.materialize(qs_dir) == qs_dir
    assert shop.stat().st_mtime_ns == before[0]            # nothing rewritten
    other = quickstart.materialize(tmp_path / "again")
    assert (other / "database" / "shop" / "shop.sqlite").read_bytes() == before[1]
    # a damaged folder is rebuilt
    (qs_dir / "database" / "school" / "school.sqlite").unlink()
    quickstart.materialize(qs_dir)
    assert _run(str(qs_dir / "database" / "school" / "school.sqlite"), "SELECT count(*) FROM students") == [(("n", 8.0),)]


def test_databases_have_the_documented_traps(qs_dir):
    shop = str(qs_dir / "database" / "shop" / "shop.sqlite")
    assert _run(shop, 'SELECT count(*) FROM "order items"') == [(("n", 14.0),)]
    assert _run(shop, "SELECT count(*) FROM customers WHERE email IS NULL") == [(("n", 2.0),)]
    assert _run(shop, "SELECT count(*) FROM customers WHERE email = ''") == [(("n", 1.0),)]
    cols = [r[1] for r in sqlite3.connect(shop).execute("PRAGMA table_info(products)")]
    assert "StockQty" in cols
    assert _run(shop, "SELECT 7/2") == [(("n", 3.0),)]       # SQLite integer division


def test_questions_load_and_ordered_golds_have_keys(examples):
    assert len(examples) == 34
    assert {e.db_id for e in examples} == {"shop", "school"}
    assert all(e.gold_error is None and e.database.exists for e in examples)
    for e in examples:
        rows = _run(e.database.location, e.gold_sql)
        assert rows, f"{e.question_id}: gold returns no rows"
        if " ORDER BY " in e.gold_sql.upper() and len(rows) > 1:
            assert "order_keys" in e.extra, f"{e.question_id}: ordered gold needs order_keys"
    tags = {t for e in examples for t in e.extra["tags"]}
    for needed in ("order_by", "ties_in_order", "ties_at_limit", "group_by_unordered", "null_vs_empty",
                   "integer_division", "like_case", "iso_dates", "decimal_values", "distinct", "real_rounding"):
        assert needed in tags


@pytest.mark.parametrize("name", sorted(quickstart.PREDICTIONS))
def test_expected_verdicts_hold_on_sqlite(examples, name):
    rows = {r["question_id"]: r for r in map(json.loads, quickstart.prediction_path(name).read_text().splitlines())}
    assert set(rows) == {e.question_id for e in examples}
    wrong = {e.question_id: (rows[e.question_id]["expect"], verdict(e, rows[e.question_id]["pred_sql"]))
             for e in examples if verdict(e, rows[e.question_id]["pred_sql"]) != rows[e.question_id]["expect"]}
    assert not wrong, f"{name}: expected vs observed verdicts differ: {wrong}"
    if name == "rewritten":
        assert all(r["expect"] == "pass" for r in rows.values())
        # written differently from the gold, not copied
        assert all(rows[e.question_id]["pred_sql"] != e.gold_sql for e in examples)
    if name == "flawed":
        # two "pass" rows are wrong queries right only on the shipped data (suite EX tells them)
        assert Counter(r["expect"] for r in rows.values()) == {"fail": 28, "pass": 4, "ambiguous": 2}
        assert sorted(q for q, r in rows.items() if r.get("suite") == "fail") == ["school_01", "school_04"]


def test_replay_generator_reads_quickstart_predictions(examples, qs_dir):
    gen = make_generator({"name": "flawed", "generator": "replay",
                          "predictions": str(qs_dir / "predictions" / "flawed.jsonl")})
    preds = gen.generate(examples, "sqlite", "none")
    assert [p.question_id for p in preds] == [e.question_id for e in examples]
    status = Counter(p.status for p in preds)
    assert status == {GenStatus.OK: 33, GenStatus.NO_SQL: 1}
