"""Suite values never create a disagreement between engines that the source lacks (suites v3,
``polysql_ray/suites/portability.py``): the gold's own text, which agrees across the engines on
the source, agrees on every generated database too, on the real engines (SQLite, DuckDB, the
shared PostgreSQL and MariaDB servers). The same generation without the portability rules (suites
v2's values: NULLs under the gold's ORDER BY key, 'FRANCE' beside 'France') makes PostgreSQL
and MariaDB disagree on some candidate, so the check can fail."""
from __future__ import annotations

import sqlite3

import pytest

from polysql_ray.comparison.policy import ComparisonPolicy
from polysql_ray.comparison.prepare import executed_sql
from polysql_ray.comparison.shape import analyze_gold
from polysql_ray.comparison.verdict import Pair, decide
from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines.base import Limits
from polysql_ray.engines.registry import default_dialect, make_engine
from polysql_ray.suites import SuiteSettings, suite_for
from polysql_ray.suites.generate import generate_candidate, read_source, type_decisions
from polysql_ray.suites.portability import Portability, active_hazards, order_key_columns

from tests.conftest_servers import SERVERS, register_server_replication, server_reachable

DDL = "CREATE TABLE club (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT, rnk INTEGER)"
ROWS = [(1, "Ajax", "Netherlands", 3), (2, "Lyon", "France", 1), (3, "Porto", "Portugal", 4),
        (4, "Nice", "France", 2), (5, "Braga", "Portugal", 6), (6, "Lille", "France", 5)]
GOLDS = [
    "SELECT name FROM club ORDER BY rnk",                     # NULL placement (rnk has none)
    "SELECT country, count(*) FROM club GROUP BY country",    # case-insensitive grouping
    "SELECT name FROM club WHERE country = 'France'",         # case-insensitive =
    "SELECT count(*) FROM club WHERE country IN ('France', 'Spain')",
]
CANDIDATES, SEED, MAX_ROWS = 10, 5, 8


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("portable") / "club.sqlite"
    con = sqlite3.connect(path)
    con.execute(DDL)
    con.executemany("INSERT INTO club VALUES (?,?,?,?)", ROWS)
    con.commit()
    con.close()
    return str(path)


def candidates(source: str, folder, portability: Portability) -> list[str]:
    model = read_source(source, "club", GOLDS, portability)
    decisions = type_decisions(source)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(CANDIDATES):
        path = folder / f"club_c{k}.sqlite"
        generate_candidate(model, k, SEED, MAX_ROWS, path, decisions)
        out.append(str(path))
    return out


def test_hazards_follow_the_declared_semantics():
    assert [h.name for h in active_hazards(["sqlite"])] == []
    assert [h.name for h in active_hazards(["sqlite", "postgres"])] == ["null_order", "collation_case"]
    assert [h.name for h in active_hazards(["sqlite", "mysql"])] == ["collation_case", "collation_trailing_space"]
    assert {h.name for h in active_hazards()} == {"null_order", "collation_case", "collation_trailing_space"}
    assert order_key_columns(["SELECT a AS x, b FROM t ORDER BY x, 2 DESC",
                              "SELECT c FROM t WHERE d IN (SELECT e FROM u ORDER BY count(f), g LIMIT 1)"]) \
        == {"a", "b", "g"}


def test_domains_leave_out_case_and_pad_variants_and_order_key_nulls(source):
    every = read_source(source, "club", GOLDS + ["SELECT name FROM club WHERE country = 'France  '"])
    only_sqlite = read_source(source, "club", GOLDS, Portability.for_engines(["sqlite"]))
    col = {c.name: c for c in every.tables[0].columns}
    col1 = {c.name: c for c in only_sqlite.tables[0].columns}
    assert "FRANCE" in col1["country"].domain and "SPAIN" in col1["country"].domain  # v2's variants
    assert "FRANCE" not in col["country"].domain and "France  " not in col["country"].domain
    assert "Spain" in col["country"].domain and "SPAIN" not in col["country"].domain
    assert col["rnk"].no_drawn_null and not col1["rnk"].no_drawn_null  # ORDER BY key: no NULL drawn
    assert not col["country"].no_drawn_null and not col["country"].not_null  # not one: NULLs still drawn


