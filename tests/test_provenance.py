"""What a reader can trust (issue 25): every server setting that changes a result is in the score
key, read from the server at run start; a source's content fingerprint is too (issue 23); a
server setting known to break name resolution gets one warning line naming the fix.

Real servers: the shared MariaDB (3306, session settings only) and PostgreSQL, and a private
MariaDB with ``lower_case_table_names=0`` started here on its own port in a temp folder.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from polysql_ray.config import compose
from polysql_ray.engines.registry import engine_identity, identity_fingerprint
from polysql_ray.pipeline.driver import build_grid, identity_warnings, score_keys

PRIVATE_PORT = 3319


def _jsonl_dataset(root: Path) -> dict:
    """A two-question JSONL dataset over one SQLite file under ``root``."""
    db = root / "database" / "tiny" / "tiny.sqlite"
    db.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("INSERT INTO singer VALUES (1, 'a'), (2, 'b')")
    (root / "questions.jsonl").write_text(
        "\n".join(json.dumps({"db_id": "tiny", "question": q, "gold_sql": s}) for q, s in
                  [("how many", "SELECT count(*) FROM Singer"), ("names", "SELECT name FROM singer")]) + "\n")
    return {"name": "tiny", "layout": "jsonl", "root": str(root), "file": "questions.jsonl"}


def _grid(tmp_path: Path, *overrides: str):
    cfg, loader, _ = compose([f"results_dir={tmp_path / 'results'}", *overrides])
    cfg["dataset"] = _jsonl_dataset(tmp_path / "data") if not (tmp_path / "data").exists() else \
        {"name": "tiny", "layout": "jsonl", "root": str(tmp_path / "data"), "file": "questions.jsonl"}
    return build_grid(cfg, loader)


def test_embedded_engines_name_product_and_version():
    import duckdb

    ident = engine_identity("sqlite")
    assert ident["product"] == "SQLite" and ident["version"] == sqlite3.sqlite_version and not ident["standin"]
    assert engine_identity("duckdb", {"threads": 1})["version"] == duckdb.__version__


def test_mysql_identity_reads_the_settings_predictions_meet():
    ident = engine_identity("mysql")
    if "unreachable" in ident:
        pytest.skip(f"MariaDB 3306 unreachable: {ident['unreachable']}")
    assert ident["product"] in ("MariaDB", "MySQL") and ident["version"]
    assert set(ident["settings"]) >= {"lower_case_table_names", "sql_mode", "collation_server"}
    # a configured sql_mode is what the session sees, and it changes the fingerprint
    other = engine_identity("mysql", {"sql_mode": "ANSI_QUOTES,IGNORE_SPACE"})
    assert other["settings"]["sql_mode"] == "ANSI_QUOTES,IGNORE_SPACE"
    assert identity_fingerprint(other) != identity_fingerprint(ident)
    # the endpoint is recorded, but two servers alike score alike
    assert identity_fingerprint({**ident, "endpoint": "elsewhere:1"}) == identity_fingerprint(ident)


def test_postgres_identity_has_version_and_gucs():
    ident = engine_identity("postgres")
    if "unreachable" in ident:
        pytest.skip(f"PostgreSQL unreachable: {ident['unreachable']}")
    assert ident["product"] == "PostgreSQL" and ident["version"]
    assert {"TimeZone", "DateStyle", "extra_float_digits", "datcollate"} <= set(ident["settings"])


def test_an_unreachable_server_is_recorded_not_raised():
    port = 1
    ident = engine_identity("mysql", {"port": port, "connect_timeout_s": 1})
    assert ident["unreachable"] and ident["engine"] == "mysql"


def test_warehouse_standins_are_named_by_their_endpoint():
    bq = engine_identity("bigquery", {"api_endpoint": "http://127.0.0.1:9050", "anonymous": True})
    assert bq["standin"] == "stand-in at http://127.0.0.1:9050"
    assert engine_identity("bigquery", {"project": "p"})["standin"] == ""


def test_a_changed_server_setting_changes_the_cell_key(tmp_path):
    if "unreachable" in engine_identity("mysql"):
        pytest.skip("MariaDB 3306 unreachable")
    a = _grid(tmp_path, "dialects=[mysql]")
    b = _grid(tmp_path, "dialects=[mysql]", "+engines.mysql.sql_mode=IGNORE_SPACE")
    assert a.cells[0].key != b.cells[0].key
    assert a.identities["mysql"]["settings"]["sql_mode"] != "IGNORE_SPACE"
    assert b.identities["mysql"]["settings"]["sql_mode"] == "IGNORE_SPACE"
    assert a.identities["sqlite"]["product"] == "SQLite"  # the source engine is read too


def test_a_fixed_source_is_rescored(tmp_path):
    before = _grid(tmp_path, "dialects=[duckdb]")
    keys = score_keys(before, before.cells[0])
    assert before.source_fps[("tiny", "tiny")] and len(set(keys)) == 2
    with sqlite3.connect(tmp_path / "data" / "database" / "tiny" / "tiny.sqlite") as con:
        con.execute("INSERT INTO singer VALUES (3, 'c')")  # the source is fixed / changed
    after = _grid(tmp_path, "dialects=[duckdb]")
    assert after.cells[0].key == before.cells[0].key  # the cell is the same ...
    assert set(score_keys(after, after.cells[0])).isdisjoint(keys)  # ... its questions are rescored
    again = _grid(tmp_path, "dialects=[duckdb]")
    assert score_keys(again, again.cells[0]) == score_keys(after, after.cells[0])  # and stable


@pytest.fixture(scope="module")
def lctn0_mariadb(tmp_path_factory):
    """A private MariaDB with ``lower_case_table_names=0`` (the server default) on its own port."""
    from tests.test_faults_pipeline import private_mariadb

    for server in private_mariadb(tmp_path_factory, PRIVATE_PORT, ("--lower-case-table-names=0",)):
        yield server.port


def test_lower_case_table_names_0_warns_once_with_the_fix(tmp_path, lctn0_mariadb):
    grid = _grid(tmp_path, "dialects=[mysql]", f"engines.mysql.port={lctn0_mariadb}")
    assert grid.identities["mysql"]["settings"]["lower_case_table_names"] == "0"
    lines = identity_warnings(grid)
    assert len(lines) == 1, lines  # one line per server
    assert "lower_case_table_names=0" in lines[0] and "--lower-case-table-names=1" in lines[0]
    assert f"127.0.0.1:{lctn0_mariadb}" in lines[0]
    shared = engine_identity("mysql")
    if "unreachable" not in shared and shared["settings"]["lower_case_table_names"] != "0":
        ok = _grid(tmp_path, "dialects=[mysql]")
        assert identity_warnings(ok) == []
        assert ok.cells[0].key != grid.cells[0].key  # the same folder on a fixed server rescores


# ------------------------------------------------------------------ provenance in every snapshot

def _manifest(results_dir: Path, run_id: str, engines: dict, cells: list[tuple[str, str]]) -> None:
    """A run manifest as ``pipeline/manifest.run_manifest`` writes it (engines, cells, limits)."""
    d = results_dir / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_text(json.dumps({
        "config": {"limits": {"timeout_s": 30, "row_cap": 100000}},
        "cells": [{"dialect": dl, "target_engine": e} for dl, e in cells], "engines": engines}))


def _provenance_store(tmp_path: Path) -> Path:
    from polysql_ray.statistics.synthetic import score_row, write_store

    rows = []
    for q in range(20):
        rows.append(score_row("m", "d", "sqlite", "-", f"q{q}", "pass" if q < 16 else "values"))
        rows.append(score_row("m", "d", "duckdb", "-", f"q{q}", "pass" if q < 12 else "syntax"))
        rows.append(score_row("m", "d", "snowflake", "-", f"q{q}", "pass" if q < 19 else "syntax"))
        rows.append(score_row("gold", "d", "sqlite", "-", f"q{q}", "pass", generator="gold"))
        rows.append(score_row("gold", "d", "duckdb", "-", f"q{q}", "pass" if q < 15 else "syntax", generator="gold"))
    write_store(tmp_path, rows)
    engines = {"sqlite": engine_identity("sqlite"), "duckdb": engine_identity("duckdb"),
               "snowflake": {"engine": "snowflake", "product": "Snowflake", "version": "10.0.0",
                             "standin": "fakesnow 0.12.1 (DuckDB)", "settings": {"TIMEZONE": "UTC"},
                             "endpoint": "127.0.0.1:8123"}}
    _manifest(tmp_path, "20260101T000000Z-aaaaaa", engines,
              [("sqlite", "sqlite"), ("duckdb", "duckdb"), ("snowflake", "snowflake")])
    return tmp_path


def test_snapshots_show_engines_badge_standins_and_keep_them_out_of_means(tmp_path):
    from polysql_ray.reporting.snapshot import write_snapshot
    from polysql_ray.reporting.views import GOLD_ROW, STANDIN_BADGE, leaderboard_view
    from polysql_ray.statistics.summary import StatsConfig

    store = _provenance_store(tmp_path / "store")
    snap = write_snapshot(store, tmp_path / "out", figures=False, drill=False)
    st = snap.stats
    prov = {r["dialect"]: r for r in st.provenance}
    assert prov["snowflake"]["standin"] == "fakesnow 0.12.1 (DuckDB)" and prov["sqlite"]["product"] == "SQLite"
    assert "timeout_s=30" in prov["duckdb"]["limits"]
    board = leaderboard_view(st)
    headers = [c.header for c in board.columns]
    assert f"snowflake {STANDIN_BADGE} EX %" in headers and "duckdb EX %" in headers
    m = next(r for r in board.rows if r["model"] == "m")
    assert m["mean_ex"] == pytest.approx((16 / 20 + 12 / 20) / 2)  # snowflake (stand-in) not pooled
    assert board.rows[-1]["model"] == GOLD_ROW and "not a bound" in GOLD_ROW
    pooled = leaderboard_view(write_snapshot(store, tmp_path / "out2", StatsConfig(include_standins=True),
                                             figures=False, drill=False).stats)
    m2 = next(r for r in pooled.rows if r["model"] == "m")
    assert m2["mean_ex"] == pytest.approx((16 + 12 + 19) / 60)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "## Engines: where each dialect ran" in md and "fakesnow 0.12.1 (DuckDB)" in md
    assert "Gold SQL portability" in md and "ceiling" not in md.lower()
    page = (tmp_path / "out" / "index.html").read_text()
    assert '<span class="badge">stand-in</span>' in page
    doc = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    assert {r["dialect"]: r["standin"] for r in doc["tables"]["provenance"]}["snowflake"]
    assert "gold_portability" in doc["tables"] and "gold_ceiling" not in doc["tables"]
    csv_rows = (tmp_path / "out" / "leaderboard.csv").read_text().splitlines()
    header = csv_rows[0].split(",")
    snow = next(r.split(",") for r in csv_rows[1:] if ",snowflake," in r)
    assert snow[header.index("standin")] == "fakesnow 0.12.1 (DuckDB)"


def test_a_standin_judge_is_labelled_and_refused_without_opt_in(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from polysql_ray.reporting.snapshot import PublicationError, write_snapshot
    from polysql_ray.statistics.judge import JUDGEMENT_SCHEMA
    from polysql_ray.statistics.load import load_scores
    from polysql_ray.statistics.provenance import JUDGE_IDENTITY_SUFFIX, judge_identity

    store = _provenance_store(tmp_path / "store")
    con, _ = load_scores(store)
    (key,) = con.execute("SELECT key FROM scores WHERE model = 'm' AND dialect = 'duckdb' "
                         "AND NOT is_pass LIMIT 1").fetchone()
    con.close()
    folder = store / "judgements"
    folder.mkdir()
    row = {n: "x" for n in JUDGEMENT_SCHEMA.names}
    row.update(key=key, judge="loopback-judge", model="m", dialect="duckdb", family="dialect_syntax")
    pq.write_table(pa.Table.from_pylist([row], schema=JUDGEMENT_SCHEMA), folder / "loopback-judge.parquet")
    cfg = {"name": "loopback-judge", "generator": "openai", "model_id": "loopback-stand-in",
        "standin": "loopback stand-in: answers from a fixed table, not a judgement"}
    (folder / f"loopback-judge{JUDGE_IDENTITY_SUFFIX}").write_text(json.dumps(judge_identity(cfg, "fp")))
    with pytest.raises(PublicationError, match="allow_standin_judges=true"):
        write_snapshot(store, tmp_path / "refused", figures=False, drill=False)
    assert not (tmp_path / "refused").exists()  # nothing written
    write_snapshot(store, tmp_path / "out", figures=False, drill=False, allow_standin_judges=True)
    md = (tmp_path / "out" / "leaderboard.md").read_text()
    assert "loopback-judge [stand-in]" in md and "not judgement" in md
    # a judge whose model id says nothing and whose config says nothing is a real one
    assert judge_identity({"name": "j", "generator": "vllm", "model_id": "Qwen/Qwen2.5-7B"}, "f")["standin"] == ""


# ------------------------------------------------------------------ format artefacts

def test_the_server_refuses_a_spaced_count_without_ignore_space():
    """The fact the fn_space flag rests on, on the real server (a session setting only)."""
    import pymysql

    from polysql_ray.engines.mysql import connect_raw
    from polysql_ray.engines.servers import ServerSettings

    try:
        raw = connect_raw(ServerSettings.from_dict({}, host="127.0.0.1", port=3306, user="root",
                                                   admin_user="root"), admin=True)
    except pymysql.err.OperationalError as exc:
        pytest.skip(f"MariaDB 3306 unreachable: {exc}")
    with raw, raw.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'STRICT_TRANS_TABLES'")
        with pytest.raises(pymysql.err.ProgrammingError):
            cur.execute("SELECT count ( * ) FROM (SELECT 1 AS x) t")
        cur.execute("SET SESSION sql_mode = 'STRICT_TRANS_TABLES,IGNORE_SPACE'")
        cur.execute("SELECT count ( * ) FROM (SELECT 1 AS x) t")
        assert cur.fetchone()[0] == 1


def test_format_artefacts_are_counted_per_cell(tmp_path):
    from polysql_ray.statistics.artefacts import case_only_names, spaced_call
    from polysql_ray.statistics.summary import compute_statistics
    from polysql_ray.statistics.synthetic import score_row, write_store
    from polysql_ray.engines.mysql import SPACE_SENSITIVE_FUNCTIONS

    assert spaced_call("select count ( * ) from t", SPACE_SENSITIVE_FUNCTIONS)
    assert not spaced_call("select count(*) from t where x in (1)", SPACE_SENSITIVE_FUNCTIONS)
    assert case_only_names("Unknown table expression identifier 'Singer' in scope SELECT", {"singer", "name"}) == ["Singer"]
    assert case_only_names("Code: 47. Identifier 'T1.Make' cannot be resolved ... In scope `Name`", {"Make", "name"}) == []

    store = tmp_path / "store"
    ds = _jsonl_dataset(tmp_path / "data")  # table singer(id, name)
    rows = []
    for q in range(6):
        rows.append(score_row("m", "tiny", "mysql", "-", f"q{q}", "syntax" if q < 4 else "pass", db_id="tiny",
                              pred_sql="select count ( * ) from singer" if q < 3 else "select nme from singer",
                              pred_error="[1064] You have an error in your SQL syntax near '* ) from singer'"))
        rows.append(score_row("m", "tiny", "clickhouse", "-", f"q{q}", "schema" if q < 5 else "pass", db_id="tiny",
                              pred_error="Code: 60. Unknown table expression identifier 'Singer' in scope SELECT"
                              if q < 2 else "Code: 47. Unknown identifier `nme`"))
    write_store(store, rows)
    mysql = {"engine": "mysql", "product": "MariaDB", "version": "10.11",
             "settings": {"sql_mode": "STRICT_TRANS_TABLES", "lower_case_table_names": "1"}}
    d = store / "runs" / "20260101T000000Z-aaaaaa"
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({
        "config": {"dataset": ds, "limits": {}},
        "cells": [{"dialect": "mysql", "target_engine": "mysql"}, {"dialect": "clickhouse", "target_engine": "clickhouse"}],
        "engines": {"mysql": mysql, "clickhouse": engine_identity("clickhouse")}}))
    art = {r["dialect"]: r for r in compute_statistics(store).format_artefacts}
    assert (art["mysql"]["failures"], art["mysql"]["fn_space"], art["mysql"]["identifier_case"]) == (4, 3, 0)
    assert (art["clickhouse"]["failures"], art["clickhouse"]["fn_space"], art["clickhouse"]["identifier_case"]) == (5, 0, 2)
    # a server whose sql_mode has IGNORE_SPACE accepts the spacing: nothing to flag there
    mysql["settings"]["sql_mode"] = "STRICT_TRANS_TABLES,IGNORE_SPACE"
    (d / "manifest.json").write_text(json.dumps({
        "config": {"dataset": ds, "limits": {}}, "cells": [{"dialect": "mysql", "target_engine": "mysql"}],
        "engines": {"mysql": mysql}}))
    assert {r["dialect"]: r for r in compute_statistics(store).format_artefacts}["mysql"]["fn_space"] == 0


def test_the_terminal_prints_badges_as_text(tmp_path):
    """rich would read ``[stand-in]`` as markup and drop it; the console escapes every text."""
    import io

    from rich.console import Console

    from polysql_ray.reporting.console import print_views
    from polysql_ray.reporting.views import leaderboard_view
    from polysql_ray.statistics.summary import compute_statistics

    buf = io.StringIO()
    print_views([leaderboard_view(compute_statistics(_provenance_store(tmp_path)))],
                Console(file=buf, width=200, color_system=None))
    assert "snowflake [stand-in]" in buf.getvalue()


# ------------------------------------------------------------------ the small ones (issue 25 item 6)

def test_progress_bars_print_engine_names_in_brackets():
    """A terminal's bars read ``execute [sqlite]``: the stage name is text, not rich markup."""
    import io

    from rich.console import Console

    from polysql_ray.pipeline.progress import Progress

    buf = io.StringIO()
    with Progress(console=Console(file=buf, force_terminal=True, width=100, color_system=None)) as p:
        p.advance(p.add("execute [sqlite]", 2), 2)
    assert "execute [sqlite]" in buf.getvalue()


