"""The evaluator's own error rate (issue 20 item 7): native gold scored as predictions against the
source gold, one job, per-dialect agreement with every disagreement's reason and flags, a drill
page, and the agreement in the snapshot data."""
from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, SPIDERMAN  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
OVERLAY = REPO / "benchmarks" / "data" / "spider_postgres_native.jsonl"


def _dataset(tmp_path: Path) -> Path:
    """A jsonl dataset with native gold for duckdb: two agree, one asks another question."""
    db = tmp_path / "ds" / "database" / "shop" / "shop.sqlite"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        con.executemany("INSERT INTO item VALUES (?, ?, ?)", [(1, "a", 2.5), (2, "b", 4.0), (3, "c", None)])
    rows = [
        {"question_id": "q1", "db_id": "shop", "question": "How many items?",
         "gold_sql": "SELECT count(*) FROM item", "gold_sql_duckdb": "SELECT count(*) FROM item"},
        {"question_id": "q2", "db_id": "shop", "question": "Average price?",
         "gold_sql": "SELECT avg(price) FROM item", "gold_sql_duckdb": "SELECT mean(price) FROM item"},
        {"question_id": "q3", "db_id": "shop", "question": "Names of priced items?",
         "gold_sql": "SELECT name FROM item WHERE price IS NOT NULL",
         "gold_sql_duckdb": "SELECT name FROM item"},  # an independent gold that disagrees
        {"question_id": "q4", "db_id": "shop", "question": "Max id?", "gold_sql": "SELECT max(id) FROM item"},
    ]
    path = tmp_path / "ds" / "questions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_native_sets_from_jsonl_columns(tmp_path):
    from polysql_ray.statistics.native_gold import native_sets

    path = _dataset(tmp_path)
    sets = native_sets({"name": "shop", "layout": "jsonl", "root": str(path.parent), "file": path.name})
    assert list(sets) == ["duckdb"] and [r["question_id"] for r in sets["duckdb"]] == ["q1", "q2", "q3"]
    bad = tmp_path / "ds" / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": "q1", "db_id": "shop", "gold_sql_cobol": "x"}) + "\n")
    with pytest.raises(ValueError, match="no engine declares that dialect"):
        native_sets({"name": "shop", "layout": "jsonl", "root": str(path.parent), "file": path.name},
                    overlays=[bad])


@pytest.mark.skipif(not (SPIDERMAN / "test_queries.csv").exists() or not (SPIDER / "dev.json").exists(),
                    reason="shared Spider/SpiderMan data absent (set POLYSQL_SHARED)")
def test_native_sets_of_spider_mysql_and_the_postgres_overlay():
    from polysql_ray.statistics.native_gold import native_sets

    sets = native_sets({"name": "spider", "layout": "spider", "root": str(SPIDER), "file": "dev.json",
                        "db_dir": "database"}, SPIDER.parents[1], [OVERLAY])
    assert len(sets["mysql"]) == 1034 and len(sets["postgres"]) == 45
    assert sets["mysql"][0]["pred_sql"].upper().startswith("SELECT COUNT(*) FROM `SINGER`")


def test_overlay_naming_another_database_is_refused(tmp_path):
    from polysql_ray.statistics.native_gold import native_sets

    path = _dataset(tmp_path)
    bad = tmp_path / "ds" / "bad.jsonl"
    bad.write_text(json.dumps({"question_id": "q1", "db_id": "other", "gold_sql_duckdb": "SELECT 1"}) + "\n")
    with pytest.raises(ValueError, match=r"line 1: question_id 'q1' with db_id 'other' is not a question"):
        native_sets({"name": "shop", "layout": "jsonl", "root": str(path.parent), "file": path.name},
                    overlays=[bad])


def test_one_job_reports_agreement_disagreements_drill_and_snapshot_field(tmp_path):
    from jobs.fidelity import main
    from polysql_ray.statistics.summary import compute_statistics

    path = _dataset(tmp_path)
    rdir = tmp_path / "results"
    rc = main(["step=native", "dataset=jsonl", "dataset.name=shop", f"dataset.root={path.parent}",
               f"dataset.file={path.name}", f"results_dir={rdir}", "ray.num_cpus=2"])
    assert rc == 0
    data = json.loads((rdir / "fidelity" / "native_shop.json").read_text())
    (duck,) = data["dialects"]
    assert (duck["dialect"], duck["scored"], duck["agree"], duck["agreement"]) == ("duckdb", 3, 2, 0.6667)
    (d,) = duck["disagreements"]
    assert (d["question_id"], d["verdict"], d["reason"]) == ("q3", "fail", "row_count")
    assert d["native_sql"] == "SELECT name FROM item" and isinstance(d["flags"], list)
    md = (rdir / "fidelity" / "native_shop.md").read_text()
    assert "| duckdb | 3 | 2 | 0.6667 |" in md and "| q3 | shop | fail | row_count |" in md
    page = rdir / "fidelity" / "drill" / "shop__native_gold_duckdb__duckdb__-.html"
    assert page.exists() and "SELECT name FROM item" in page.read_text()
    st = compute_statistics(rdir)
    assert st.native_gold_agreement == [{"dataset": "shop", "dialect": "duckdb", "agreement": 0.6667, "scored": 3,
                                         "agree": 2, "disagreements": 1, "by_reason": "row_count 1",
                                         "report": "fidelity/native_shop.md"}]
    assert "native_gold_agreement" in st.tables()


