"""Names carried (issue 9 item 3) and one schema model for the structural check (item 6).

A query qualified with the source's schema (or MySQL database) name resolves on each replica as
on the source:

* SQLite source (schema ``main``): ``main.singer`` on the DuckDB, SQLite and PostgreSQL copies
  (PostgreSQL: a database per copy holding schema ``main``, ``search_path`` set on the database
  too) and, through an alias database of views claimed by the copy, on MariaDB;
* PostgreSQL source with a schema of its own name: that name on the DuckDB (a schema of views),
  PostgreSQL and MariaDB copies; SQLite records it unavailable;
* a MariaDB alias name already claimed by another run's copy is never overwritten: the second
  copy records the name unavailable, and dropping it leaves the first run's alias working.

The structural check (and the judge prompt) read the gold source's schema through the
replication readers, for MySQL, PostgreSQL and DuckDB sources as for SQLite.
"""
from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, register_server_replication, require_data, require_servers  # noqa: E402

require_data(SPIDER / "database")

from polysql_ray.comparison.equivalence import AstCheck, Case, read_source_schema  # noqa: E402
from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.base import ExecStatus, Limits  # noqa: E402
from polysql_ray.engines.registry import make_engine  # noqa: E402
from polysql_ray.replication.base import drop_replicas, replicate  # noqa: E402

LIM = Limits(timeout_s=10)
DB = "concert_singer"


def _sqlite_src(dataset="names"):
    return SourceDatabase(dataset, DB, "sqlite", str(SPIDER / "database" / DB / f"{DB}.sqlite"))


def _count(engine, location, sql):
    res = engine.execute(location, sql, LIM)
    return res.table.column(0)[0].as_py() if res.status is ExecStatus.OK else (res.status, res.error)


@pytest.mark.parametrize("target", ["duckdb", "sqlite"])
def test_main_qualifier_resolves_on_embedded_replicas(target, tmp_path):
    rep = replicate(_sqlite_src(), target, tmp_path)
    assert rep.manifest.schema_names == {"main": "resolves: schema 'main' of the replica"}
    eng = make_engine(target)
    try:
        assert _count(eng, rep.location, "SELECT count(*) FROM main.singer") == 6
        assert _count(eng, rep.location, "SELECT count(*) FROM Main.Singer AS s JOIN main.concert AS c ON 1 = 1") == 36
    finally:
        eng.close()


def test_structural_check_reads_a_duckdb_source_schema(tmp_path):
    rep = replicate(_sqlite_src(), "duckdb", tmp_path)
    schema = read_source_schema("duckdb", rep.location)
    assert set(schema) == {"stadium", "singer", "concert", "singer_in_concert"}
    assert schema["singer"]["Singer_ID"] == "INTEGER"


def test_keyed_pool_stays_bounded_across_databases():
    """One PostgreSQL pool serves every replica database: an idle connection of the same
    database is reused, and opening one for another database past the bound closes the oldest
    idle one first, so open connections never exceed the pool size."""
    from polysql_ray.engines.servers import ConnectionPool

    opened, closed = [], []
    pool = ConnectionPool(lambda key: opened.append(key) or [key], closed.append, size=2)
    for key in ["a", "b", "a", "c", "c", "a", "b"]:
        with pool.acquire(key) as lease:
            assert lease.conn == [key]
            assert len(opened) - len(closed) <= 2
    with pool.acquire("a") as l1, pool.acquire("b") as l2:
        assert {l1.conn[0], l2.conn[0]} == {"a", "b"} and len(opened) - len(closed) <= 2
    assert opened == ["a", "b", "c", "b"] and closed == [["b"], ["c"]] and pool.stats.reused == 5


