"""PostgreSQL dumps as sources (issue 20 item 4): every schema of the dump is replicated, the
unconstrained ``numeric`` becomes the narrowest exact decimal, array/enum/range columns are
carried as text with a recorded reason, and the dump's gold results are equal on every target
(sqlite, duckdb, postgres, mysql, clickhouse via chdb, snowflake via fakesnow, bigquery via
bqemulator). A DuckDB source's catalog-qualified names (``nyc.taxi``) resolve on the replicas.

The dump is a plain-SQL file written here (as ``pg_dump`` writes one: schemas, types, tables,
data, keys), loaded by the project into a database named after this run (unique on the shared
server) and dropped afterwards.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import register_server_replication, require_servers  # noqa: E402

require_servers("postgres", "mysql")
register_server_replication()

from polysql_ray.comparison.policy import ComparisonPolicy  # noqa: E402
from polysql_ray.comparison.result_set import compare  # noqa: E402
from polysql_ray.comparison.shape import analyze_gold  # noqa: E402
from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.base import ExecStatus, Limits  # noqa: E402
from polysql_ray.engines.registry import make_engine  # noqa: E402
from polysql_ray.replication.base import ReplicationError, drop_replicas, replicate  # noqa: E402

LIM = Limits(timeout_s=30)

DUMP = """
SET client_encoding = 'UTF8';
CREATE SCHEMA sales;
CREATE SCHEMA hr;
CREATE TYPE sales.order_status AS ENUM ('open', 'shipped', 'closed');
CREATE TABLE hr.staff (id integer NOT NULL, name text NOT NULL, salary numeric(10,2), shifts int4range);
CREATE TABLE sales.orders (id integer NOT NULL, staff_id integer, customer character varying(40),
    amount numeric, tags text[], status sales.order_status);
CREATE TABLE public.regions (code character(2) NOT NULL, label text);
COPY hr.staff (id, name, salary, shifts) FROM stdin;
1	Ada	5200.50	[1,5)
2	Bob	4100.00	[2,8)
3	Cy	\\N	\\N
\\.
COPY sales.orders (id, staff_id, customer, amount, tags, status) FROM stdin;
1	1	acme	12.5	{a,b}	open
2	1	bolt	1000	{}	shipped
3	2	acme	0.125	{c}	closed
4	\\N	zed	-77.25	\\N	open
5	2	bolt	\\N	{a}	\\N
\\.
COPY public.regions (code, label) FROM stdin;
eu	Europe
us	Americas
\\.
ALTER TABLE ONLY hr.staff ADD CONSTRAINT staff_pkey PRIMARY KEY (id);
ALTER TABLE ONLY sales.orders ADD CONSTRAINT orders_pkey PRIMARY KEY (id);
ALTER TABLE ONLY sales.orders ADD CONSTRAINT orders_staff_fk FOREIGN KEY (staff_id) REFERENCES hr.staff(id);
"""

#: gold SQL written for the dump: names qualified with its schemas, as its users write them
GOLD = [
    "SELECT count(*), sum(amount) FROM sales.orders",
    "SELECT customer, amount FROM sales.orders WHERE amount > 1 ORDER BY amount",
    "SELECT s.name, count(*) FROM sales.orders AS o JOIN hr.staff AS s ON o.staff_id = s.id GROUP BY s.name",
    "SELECT status, count(*) FROM sales.orders GROUP BY status",
    "SELECT max(salary), min(salary) FROM hr.staff",
    "SELECT label FROM public.regions WHERE code = 'eu'",
    "SELECT o.id FROM sales.orders AS o WHERE o.amount < 0",
]

TARGETS = ("sqlite", "duckdb", "postgres", "mysql", "clickhouse", "snowflake", "bigquery")

#: targets where ``<schema>.<table>`` resolves for every schema of the dump (the others record why not)
QUALIFIED = {"duckdb", "postgres", "mysql"}


def _unqualified(sql: str) -> str:
    """The gold with the dump's schema qualifiers removed (for targets that cannot carry them)."""
    return re.sub(r"\b(sales|hr|public)\.", "", sql)


