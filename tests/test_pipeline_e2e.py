"""End to end on Ray: the quickstart sweep through the whole pipeline, store idempotency,
the run manifest, and that nothing needs ../shared."""
from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from polysql_ray.config import compose
from polysql_ray.pipeline.driver import run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quickstart_run(ray_session, tmp_path_factory, monkeypatch_module):
    out = tmp_path_factory.mktemp("qs")
    # no shared data: point POLYSQL_SHARED at an empty folder; quickstart must not care
    monkeypatch_module.setenv("POLYSQL_SHARED", str(out / "no_shared_here"))
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false"])
    stats, table = run(cfg, loader, text)
    return out, cfg, loader, text, stats, table


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _ex(table, model, dialect):
    rows = [r for r in table.to_pylist() if r["model"] == model and r["dialect"] == dialect]
    assert len(rows) == 1, rows
    return rows[0]


def test_quickstart_scores_every_prediction(quickstart_run):
    out, cfg, *_ , stats, table = quickstart_run
    assert stats.cells == 6 and stats.items_total == 6 * 34 and stats.items_scored == 6 * 34
    # the gold itself is 100% on its own engine: a sanity check of the whole pipeline
    gold = _ex(table, "gold", "sqlite")
    assert (gold["n"], gold["correct"], gold["gold_errors"]) == (34, 34, 0)
    # right-but-different answers all pass on SQLite, the deliberately flawed ones mostly fail
    assert _ex(table, "rewritten", "sqlite")["correct"] == 34
    assert _ex(table, "flawed", "sqlite")["correct"] < 10
    # duckdb runs the same SQLite-written SQL on the replica: some of it does not survive
    assert _ex(table, "gold", "duckdb")["correct"] < 34


def test_store_rows_are_queryable_with_duckdb(quickstart_run):
    out = quickstart_run[0]
    con = duckdb.connect()
    rows = con.sql(f"SELECT * FROM read_parquet('{out}/scores/**/*.parquet')").to_arrow_table()
    assert rows.num_rows == 6 * 34
    need = {"model", "dataset", "dialect", "instruction_level", "question_id", "db_id", "gold_sql", "pred_sql",
            "gold_status", "pred_status", "correct", "verdict", "reason", "basis", "policy_version",
            "gold_exec_s", "pred_exec_s"}
    assert need <= set(rows.column_names)
    assert len(set(rows.column("key").to_pylist())) == rows.num_rows
    # every mismatch carries a reason code; every pass says "match"
    for r in rows.to_pylist():
        assert r["reason"] and (r["reason"] == "match") == r["correct"]
    # the integer-division question (school) on duckdb: SQLite's 7/2 = 3 is not duckdb's 3.5
    verdicts = con.sql(f"SELECT DISTINCT basis FROM read_parquet('{out}/scores/**/*.parquet')").fetchall()
    assert {"observed"} <= {v[0] for v in verdicts}


def test_rerun_scores_nothing_new(quickstart_run):
    out, cfg, loader, text, stats, table = quickstart_run
    stats2, table2 = run(cfg, loader, text)
    assert stats2.items_scored == 0 and stats2.items_skipped == 6 * 34
    assert sum(stats2.exec_unique.values()) == 0
    assert table2.to_pylist() == table.to_pylist()
    assert len(list(Path(out, "scores").rglob("*.parquet"))) == 6  # nothing appended


def test_run_manifest_written(quickstart_run):
    out, *_ , stats, _t = quickstart_run
    manifest = json.loads((Path(out) / "runs" / stats.run_id / "manifest.json").read_text())
    assert manifest["packages"]["ray"] and manifest["policy_version"] == "cmp-5"
    assert {c["model"] for c in manifest["cells"]} == {"gold", "rewritten", "flawed"}
    assert (Path(out) / "runs" / stats.run_id / "config.yaml").read_text().strip()


def test_policy_override_makes_new_cells(quickstart_run):
    """A changed comparison policy is a different cell: nothing is reused under the new policy."""
    out = quickstart_run[0]
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false",
                                 "policy.abs_tol=0.001", "sweep.models=[{name: gold, generator: gold}]",
                                 "dialects=[sqlite]"])
    stats, table = run(cfg, loader, text)
    assert stats.items_scored == 34 and stats.items_skipped == 0
    # so is a different timeout: it can turn a pass into a timeout
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false",
                                 "sweep.models=[{name: gold, generator: gold}]", "dialects=[sqlite]",
                                 "limits.timeout_s=5"])
    stats, table = run(cfg, loader, text)
    assert stats.items_scored == 34 and stats.items_skipped == 0


