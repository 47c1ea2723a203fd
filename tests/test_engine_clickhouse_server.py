"""The ClickHouse server path (clickhouse-connect over HTTP), tested at the protocol layer only.

No modern ClickHouse server installs here. The server is ``tests/clickhouse_http_standin.py``:
ClickHouse's HTTP interface in front of a real ClickHouse (chdb) in its own process, which runs
each request with the settings the request carries. So this proves: the client path (auth
header, stateless requests, Arrow results decoded like chdb's), that the sandbox travels as
server-side settings on every request and is enforced by ClickHouse itself, error typing from
the server's error codes, replica loading onto a server, and the same statuses and values as
the embedded path. It does not prove: real server authentication, RBAC/GRANTs and settings
profiles or constraints, network failures mid-query, the native TCP protocol, or any ClickHouse
version other than chdb's (26.9).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("chdb")
pytest.importorskip("clickhouse_connect")

from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402
from polysql_ray.engines.clickhouse_server import classify_server_error, format_clause  # noqa: E402
from polysql_ray.engines.registry import make_engine  # noqa: E402
from polysql_ray.replication import replicate  # noqa: E402

from tests.standins import _serve, free_port  # noqa: E402
from tests.test_engine_clickhouse import HOSTILE, run  # noqa: E402
from tests.test_replication import make_source  # noqa: E402

STANDIN = Path(__file__).with_name("clickhouse_http_standin.py")
#: test-only passwords the stand-in checks (never real secrets)
PASSWORDS = {"POLYSQL_TEST_CH_READER_PW": "reader-pw", "POLYSQL_TEST_CH_ADMIN_PW": "admin-pw"}


@pytest.fixture(scope="module")
def server():
    os.environ.update(PASSWORDS)
    port = free_port()
    argv = [sys.executable, str(STANDIN), "--port", str(port), "--password-env", "POLYSQL_TEST_CH_READER_PW",
            "--admin-password-env", "POLYSQL_TEST_CH_ADMIN_PW"]
    with _serve(argv, port, "clickhouse http stand-in", 120) as (host, port):
        yield {"host": host, "port": port, "user": "polysql_reader", "admin_user": "polysql_admin",
               "password_env": "POLYSQL_TEST_CH_READER_PW", "admin_password_env": "POLYSQL_TEST_CH_ADMIN_PW"}


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    d = tmp_path_factory.mktemp("chs")
    return replicate(make_source(d / "syn.sqlite"), "clickhouse", d / "replicas")


@pytest.fixture(scope="module")
def engine(server):
    e = make_engine("clickhouse", **server)
    yield e
    e.close()


@pytest.fixture(scope="module")
def embedded():
    e = make_engine("clickhouse")
    yield e
    e.close()


def test_server_path_selected_by_host(engine):
    assert engine._server is not None and engine._server.settings.host == "127.0.0.1"


@pytest.mark.parametrize("sql", [
    'SELECT "Full Name", `weird"quote` FROM `Parent Table` ORDER BY Id',
    "SELECT cid, score, blobby FROM child ORDER BY cid",
    "SELECT unhex('FF00') AS b",
    'SELECT o.oid, p."Full Name", p.Id FROM orphaned AS o LEFT JOIN `Parent Table` AS p ON o.pid = p.Id ORDER BY o.oid',
    "SELECT count() AS n, toDecimal64(1.5, 3) AS d, sum(price) AS p, max(born) AS b, toDate32('2020-01-02') AS day, "
    "toDateTime64('2020-01-02 03:04:05', 6) AS ts, CAST(NULL AS Nullable(Int64)) AS x FROM child",
    "SELECT \"Full Name\" FROM `Parent Table` WHERE \"Full Name\" LIKE '%n%' ORDER BY 1",  # % is not a parameter
])
def test_same_table_as_embedded(engine, embedded, replica, sql):
    """Values and Arrow types over HTTP equal chdb's in-process result for the same replica."""
    a, b = run(engine, replica, sql), run(embedded, replica, sql)
    assert a.status is b.status, (a.status, a.error, b.status, b.error)
    if a.ok:
        assert a.table.schema.types == b.table.schema.types
        assert a.table.to_pylist() == b.table.to_pylist()


def test_sandbox_travels_as_server_settings(engine, replica):
    """ClickHouse itself reports the settings each request ran with."""
    names = ["readonly", "max_execution_time", "max_result_rows", "max_result_bytes", "result_overflow_mode",
             "join_use_nulls", "session_timezone"]
    r = run(engine, replica, "SELECT " + ", ".join(f"toString(getSetting('{n}'))" for n in names),
            Limits(timeout_s=3, row_cap=77, max_bytes=12345))
    assert r.ok, r.error
    assert [c[0].as_py() for c in r.table.columns] == ["1", "3", "77", "12345", "throw", "false", "UTC"]