@pytest.fixture
def dump_source(tmp_path):
    """The dump installed as a source of dataset ``pgdump<unique>`` (database dropped after)."""
    from polysql_ray.datasets.base import file_source
    from polysql_ray.engines import postgres as pg_engine
    from polysql_ray.engines.servers import ServerSettings
    from polysql_ray.replication.postgres import PostgresWriter
    from polysql_ray.replication.sources import prepare

    if not shutil.which("psql"):
        pytest.skip("psql not installed")
    (tmp_path / "db" / "shop").mkdir(parents=True)
    (tmp_path / "db" / "shop" / "shop.sql").write_text(DUMP)
    src = file_source(f"pgdump{uuid.uuid4().hex[:8]}", "shop", "postgres", tmp_path / "db")
    settings = ServerSettings.from_dict({}, **pg_engine.DEFAULTS)
    try:
        assert prepare(src)
        yield src
    finally:
        PostgresWriter(settings).drop(src.location)


def _engine_settings(name: str, stack) -> dict:
    from tests.standins import bqemulator_server, fakesnow_server

    if name == "snowflake":
        os.environ.setdefault("POLYSQL_TEST_FAKESNOW_PW", "fakesnow-accepts-any")  # never a real secret
        host, port = stack.enter_context(fakesnow_server())
        return {"host": host, "port": port, "protocol": "http", "account": "fakesnow", "user": "fake",
                "admin_user": "fake", "password_env": "POLYSQL_TEST_FAKESNOW_PW",
                "admin_password_env": "POLYSQL_TEST_FAKESNOW_PW"}
    if name == "bigquery":
        host, port = stack.enter_context(bqemulator_server())
        return {"project": "polysql", "api_endpoint": f"http://{host}:{port}", "anonymous": True}
    return {}


def test_dump_with_schemas_and_unconstrained_numeric_on_every_target(dump_source, tmp_path):
    import contextlib

    rdir = tmp_path / "replicas"
    policy = ComparisonPolicy()
    src_engine = make_engine("postgres")
    want = {}
    try:
        for sql in GOLD:  # the gold runs on the dump's database as on the one it came from
            r = src_engine.execute(dump_source.location, sql, LIM)
            assert r.status is ExecStatus.OK, (sql, r.error)
            want[sql] = r.table
    finally:
        src_engine.close()
    equal: dict[str, int] = {}
    used: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        try:
            for target in TARGETS:
                settings = used[target] = _engine_settings(target, stack)
                rep = replicate(dump_source, target, rdir, settings=settings or None)
                m = rep.manifest
                # every schema's tables, each recorded with its schema
                assert {(t.schema, t.name) for t in m.tables} == {
                    ("hr", "staff"), ("sales", "orders"), ("public", "regions")}, target
                cols = {(t.name, c.name): c for t in m.tables for c in t.columns}
                amount = cols[("orders", "amount")]
                assert (amount.logical_type, amount.precision, amount.scale) == ("DECIMAL", 7, 3), target
                assert "narrowest exact decimal" in amount.widened
                assert "array" in cols[("orders", "tags")].widened
                assert "enum" in cols[("orders", "status")].widened
                assert "range" in cols[("staff", "shifts")].widened
                assert set(m.schema_names) == {"public", "sales", "hr"}, m.schema_names
                resolves = {q for q, why in m.schema_names.items() if why.startswith("resolves")}
                if target in QUALIFIED:
                    assert resolves == {"public", "sales", "hr"}, (target, m.schema_names)
                else:  # recorded, with the reason
                    assert all(why.startswith("unavailable") for q, why in m.schema_names.items()
                               if q not in resolves), m.schema_names
                engine = make_engine(target, **settings)
                stack.callback(engine.close)
                equal[target] = 0
                for sql in GOLD:
                    run = sql if target in QUALIFIED else _unqualified(sql)
                    got = LIM.enforce(engine.execute(rep.location, run, LIM))
                    assert got.status is ExecStatus.OK, (target, run, got.error)
                    cmp = compare(want[sql], got.table, analyze_gold(sql, "postgres"), policy)
                    assert cmp.match, (target, sql, cmp.reason, want[sql], got.table)
                    equal[target] += 1
        finally:
            drop_replicas(rdir, {t: s for t, s in used.items() if s})
    assert equal == {t: len(GOLD) for t in TARGETS}


