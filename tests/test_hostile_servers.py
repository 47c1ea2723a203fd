"""Hostile SQL on the server engines (PostgreSQL, MariaDB): the catalogue in ``hostile_cases.py``.

Every case asserts its typed status, that the replica's content fingerprint and the source
file are unchanged afterwards, that the attack's leftover session state is gone, and that the
next prediction on the same pooled connection (pool size 1) still returns the right answer.
Server-side refusals are exercised with SQL the client-side parser cannot read
(``OPERATOR(pg_catalog.=)``), so they hold without the client-side denylist.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, register_server_replication, require_data, require_servers  # noqa: E402
from hostile_cases import CANARY, CASES, LIMITS, canary, case_id, check_canary, expect_status  # noqa: E402

require_servers("postgres", "mysql")
require_data(SPIDER / "database" / "concert_singer")
register_server_replication()

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S  # noqa: E402
from polysql_ray.engines.mysql import MySQLEngine  # noqa: E402
from polysql_ray.engines.postgres import PostgresEngine  # noqa: E402
from polysql_ray.replication.base import get_writer, replicate  # noqa: E402

ENGINES = {"postgres": PostgresEngine, "mysql": MySQLEngine}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile_servers")
    src_file = d / "concert_singer.sqlite"
    shutil.copy(SPIDER / "database" / "concert_singer" / "concert_singer.sqlite", src_file)
    src = SourceDatabase("hostile", "concert_singer", "sqlite", str(src_file))
    replicas = {name: replicate(src, name, d / "replicas") for name in ENGINES}
    engines = {name: cls({"pool_size": 1}) for name, cls in ENGINES.items()}
    writers = {name: get_writer(name, None) for name in ENGINES}
    yield engines, replicas, writers, src_file
    for e in engines.values():
        e.close()


@pytest.mark.parametrize("engine_name,case", [(e, c) for e in ENGINES for c in CASES[e]],
                         ids=[f"{e}-{case_id(c)}" for e in ENGINES for c in CASES[e]])
def test_hostile(setup, engine_name, case, record_property):
    engines, replicas, writers, src_file = setup
    engine, loc = engines[engine_name], replicas[engine_name].location
    src_sha = hashlib.sha256(src_file.read_bytes()).hexdigest()
    res = LIMITS.enforce(engine.execute(loc, case.sql, LIMITS))
    for k, v in (("engine", engine_name), ("attack_class", case.cls), ("attack_s", res.elapsed_s),
                 ("limit_s", LIMITS.timeout_s), ("status", res.status.value)):
        record_property(k, v)
    expect_status(res, case)
    assert writers[engine_name].fingerprint(loc) == replicas[engine_name].manifest.copy_fingerprint, \
        "ESCAPE: replica content changed"
    assert hashlib.sha256(src_file.read_bytes()).hexdigest() == src_sha, "ESCAPE: source file changed"
    if case.after is not None:
        probe = engine.execute(loc, case.after[0], LIMITS)
        assert probe.ok and probe.table.column(0)[0].as_py() == case.after[1], \
            ("ESCAPE: state left behind", probe.status, probe.error)
    sql, expected = canary(engine_name, case)
    check_canary(engine.execute(loc, sql, LIMITS), expected)


# The server-side layers alone, with the client-side guard and denylist bypassed (as for SQL the
# guard cannot read): each must still end typed, and the session must come back clean.
BYPASS = {
    "mysql": [
        ("SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(5)", {S.TIMEOUT}),  # watchdog KILL QUERY
        ("DO SLEEP(0)", {S.REJECTED}),                 # no result set / Com_select
        ("CHECKSUM TABLE singer", {S.REJECTED}),       # a result set, but not a SELECT
        ("HANDLER singer OPEN", {S.REJECTED}),
        ("SELECT LOAD_FILE('/etc/passwd')", {S.OK}),   # NULL: no FILE privilege, nothing read
        ("SELECT * FROM singer INTO OUTFILE '/tmp/polysql_bypass'", {S.REJECTED}),
    ],
    "postgres": [
        ("SELECT pg_terminate_backend(pg_backend_pid())", {S.REJECTED}),
        ("SELECT set_config('statement_timeout', '0', false)", {S.REJECTED}),
        ("SELECT query FROM pg_stat_activity", {S.REJECTED}),
        ("SELECT pg_read_file('/etc/passwd')", {S.REJECTED}),
        # catalogs of every database: revoked in the copy's database (engines.postgres.harden_database)
        ("SELECT datname FROM pg_database", {S.REJECTED}),
        ("SELECT datname FROM pg_stat_database", {S.REJECTED}),
        ("SELECT rolname FROM pg_roles", {S.REJECTED}),
        ("SELECT pg_describe_object(1262, 1, 0)", {S.REJECTED}),
    ],
}


@pytest.mark.parametrize("engine_name,sql,expect", [(e, q, x) for e in BYPASS for q, x in BYPASS[e]],
                         ids=[f"{e}-{i}" for e in BYPASS for i in range(len(BYPASS[e]))])
def test_server_layers_hold_without_the_client_guard(setup, engine_name, sql, expect, monkeypatch):
    engines, replicas, writers, _ = setup
    engine, loc = engines[engine_name], replicas[engine_name].location
    bypass = lambda sql, *a, **k: (None, sql)  # noqa: E731
    # the one server execute path (ServerEngine.execute) calls servers.precheck for every engine
    monkeypatch.setattr("polysql_ray.engines.servers.precheck", bypass)
    monkeypatch.setattr(engine, "scope_refusal", lambda sql, location: None)  # the client-side scope layer too
    res = LIMITS.enforce(engine.execute(loc, sql, LIMITS))
    assert res.status in expect, (res.status, res.error)
    if sql.startswith("SELECT LOAD_FILE"):
        assert res.table.column(0)[0].as_py() is None
    if sql.startswith("HANDLER"):
        probe = engine.execute(loc, "HANDLER singer READ FIRST", LIMITS)
        assert probe.status is not S.OK  # the reset closed the handler
    assert writers[engine_name].fingerprint(loc) == replicas[engine_name].manifest.copy_fingerprint
    canary = engine.execute(loc, CANARY[0], LIMITS)
    assert canary.ok and canary.table.column(0)[0].as_py() == CANARY[1], (canary.status, canary.error)