def test_suite_databases_hold_no_case_variant_and_no_order_key_null(source, tmp_path):
    s = suite_for("club", source, SEED, 4, GOLDS, tmp_path, dataset="t",
                  settings=SuiteSettings(candidates=CANDIDATES, size=4, max_rows=MAX_ROWS))
    assert s.version == "suite-4" and s.figures["portability"] == [
        "null_order", "collation_case", "collation_trailing_space"]
    assert s.databases
    for d in s.databases:
        con = sqlite3.connect(d.path)
        assert con.execute("SELECT count(*) FROM club WHERE rnk IS NULL").fetchone()[0] == 0
        assert con.execute("SELECT count(DISTINCT country) = count(DISTINCT lower(country)) FROM club"
                           ).fetchone()[0] == 1
        con.close()


def _target_settings(dialect: str):
    if dialect in SERVERS:
        if not server_reachable(*SERVERS[dialect][:2]):
            pytest.skip(f"{dialect} server unreachable")
        register_server_replication()
    return None


def _gold_disagreements(paths: list[str], dialect: str, replicas) -> list[tuple[str, str, str]]:
    """(database, gold, reason) for each gold whose own text, run on ``dialect``'s copy, differs
    from the gold on the SQLite file (the sweep's suite comparison of the gold as a prediction)."""
    from polysql_ray.replication.base import replicate

    _target_settings(dialect)
    lite, target = make_engine("sqlite"), make_engine(dialect)
    limits, policy, out = Limits(), ComparisonPolicy(), []
    try:
        for p in paths:
            name = p.rsplit("/", 1)[-1][:-7]
            loc = replicate(SourceDatabase("suite_portable", name, "sqlite", p), dialect, replicas).location
            for g in GOLDS:
                pred = executed_sql(g, default_dialect(dialect), policy)
                v = decide("ok", lite.execute(p, g, limits), None, target.execute(loc, pred, limits),
                           analyze_gold(g, "sqlite"), policy, limits,
                           pair=Pair(g, pred, "sqlite", default_dialect(dialect), "sqlite", dialect))
                if v.verdict != "pass":
                    out.append((name, g, f"{v.verdict}:{v.reason}:{'+'.join(v.flags)}"))
    finally:
        lite.close()
        target.close()
    return out


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql"])
def test_generated_databases_create_no_disagreement_the_source_lacks(source, tmp_path, dialect):
    replicas = tmp_path / "replicas"
    assert _gold_disagreements([source], dialect, replicas) == []  # none on the source itself
    portable = candidates(source, tmp_path / "v3", Portability.for_engines())
    assert _gold_disagreements(portable, dialect, replicas) == []
    if dialect in ("postgres", "mysql"):
        raw = candidates(source, tmp_path / "v2", Portability())  # no rule: v2's values
        found = _gold_disagreements(raw, dialect, replicas)
        want = GOLDS[:1] if dialect == "postgres" else GOLDS[1:]   # NULL order / case-insensitive =, IN
        assert any(g in want for _, g, _ in found), found