def test_unconstrained_numeric_without_an_exact_decimal_is_text(tmp_path):
    """NaN (or more than 38 digits) in an unconstrained numeric: that column is carried as
    text, the reason recorded; the database still replicates."""
    from polysql_ray.engines import postgres as pg_engine
    from polysql_ray.engines.servers import ServerSettings
    from polysql_ray.replication.postgres import PostgresWriter
    from polysql_ray.replication.postgres_source import load_dump

    settings = ServerSettings.from_dict({}, **pg_engine.DEFAULTS)
    db = f"pq_src_pgnan{uuid.uuid4().hex[:8]}"
    dump = tmp_path / "nan.sql"
    dump.write_text("CREATE SCHEMA m;\nCREATE TABLE m.t (id integer, x numeric, y numeric);\n"
                    "INSERT INTO m.t VALUES (1, 'NaN', 1.5), (2, 2, 1" + "0" * 40 + ");\n")
    try:
        load_dump(str(dump), db, settings)
        src = SourceDatabase("pgnan", "nan", "postgres", f"{db}/public")
        rep = replicate(src, "duckdb", tmp_path / "replicas")
        cols = {c.name: c for t in rep.manifest.tables for c in t.columns}
        assert cols["x"].logical_type == "VARCHAR" and "NaN" in cols["x"].widened
        assert cols["y"].logical_type == "VARCHAR" and "38" in cols["y"].widened
        eng = make_engine("duckdb")
        try:
            r = eng.execute(rep.location, "SELECT x FROM m.t ORDER BY id", LIM)
        finally:
            eng.close()
        assert r.status is ExecStatus.OK and r.table.column(0).to_pylist() == ["NaN", "2"]
    finally:
        PostgresWriter(settings).drop(f"{db}/public")


def test_same_table_name_in_two_schemas_is_one_clear_line(tmp_path):
    from polysql_ray.engines import postgres as pg_engine
    from polysql_ray.engines.servers import ServerSettings
    from polysql_ray.replication.postgres import PostgresWriter
    from polysql_ray.replication.postgres_source import load_dump

    settings = ServerSettings.from_dict({}, **pg_engine.DEFAULTS)
    db = f"pq_src_pgdup{uuid.uuid4().hex[:8]}"
    dump = tmp_path / "dup.sql"
    dump.write_text("CREATE SCHEMA a; CREATE SCHEMA b;\nCREATE TABLE a.t (x int);\nCREATE TABLE b.t (x int);\n")
    try:
        load_dump(str(dump), db, settings)
        with pytest.raises(ReplicationError, match=r"table 't' exists in schemas 'a' and 'b'"):
            replicate(SourceDatabase("pgdup", "dup", "postgres", f"{db}/public"), "duckdb", tmp_path / "r")
    finally:
        PostgresWriter(settings).drop(f"{db}/public")


def test_duckdb_catalog_qualified_names_reach_the_replicas(tmp_path):
    """``nyc.taxi`` resolves on a DuckDB source file ``nyc.duckdb`` (its catalog); the replicas
    carry ``nyc`` like a schema name: PostgreSQL and DuckDB as a schema of views, MariaDB as an
    alias database; SQLite records why it cannot."""
    import duckdb

    path = tmp_path / "src" / "nyc.duckdb"
    path.parent.mkdir()
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE taxi (id INTEGER PRIMARY KEY, fare DECIMAL(8,2))")
    con.execute("INSERT INTO taxi VALUES (1, 12.50), (2, 7.25), (3, NULL)")
    con.close()
    src = SourceDatabase(f"cat{uuid.uuid4().hex[:6]}", "trips", "duckdb", str(path))
    sql = "SELECT count(*), sum(fare) FROM nyc.taxi"
    eng = make_engine("duckdb")
    try:
        want = eng.execute(src.location, sql, LIM)
    finally:
        eng.close()
    assert want.status is ExecStatus.OK
    rdir = tmp_path / "replicas"
    try:
        for target in ("duckdb", "postgres", "mysql", "sqlite"):
            rep = replicate(src, target, rdir)
            why = rep.manifest.schema_names["nyc"]
            e = make_engine(target)
            try:
                got = e.execute(rep.location, sql, LIM)
            finally:
                e.close()
            if target == "sqlite":
                assert why.startswith("unavailable") and got.status is not ExecStatus.OK
                continue
            assert why.startswith("resolves"), (target, why)
            assert got.status is ExecStatus.OK, (target, got.error)
            assert compare(want.table, got.table, analyze_gold(sql, "duckdb"), ComparisonPolicy()).match
    finally:
        drop_replicas(rdir)
