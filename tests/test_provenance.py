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