class TestServers:
    """On PostgreSQL and MariaDB (skipped with a message when they are down)."""

    @pytest.fixture(autouse=True)
    def _servers(self):
        require_servers("postgres", "mysql")
        register_server_replication()

    def test_sqlite_main_qualifier_on_postgres_replica(self, tmp_path):
        import psycopg

        from polysql_ray.engines import postgres as pg
        from polysql_ray.engines.servers import ServerSettings

        try:
            rep = replicate(_sqlite_src(), "postgres", tmp_path)
            db, schema = pg.split_location(rep.location, pg.DEFAULTS["database"])
            assert schema == "main" and db.startswith("pq_names_concert_singer_")
            assert rep.manifest.schema_names["main"].startswith("resolves")
            eng = make_engine("postgres")
            try:
                for sql in ("SELECT count(*) FROM main.singer", "SELECT count(*) FROM MAIN.Singer",
                            "SELECT count(*) FROM singer"):
                    assert _count(eng, rep.location, sql) == 6, sql
            finally:
                eng.close()
            # the search_path is the database's own default: any reader session resolves names
            with psycopg.connect(**pg._connect_kwargs(ServerSettings.from_dict({}, **pg.DEFAULTS),
                                                       dbname=db), autocommit=True) as c:
                assert c.execute("SELECT count(*) FROM singer").fetchone()[0] == 6
        finally:
            drop_replicas(tmp_path)

    @pytest.fixture()
    def pg_source(self, tmp_path):
        """A PostgreSQL source whose schema has a name of its own (``nm_<hex>``), built from the
        project's PostgreSQL copy of concert_singer."""
        from psycopg import sql

        from polysql_ray.engines import postgres as pg
        from polysql_ray.engines.servers import ServerSettings

        base = tmp_path / "source"
        rep = replicate(_sqlite_src("names_src"), "postgres", base)
        db, _ = pg.split_location(rep.location, pg.DEFAULTS["database"])
        name = "nm_" + uuid.uuid4().hex[:8]
        with pg.connect(ServerSettings.from_dict({}, **pg.DEFAULTS), admin=True, dbname=db) as c:
            c.execute(sql.SQL("ALTER SCHEMA main RENAME TO {}").format(sql.Identifier(name)))
        yield SourceDatabase("names_pg", DB, "postgres", f"{db}/{name}"), name
        drop_replicas(base)

    def test_postgres_schema_qualifier_on_every_replica(self, pg_source, tmp_path):
        src, name = pg_source
        engines = {t: make_engine(t) for t in ("postgres", "duckdb", "mysql", "sqlite")}
        try:
            assert _count(engines["postgres"], src.location, f"SELECT count(*) FROM {name}.singer") == 6
            for target in ("postgres", "duckdb", "mysql"):
                rep = replicate(src, target, tmp_path)
                assert rep.manifest.schema_names[name].startswith("resolves"), rep.manifest.schema_names
                assert _count(engines[target], rep.location, f"SELECT count(*) FROM {name}.singer") == 6
                assert _count(engines[target], rep.location, "SELECT count(*) FROM singer") == 6
            rep = replicate(src, "sqlite", tmp_path)
            assert rep.manifest.schema_names[name].startswith("unavailable")
            assert _count(engines["sqlite"], rep.location, "SELECT count(*) FROM singer") == 6
        finally:
            for e in engines.values():
                e.close()
            drop_replicas(tmp_path)

    def test_mysql_alias_of_another_run_is_never_overwritten(self, pg_source, tmp_path):
        from polysql_ray.engines import mysql as my
        from polysql_ray.engines.servers import ServerSettings

        src, name = pg_source
        a, b = tmp_path / "run_a", tmp_path / "run_b"
        eng = make_engine("mysql")
        try:
            ra = replicate(src, "mysql", a)
            rb = replicate(src, "mysql", b)
            assert ra.location != rb.location
            assert ra.manifest.schema_names[name].startswith("resolves")
            assert rb.manifest.schema_names[name].startswith(f"unavailable: database {name!r}")
            drop_replicas(b)
            assert _count(eng, ra.location, f"SELECT count(*) FROM {name}.singer") == 6
            with my.connect_raw(ServerSettings.from_dict({}, **my.DEFAULTS), admin=True) as c, c.cursor() as cur:
                cur.execute("SELECT schema_comment FROM information_schema.schemata WHERE schema_name = %s",
                            (name,))
                assert cur.fetchone()[0] == f"polysql alias of {ra.location}"
            drop_replicas(a)  # the copy that claimed the alias drops it
            with my.connect_raw(ServerSettings.from_dict({}, **my.DEFAULTS), admin=True) as c, c.cursor() as cur:
                cur.execute("SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (name,))
                assert cur.fetchone()[0] == 0
        finally:
            eng.close()
            drop_replicas(a)
            drop_replicas(b)

    def test_structural_check_reads_mysql_and_postgres_sources(self, pg_source, tmp_path):
        """The schema model of a MySQL and of a PostgreSQL source, read by their replication
        readers: a PostgreSQL -> DuckDB pair whose identifiers need the schema is proven with
        it (and not without); MySQL pairs are never proven across dialects (``ast.py``), but the
        judge prompt shows the MySQL source's schema."""
        from polysql_ray.comparison.equivalence import Judge

        src, _ = pg_source
        try:
            my_loc = replicate(_sqlite_src(), "mysql", tmp_path).location
            for engine, location in (("mysql", my_loc), ("postgres", src.location)):
                schema = read_source_schema(engine, location)
                assert {t.lower() for t in schema} == {"stadium", "singer", "concert", "singer_in_concert"}
                assert "int" in {k.lower(): v for k, v in schema["singer"].items()}["age"].lower()
            case = Case(gold_sql="SELECT Name FROM singer WHERE Age > 20",
                        pred_sql="SELECT name FROM singer WHERE 20 < age", gold_dialect="postgres",
                        pred_dialect="duckdb", gold_engine="postgres", gold_location=src.location)
            assert AstCheck().check(case).verdict == "pass"
            unread = Case(**{**case.__dict__, "gold_location": src.location + "_absent"})
            assert AstCheck().check(unread).verdict == "inconclusive"
            prompt = Judge(lambda p: "VERDICT: PASS", samples=False).build_prompt(
                Case(gold_sql="SELECT 1", pred_sql="SELECT 1", gold_dialect="mysql",
                     pred_dialect="postgres", gold_engine="mysql", gold_location=my_loc))
            assert "TABLE singer (" in prompt
        finally:
            drop_replicas(tmp_path)