def test_a_suite_database_where_the_gold_itself_disagrees_is_left_out(source, tmp_path):
    """The scoring net (``suite_stage._suite_verdict``): a suite database whose values make the
    gold's own text disagree across the engines while it agrees on the original (here a NULL
    under the gold's ORDER BY, written by hand: generation no longer draws one) is left out for
    that question (``gold_unportable``), so a correct prediction passes; a wrong prediction still
    fails on the databases that remain."""
    from polysql_ray.comparison.shape import analyze_prediction
    from polysql_ray.pipeline.suite_stage import _suite_verdict
    from polysql_ray.replication.base import replicate

    _target_settings("postgres")
    gold = GOLDS[0]
    dbs = {}
    for name, rows in (("club_null", ROWS[:3] + [(7, "Metz", "France", None)]), ("club_ok", ROWS[1:])):
        p = tmp_path / f"{name}.sqlite"
        con = sqlite3.connect(p)
        con.execute(DDL)
        con.executemany("INSERT INTO club VALUES (?,?,?,?)", rows)
        con.commit()
        con.close()
        dbs[name] = str(p)
    lite, pg, limits, policy = make_engine("sqlite"), make_engine("postgres"), Limits(), ComparisonPolicy()
    locs = {n: replicate(SourceDatabase("suite_portable", n, "sqlite", p), "postgres", tmp_path / "r").location
            for n, p in {**dbs, "club": source}.items()}
    results = {}

    def run(engine, loc, sql):
        key = f"{engine}|{loc}|{sql}"
        results[key] = (lite if engine == "sqlite" else pg).execute(loc, sql, limits)
        return key

    def meta(pred):
        pair = (gold, pred, "sqlite", "postgres", "sqlite", "postgres")
        return {"row": 0, "shape": analyze_gold(gold, "sqlite"), "gold_shape": analyze_prediction(gold, "sqlite"),
                "pred_shape": analyze_prediction(pred, "postgres"), "gen_status": "ok", "pair": pair,
                "gold_pair": (gold, gold, "sqlite", "postgres", "sqlite", "postgres"),
                "orig": (run("sqlite", source, gold), None, run("postgres", locs["club"], gold)),
                "dbs": [(n, run("sqlite", p, gold), None, None, run("postgres", locs[n], pred), None, None, None,
                         run("postgres", locs[n], gold)) for n, p in dbs.items()]}

    try:
        right = "SELECT name FROM club ORDER BY rnk NULLS LAST"  # PostgreSQL's own default, spelled out
        verdict, failed, _, flags, n = _suite_verdict(meta(right), results, policy)
        assert (verdict, n) == ("pass", 1) and "club_null:gold_unportable" in flags, (verdict, failed, flags)
        wrong = "SELECT name FROM club ORDER BY rnk DESC"
        verdict, failed, _, flags, n = _suite_verdict(meta(wrong), results, policy)
        assert (verdict, failed) == ("fail", "club_ok"), (verdict, failed, flags)
        no_net = meta(right)
        no_net["orig"] = None  # without the gold's own check the NULL database fails the right one
        assert _suite_verdict(no_net, results, policy)[:2] == ("fail", "club_null")
    finally:
        lite.close()
        pg.close()


def test_an_order_key_with_source_nulls_gets_them_only_from_copied_rows(tmp_path):
    """world_1's LifeExpectancy has NULLs, none in Asia: a drawn NULL in an Asian row made the
    Asia gold's ORDER BY ... LIMIT 1 answer differently on SQLite and PostgreSQL (suites v3). A
    NULL in an ORDER BY key now comes only with a whole copied source row."""
    path = tmp_path / "club_nulls.sqlite"
    con = sqlite3.connect(path)
    con.execute(DDL)
    con.executemany("INSERT INTO club VALUES (?,?,?,?)", ROWS + [(7, "Metz", "Spain", None)])
    con.commit()
    con.close()
    src_rows = set(ROWS + [(7, "Metz", "Spain", None)])
    for p in candidates(str(path), tmp_path / "c", Portability.for_engines()):
        con = sqlite3.connect(p)
        rows = con.execute("SELECT * FROM club WHERE rnk IS NULL").fetchall()
        con.close()
        assert set(rows) <= src_rows, rows
    raw = [sqlite3.connect(p).execute("SELECT * FROM club WHERE rnk IS NULL").fetchall()
           for p in candidates(str(path), tmp_path / "raw", Portability())]
    assert any(set(r) - src_rows for r in raw)  # without the rule, drawn NULLs in other rows