def test_bad_config_names_the_key(tmp_path):
    from polysql_ray.pipeline.driver import ConfigError

    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={tmp_path}", "dialects=[sqlite,oracle]"])
    with pytest.raises(ConfigError, match="unknown dialect 'oracle'"):
        run(cfg, loader, text)
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={tmp_path}", "dialects=[]"])
    with pytest.raises(ConfigError, match="no dialects"):
        run(cfg, loader, text)


def test_structural_proofs_skip_executions_and_never_disagree(quickstart_run, tmp_path):
    """prove mode decides some verdicts without executing the prediction; verify mode
    executes everything and must agree with every proof. The default (auto) proves nothing
    before SQLite and DuckDB (a proof costs as much as their execution) and gives the same EX."""
    *_, auto_stats, auto_table = quickstart_run
    assert auto_stats.proven == 0
    out = tmp_path / "prove"
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={out}", "progress=false",
                                 "pipeline.structural_check=prove"])
    stats, table = run(cfg, loader, text)
    assert stats.proven > 0
    same = ("model", "dialect", "n", "correct", "gold_errors", "ex", "exec_errors")
    assert [{k: r[k] for k in same} for r in table.to_pylist()] == \
        [{k: r[k] for k in same} for r in auto_table.to_pylist()]
    con = duckdb.connect()
    proven = con.sql(f"SELECT count(*), count(*) FILTER (WHERE pred_status = 'skipped' AND correct) "
                     f"FROM read_parquet('{out}/scores/**/*.parquet') WHERE basis = 'proven' "
                     f"AND run_id = '{stats.run_id}'").fetchall()[0]
    assert proven[0] == proven[1] == stats.proven

    cfg2, loader2, text2 = compose(["+sweep=quickstart", f"results_dir={tmp_path / 'verify'}", "progress=false",
                                    "pipeline.structural_check=verify"])
    stats2, _ = run(cfg2, loader2, text2)
    assert stats2.proven == stats.proven
    # verify mode ran the predictions that prove mode skipped
    assert sum(stats2.exec_unique.values()) > sum(stats.exec_unique.values())
    rows = con.sql(f"SELECT verdict, trail FROM read_parquet('{tmp_path}/verify/scores/**/*.parquet') "
                   f"WHERE structural = 'equivalent'").fetchall()
    assert len(rows) == stats.proven
    assert all(v == "pass" and t == "structural:equivalent>execution:pass" for v, t in rows), rows


def test_dead_server_scores_the_rest_and_names_the_address(ray_session, tmp_path):
    """A target server that cannot be reached costs only its own cells: the others are scored
    and stored, the error names host and port and how to start the server, and a rerun
    retries only what is missing."""
    cfg, loader, text = compose(["+sweep=quickstart", f"results_dir={tmp_path}", "progress=false",
                                 "sweep.models=[{name: gold, generator: gold}]",
                                 "dialects=[sqlite,postgres]", "engines.postgres.port=5999"])
    stats, table = run(cfg, loader, text)
    assert stats.items_scored == 34  # sqlite only
    assert {r["dialect"] for r in table.to_pylist()} == {"sqlite"}
    assert stats.errors and all("5999" in e and "postgres" in e for e in stats.errors[:2])
    assert any("pg_ctlcluster" in e for e in stats.errors)
    stats2, _ = run(cfg, loader, text)
    assert stats2.items_skipped == 34 and stats2.items_scored == 0 and stats2.errors


def test_snapshot_drill_down_shows_question_and_result_diff(quickstart_run, tmp_path):
    """On a real store, the drill-down page of a cell shows the question text (from the run
    manifest's dataset) and a diff of the two result sets re-run on the embedded engines."""
    from polysql_ray.reporting.snapshot import write_snapshot
    from polysql_ray.reporting.views import drill_href

    out = quickstart_run[0]
    snap = write_snapshot(out, tmp_path / "snap", figures=False)
    cell = next(c for c in snap.stats.ex_cells if c["model"] == "flawed" and c["dialect"] == "duckdb")
    page = (tmp_path / "snap" / drill_href(cell)).read_text()
    assert "question text not available" not in page
    assert page.count('class="q"') == cell["n_total"] - cell["correct"]
    assert "only in gold" in page and "result-set diff" in page