def test_semantic_setting_changes_the_answer(engine, server, replica):
    """A stock server's join_use_nulls=0 fills ''; the statement's own SETTINGS join_use_nulls = 1
    travels with the request (readonly=1 still holds: a sandbox setting next to it is refused);
    the engine-wide join_use_nulls=1 gives NULLs for every statement."""
    sql = 'SELECT p."Full Name" FROM orphaned AS o LEFT JOIN `Parent Table` AS p ON o.pid = p.Id ORDER BY o.oid'
    r = run(engine, replica, sql)
    assert r.ok and r.table.column(0).to_pylist() == ["Ann", ""]  # ClickHouse's default fills ''
    r = run(engine, replica, sql + " SETTINGS join_use_nulls = 1")
    assert r.ok and r.table.column(0).to_pylist() == ["Ann", None], r.error
    r = run(engine, replica, sql + " SETTINGS join_use_nulls = 1, max_result_rows = 0")
    assert r.status is S.REJECTED, (r.status, r.error)
    e = make_engine("clickhouse", join_use_nulls=1, **server)
    try:
        r = run(e, replica, sql)
        assert r.ok and r.table.column(0).to_pylist() == ["Ann", None]
    finally:
        e.close()


@pytest.mark.parametrize("sql,status", HOSTILE)
def test_sandbox_same_statuses_as_embedded(engine, replica, sql, status):
    r = run(engine, replica, sql)
    assert r.status is status, (r.status, r.error)
    after = run(engine, replica, "SELECT count() FROM child")
    assert after.ok and after.table.column(0).to_pylist() == [3]


@pytest.mark.parametrize("sql,status", [
    ("SELEC 1", S.SYNTAX),
    ("SELECT nosuch FROM child", S.SCHEMA),
    ("SELECT * FROM Child", S.SCHEMA),
    ("SELECT nosuchfunction(1)", S.SYNTAX),
    ("SELECT cid, count() FROM child GROUP BY score", S.SYNTAX),
    ("SELECT intDiv(1, 0)", S.RUNTIME),
    ("SELECT * FROM child SETTINGS no_such_setting = 1", S.REJECTED),
    ("", S.EMPTY),
])
def test_error_codes_typed(engine, replica, sql, status):
    r = run(engine, replica, sql)
    assert r.status is status, (r.status, r.error)


def test_replica_loaded_once_under_its_content(server, engine, replica):
    import clickhouse_connect

    assert run(engine, replica, "SELECT 1").ok
    other = make_engine("clickhouse", **server)  # another actor: finds the loaded copy
    try:
        assert run(other, replica, "SELECT count() FROM loose").table.column(0).to_pylist() == [3]
    finally:
        other.close()
    admin = clickhouse_connect.get_client(host=server["host"], port=server["port"], username="polysql_admin",
                                          password=PASSWORDS["POLYSQL_TEST_CH_ADMIN_PW"],
                                          autogenerate_session_id=False)
    dbs = [r[0] for r in admin.query("SELECT name FROM system.databases WHERE name LIKE 'polysql%'").result_rows]
    assert len(dbs) == 1 and "_load_" not in dbs[0], dbs


def test_wrong_password_and_no_server_are_unavailable(server, replica, monkeypatch):
    monkeypatch.setenv("POLYSQL_TEST_CH_BAD_PW", "wrong")
    bad = make_engine("clickhouse", **{**server, "password_env": "POLYSQL_TEST_CH_BAD_PW",
                                       "admin_password_env": "POLYSQL_TEST_CH_BAD_PW"})
    r = run(bad, replica, "SELECT 1")
    assert r.status is S.UNAVAILABLE and "516" in r.error, r.error
    gone = make_engine("clickhouse", **{**server, "port": free_port(), "connect_timeout_s": 2})
    assert run(gone, replica, "SELECT 1").status is S.UNAVAILABLE


def test_config_never_holds_a_password(server):
    with pytest.raises(ValueError, match="password_env"):
        make_engine("clickhouse", **server, password="x")
    with pytest.raises(TypeError, match="need host"):
        make_engine("clickhouse", port=8123)


def test_error_code_table():
    from clickhouse_connect.driver.exceptions import DatabaseError, OperationalError

    assert classify_server_error(DatabaseError("x", code=159)) is S.TIMEOUT
    assert classify_server_error(DatabaseError("x", code=516)) is S.UNAVAILABLE
    assert classify_server_error(DatabaseError("Code: 164. DB::Exception: readonly")) is S.REJECTED
    assert classify_server_error(OperationalError("connection refused")) is S.UNAVAILABLE
    assert format_clause("SELECT 1 FORMAT JSON") and format_clause("SELECT 1 FORMAT CSV SETTINGS a = 1;")
    assert not format_clause("SELECT formatDateTime(now(), '%Y')") and not format_clause("SELECT format FROM t")