def test_dataset_without_native_gold_is_one_line(tmp_path, capsys):
    from polysql_ray.jobs_cli import run_job

    from jobs.fidelity import PROG, main

    path = _dataset(tmp_path)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "gold_sql_duckdb"}) + "\n"
                            for r in rows))
    rc = run_job(PROG, main, ["step=native", "dataset=jsonl", f"dataset.root={path.parent}",
                              f"dataset.file={path.name}", f"results_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "carries no native gold" in err and "\n" not in err


def test_native_sets_of_a_bird_mini_dev_layout(tmp_path):
    """BIRD Mini-Dev ships its MySQL and PostgreSQL gold beside the SQLite questions."""
    from polysql_ray.statistics.native_gold import native_sets

    db = tmp_path / "dev_databases" / "shop" / "shop.sqlite"
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE item (id INTEGER)")
    base = {"question_id": 7, "db_id": "shop", "question": "How many?", "evidence": ""}
    (tmp_path / "mini_dev_sqlite.json").write_text(json.dumps([{**base, "SQL": "SELECT count(*) FROM item"}]))
    (tmp_path / "mini_dev_postgresql.json").write_text(json.dumps([{**base, "SQL": "SELECT count(id) FROM item"}]))
    sets = native_sets({"name": "bird_mini", "layout": "bird", "root": str(tmp_path), "file": "mini_dev_sqlite.json",
                        "db_dir": "dev_databases"})
    assert sets == {"postgres": [{"question_id": "7", "db_id": "shop", "pred_sql": "SELECT count(id) FROM item"}]}


def _store_with_a_model_and_native_gold(tmp_path: Path) -> tuple[Path, Path]:
    """A real store: model ``m1`` (replay) run on sqlite and duckdb, then the native-gold job
    into the same results folder. Returns ``(results_dir, dataset file)``."""
    from jobs.fidelity import main
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    path = _dataset(tmp_path)
    rdir = tmp_path / "results"
    ds = ["dataset=jsonl", "dataset.name=shop", f"dataset.root={path.parent}", f"dataset.file={path.name}",
          f"results_dir={rdir}", "ray.num_cpus=2"]
    preds = tmp_path / "m1.jsonl"
    preds.write_text("".join(json.dumps({"question_id": q, "pred_sql": sql}) + "\n" for q, sql in [
        ("q1", "SELECT count(*) FROM item"), ("q2", "SELECT avg(price) FROM item"),
        ("q3", "SELECT name FROM item"), ("q4", "SELECT max(id) FROM item")]))
    plain, loader, text = compose([*ds, "progress=false", "dialects=[sqlite,duckdb]"])
    plain["sweep"] = {"name": "m", "models": [{"name": "m1", "generator": "replay", "format": "jsonl",
                                               "predictions": str(preds)}]}
    stats, _ = run(plain, loader, text)
    assert not stats.errors
    assert main(["step=native", *ds]) == 0
    return rdir, path


def test_leaderboard_shows_each_dialects_verdict_agreement_and_nothing_without_it(tmp_path):
    """With the job's agreement in the store's folder, the dialect's leaderboard header carries it,
    a legend line explains it, the native gold is no model row, and its table links a drill page
    of its disagreements (md, html, json); without it the leaderboard is what it was."""
    import shutil

    from polysql_ray.reporting.snapshot import write_snapshot
    from polysql_ray.reporting.views import leaderboard_view

    rdir, _ = _store_with_a_model_and_native_gold(tmp_path)
    snap = write_snapshot(rdir, tmp_path / "snap", figures=False)
    lb = leaderboard_view(snap.stats)
    heads = [c.header for c in lb.columns]
    assert "duckdb EX % (verdict agreement 66.7%, n=3)" in heads and "sqlite EX %" in heads
    assert [r["model"] for r in lb.rows] == ["m1"]  # native_gold_duckdb is not a model
    assert "Verdict agreement (in a dialect's header)" in lb.note and "duckdb: 2 of 3 (shop)" in lb.note
    assert [c.header for c in leaderboard_view(snap.stats, with_ci=False).columns][1:3] == [
        "sqlite", "duckdb (agr 66.7%)"]
    md = snap.files["md"].read_text()
    assert "| duckdb EX % (verdict agreement 66.7%, n=3) |" in md
    assert ("| shop | duckdb | 3 | 2 | 66.7 | [20.8, 93.9] | [1 disagreements]"
            "(drill/shop__native_gold_duckdb__duckdb__-.html) | row_count 1 | fidelity/native_shop.md |") in md
    page = tmp_path / "snap" / "drill" / "shop__native_gold_duckdb__duckdb__-.html"
    assert page.exists() and "SELECT name FROM item" in page.read_text()
    html = snap.files["html"].read_text()
    assert "duckdb EX % (verdict agreement 66.7%, n=3)</th>" in html
    assert html.index('id="leaderboard"') < html.index('id="native-gold"') < html.index('id="figures"')
    doc = json.loads(snap.files["json"].read_text())
    assert doc["tables"]["native_gold_agreement"][0]["agreement"] == 0.6667
    assert {r["model"] for r in doc["tables"]["ex_model_dialect"]} == {"m1"}
    m1_duck = next(r for r in doc["tables"]["ex_model_dialect"] if r["dialect"] == "duckdb")

    shutil.rmtree(rdir / "fidelity")  # the same store without the job's agreement
    bare = write_snapshot(rdir, tmp_path / "bare", figures=False)
    lb0 = leaderboard_view(bare.stats)
    assert [c.header for c in lb0.columns][:4] == ["Model", "sqlite EX %", "sqlite 95% CI", "duckdb EX %"]
    assert "verdict agreement" not in bare.files["md"].read_text().lower()
    assert "native-gold" not in bare.files["html"].read_text()
    assert not list((tmp_path / "bare" / "drill").glob("*native_gold*"))
    doc0 = json.loads(bare.files["json"].read_text())
    assert doc0["tables"]["native_gold_agreement"] == []
    assert next(r for r in doc0["tables"]["ex_model_dialect"] if r["dialect"] == "duckdb") == m1_duck
