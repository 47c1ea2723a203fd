"""Server engines (PostgreSQL, MariaDB/MySQL) on real servers: sandbox, errors, pool, secrets."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, register_server_replication, require_data, require_servers  # noqa: E402

require_servers("postgres", "mysql")
require_data(SPIDER / "database" / "concert_singer")
register_server_replication()

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402
from polysql_ray.engines.mysql import MySQLEngine  # noqa: E402
from polysql_ray.engines.postgres import PostgresEngine  # noqa: E402
from polysql_ray.engines.servers import ServerSettings  # noqa: E402
from polysql_ray.replication.base import get_writer, replicate  # noqa: E402

ENGINES = {"postgres": PostgresEngine, "mysql": MySQLEngine}
#: Statements expected to run: a timeout that load never reaches (a slow OK is still OK).
LIM = Limits(timeout_s=120.0, row_cap=50)
#: Statements expected to time out (they never end on their own, so load cannot change them).
SHORT = Limits(timeout_s=1.0, row_cap=50)

# (sql, expected statuses) per engine; every one must leave the replica unchanged
HOSTILE = {
    "common": [
        ("DELETE FROM singer", {S.REJECTED}),
        ("UPDATE singer SET Age = 0", {S.REJECTED}),
        ("DROP TABLE singer", {S.REJECTED}),
        ("CREATE TABLE x (a INT)", {S.REJECTED}),
        ("SELECT 1; DELETE FROM singer", {S.REJECTED}),
        ("SELECT 1;DROP TABLE singer;", {S.REJECTED}),
        ("INSERT INTO singer (Singer_ID) VALUES (99)", {S.REJECTED}),
    ],
    "postgres": [
        ("SELECT pg_read_file('/etc/passwd')", {S.REJECTED}),
        ("SELECT * FROM pg_read_file('/etc/passwd')", {S.REJECTED}),
        ("COPY (SELECT 1) TO PROGRAM 'id'", {S.REJECTED}),
        ("SELECT lo_import('/etc/passwd')", {S.REJECTED}),
        ("SELECT set_config('statement_timeout', '0', false)", {S.REJECTED}),
        ("SET statement_timeout = 0", {S.REJECTED}),
        ("WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d",
         {S.REJECTED, S.RUNTIME}),
        ("SELECT pg_sleep(30)", {S.TIMEOUT}),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
         {S.TIMEOUT}),
    ],
    "mysql": [
        ("SELECT LOAD_FILE('/etc/passwd')", {S.REJECTED}),
        ("SELECT * FROM singer INTO OUTFILE '/tmp/polysql_x'", {S.REJECTED}),
        ("SELECT Name FROM singer INTO DUMPFILE '/tmp/polysql_y'", {S.REJECTED}),
        ("SET GLOBAL max_connections = 1", {S.REJECTED}),
        ("SELECT SLEEP(30)", {S.TIMEOUT}),
        ("SELECT BENCHMARK(100000000000, MD5('a'))", {S.TIMEOUT}),
        # MariaDB would silently stop at max_recursive_iterations (1000) and answer 1000
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
         {S.TIMEOUT}),
        ("SELECT count(*) FROM information_schema.columns a, information_schema.columns b, "
         "information_schema.columns c", {S.TIMEOUT}),
    ],
}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    """concert_singer (Spider SQLite) replicated into both servers."""
    d = tmp_path_factory.mktemp("replicas")
    src = SourceDatabase("spidertest", "concert_singer", "sqlite",
                         str(SPIDER / "database" / "concert_singer" / "concert_singer.sqlite"))
    return {name: replicate(src, name, d) for name in ENGINES}


@pytest.fixture(scope="module", params=list(ENGINES))
def engine(request):
    e = ENGINES[request.param]({"pool_size": 2})
    yield e
    e.close()


def test_gold_like_queries_return_driver_types(engine, replicas):
    loc = replicas[engine.name].location
    q = "SELECT count(*), avg(Capacity), max(Name) FROM stadium"  # names resolve in any case
    r = engine.execute(loc, q, LIM)
    assert r.status is S.OK, r.error
    row = r.table.to_pylist()[0]
    vals = list(row.values())
    assert vals[0] == 9
    from decimal import Decimal
    assert isinstance(vals[1], Decimal) and abs(float(vals[1]) - 10621.666666) < 1e-3
    assert r.table.num_columns == 3


def test_row_cap_and_errors(engine, replicas):
    loc = replicas[engine.name].location
    assert engine.execute(loc, "SELECT * FROM singer_in_concert", Limits(5, 3)).status is S.TOO_LARGE
    assert engine.execute(loc, "SELEC 1", LIM).status is S.SYNTAX
    assert engine.execute(loc, "SELECT * FROM no_such_table", LIM).status is S.SCHEMA
    assert engine.execute(loc, "SELECT no_such_col FROM singer", LIM).status is S.SCHEMA
    assert engine.execute("pq_no_such_replica", "SELECT 1", LIM).status is S.UNAVAILABLE
    # the server answered the probe that followed (MariaDB: not as the bare reader, which no server has)
    assert engine.health == "healthy" and engine.probes > 0
    assert engine.execute(loc, "  ;; ", LIM).status is S.EMPTY
    ok = engine.execute(loc, "SELECT 1;  -- trailing", LIM)
    assert ok.status is S.OK and ok.table.column(0).to_pylist() == [1]


def test_hostile_sql_is_contained(engine, replicas):
    rep = replicas[engine.name]
    writer = get_writer(engine.name)
    before = writer.fingerprint(rep.location)
    assert before == rep.manifest.copy_fingerprint
    for sql, expected in HOSTILE["common"] + HOSTILE[engine.name]:
        r = engine.execute(rep.location, sql, SHORT if S.TIMEOUT in expected else LIM)
        assert r.status in expected, (sql, r.status, r.error)
    assert engine.health == "healthy"  # every timeout was followed by a probe the server answered
    assert writer.fingerprint(rep.location) == before
    assert writer.checksums(rep.location, rep.manifest.tables) == rep.manifest.checksums
    # the engine still works after all that
    assert engine.execute(rep.location, "SELECT count(*) FROM singer", LIM).table.column(0)[0].as_py() == 6


def test_reader_role_itself_is_least_privilege(replicas):
    """Even bypassing the client-side guard, the server refuses as the reader role."""
    import psycopg
    import pymysql

    from polysql_ray.engines import mysql as my, postgres as pg

    db, schema = pg.split_location(replicas["postgres"].location, pg.DEFAULTS["database"])
    with pg.connect(ServerSettings.from_dict({}, **pg.DEFAULTS), dbname=db) as c:
        for q in ["SELECT pg_read_file('/etc/passwd')", "SELECT lo_import('/etc/passwd')",
                  "COPY (SELECT 1) TO PROGRAM 'id'",
                  f'DELETE FROM "{schema}".singer']:
            with pytest.raises(psycopg.Error) as ei:
                c.execute(q)
            assert ei.value.sqlstate in ("42501", "25006"), (q, ei.value.sqlstate)
    loc = replicas["mysql"].location
    raw = my.connect_raw(ServerSettings.from_dict({}, **my.DEFAULTS), database=loc,
                         user=my.copy_account(my.DEFAULTS["user"], loc))  # the copy's own reader
    with raw, raw.cursor() as cur:
        cur.execute("SELECT LOAD_FILE('/etc/passwd')")
        assert cur.fetchone()[0] is None  # no FILE privilege: NULL, hence the client deny-list
        for q in [f"DELETE FROM `{replicas['mysql'].location}`.singer",
                  "SELECT 1 INTO OUTFILE '/tmp/polysql_z'", "SET GLOBAL max_connections = 1"]:
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute(q)
            assert ei.value.args[0] in my.ERRNO_STATUS
            assert my.ERRNO_STATUS[ei.value.args[0]] is S.REJECTED, q


def _kill_backend(name: str, ident: int) -> None:
    from polysql_ray.engines import mysql as my, postgres as pg

    if name == "postgres":
        with pg.connect(ServerSettings.from_dict({}, **pg.DEFAULTS), admin=True) as c:
            assert c.execute("SELECT pg_terminate_backend(%s)", [ident]).fetchone()[0]
    else:
        with my.connect_raw(ServerSettings.from_dict({}, **my.DEFAULTS), admin=True) as c:
            c.cursor().execute(f"KILL {int(ident)}")


def test_lost_connection_is_reestablished(replicas):
    for name, cls in ENGINES.items():
        e = cls({"pool_size": 1})
        loc = replicas[name].location
        q = "SELECT pg_backend_pid()" if name == "postgres" else "SELECT CONNECTION_ID()"
        first = e.execute(loc, q, LIM)
        assert first.status is S.OK
        _kill_backend(name, first.table.column(0)[0].as_py())
        again = e.execute(loc, q, LIM)
        assert again.status is S.OK, again.error
        assert again.table.column(0)[0].as_py() != first.table.column(0)[0].as_py()
        assert e.pool.stats.opened == 2 and e.pool.stats.discarded == 1
        for _ in range(5):
            assert e.execute(loc, "SELECT 1", LIM).ok
        assert e.pool.stats.opened == 2  # reused afterwards
        e.close()


def test_pool_is_bounded_and_reused(engine, replicas):
    loc = replicas[engine.name].location
    opened = engine.pool.stats.opened
    for _ in range(20):
        assert engine.execute(loc, "SELECT count(*) FROM concert", LIM).ok
    assert engine.pool.stats.opened - opened <= engine.pool.size


def test_passwords_never_in_repr_or_manifest(replicas, monkeypatch):
    secret = "pq-s3cret-Zx81"
    monkeypatch.setenv("POLYSQL_TEST_PG_PW", secret)
    with pytest.raises(ValueError):
        ServerSettings.from_dict({"password": secret})
    s = ServerSettings.from_dict({"password_env": "POLYSQL_TEST_PG_PW", "user": "polysql_reader"},
                                 port=5432, database="polysql")
    assert s.reader_password() == secret
    e = PostgresEngine(s)
    r = e.execute(replicas["postgres"].location, "SELECT 1", LIM)  # trust auth accepts it
    assert r.ok
    for text in (repr(s), str(s), json.dumps(s.public_dict()), repr(e), repr(e.pool),
                 replicas["postgres"].manifest.to_json(), replicas["mysql"].manifest.to_json()):
        assert secret not in text
    e.close()


def test_mysql_space_before_paren_is_a_dialect_error_not_a_sandbox_refusal(replicas):
    """`MAX (x)` is a stored-routine call in MySQL/MariaDB (IGNORE_SPACE off); the reader role
    may not execute routines, but replicas hold none: it is an unknown function (syntax).
    Found in the Spider sweep (CodeS/RESDSQL write `count ( * )`, `MAX (x)`)."""
    engine = MySQLEngine({"pool_size": 1})
    try:
        location = replicas["mysql"].location
        r = engine.execute(location, "SELECT MAX (Age) FROM singer", LIM)
        assert r.status is S.SYNTAX, r
        ok = engine.execute(location, "SELECT MAX(Age) FROM singer", LIM)
        assert ok.status is S.OK and ok.table.num_rows == 1
    finally:
        engine.close()


def test_mysql_session_vars_change_dialect_semantics(replicas):
    """engines.mysql.session_vars sets session variables on every pooled connection (the
    fidelity study re-runs MySQL gold with div_precision_increment=30 through the sandbox)."""
    loc = replicas["mysql"].location
    plain, precise = MySQLEngine({"pool_size": 1}), MySQLEngine(
        {"pool_size": 1, "session_vars": {"div_precision_increment": 30}})
    try:
        a = plain.execute(loc, "SELECT 1/3 AS x", LIM)
        b = precise.execute(loc, "SELECT 1/3 AS x", LIM)
    finally:
        plain.close()
        precise.close()
    assert a.ok and b.ok
    x, y = a.table.column(0)[0].as_py(), b.table.column(0)[0].as_py()
    assert abs(float(x) - 1 / 3) > 1e-5 and abs(float(y) - 1 / 3) < 1e-12


@pytest.mark.parametrize("name", list(ENGINES))
def test_one_outage_budget_however_many_refused_statements_come_between(name, replicas):
    """A dropped copy is retried for ``retry_s`` once per outage. Statements the guard refuses
    before they reach the server do not end the outage (they once renewed the budget, so every
    missing-copy statement waited ``retry_s`` again)."""
    from polysql_ray.pipeline.actors import ExecutionActor

    loc = replicas[name].location
    db = loc.split("/")[0]
    gone = loc.replace(db, db + "_gone", 1)
    actor = ExecutionActor(name, {"pool_size": 1}, {"timeout_s": 120.0, "row_cap": 50}, retry_s=1.0)
    *out, stats = actor.execute_batch([(gone, "SELECT 1"), (loc, "DROP TABLE singer")] * 5)
    assert [r.status for r in out] == [S.UNAVAILABLE, S.REJECTED] * 5
    assert stats["retries"] <= 3, stats  # the first statement's budget only (10 before the fix)
    assert actor.execute_one(loc, "SELECT count(*) FROM singer").status is S.OK  # ends the outage
    assert actor._outage_since is None