def _job(*args: str) -> "subprocess.CompletedProcess":
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "jobs.portability", *args], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root)})


def test_portability_job_help_and_bad_input_are_lines_not_tracebacks(tmp_path):
    helped = _job("--help")
    assert helped.returncode == 0 and "python -m jobs.portability" in helped.stdout and not helped.stderr.strip()
    bad = _job("dialects=[nosuch]", f"results_dir={tmp_path}")
    assert bad.returncode == 2, bad.stderr
    assert "Traceback" not in bad.stderr
    (line,) = [x for x in bad.stderr.splitlines() if x.strip()]
    assert line.startswith("jobs.portability: error:") and "unknown dialect 'nosuch'" in line


def test_hydra_multirun_folders_are_ignored():
    root = Path(__file__).resolve().parents[1]
    assert "multirun/" in (root / ".gitignore").read_text().split()


def test_a_short_prediction_file_is_refused_when_the_grid_is_built(tmp_path):
    """The line count is checked by build_grid (before replication and before Ray starts)."""
    from polysql_ray.generation.replay import ReplayError

    preds = tmp_path / "preds.sql"
    preds.write_text("SELECT 1\n")  # the dataset has two questions
    _jsonl_dataset(tmp_path / "data")
    with pytest.raises(ReplayError, match="has 1 lines but the dataset has 2 examples"):
        _grid(tmp_path, "dialects=[duckdb]", "model=replay", f"model.predictions={preds}")
    preds.write_text("SELECT 1\nSELECT 2\n")
    assert len(_grid(tmp_path, "dialects=[duckdb]", "model=replay", f"model.predictions={preds}").cells) == 1


def test_an_unreachable_servers_key_does_not_follow_its_message():
    a = {"engine": "mysql", "product": "mysql", "version": "", "standin": "", "settings": {}, "unreachable": "t=1.2s"}
    assert identity_fingerprint(a) == identity_fingerprint({**a, "unreachable": "t=3.4s"})
    assert identity_fingerprint(a) != identity_fingerprint({k: v for k, v in a.items() if k != "unreachable"})
