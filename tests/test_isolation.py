"""One replica visible per statement, on every engine (README "Untrusted SQL").

A *victim* database (table ``hidden`` holding a unique secret) is replicated by another run, in
another results folder, onto the same engines the attacking run uses: the same MariaDB and
PostgreSQL servers, the same fakesnow / bqemulator stand-in, the same chdb process. From the
attacking run's copy of ``concert_singer``, every way of naming the victim (qualified names,
``merge()``, catalogs, file readers, ``ATTACH``) must come back refused or empty: the secret and
the victim's database name never appear in a result (on PostgreSQL not even through the catalogs
that list every database: ``pg_database``, ``pg_stat_database``, ``pg_describe_object`` ...; on
DuckDB no host path of the attacking run either). Control: the victim run's own engine reads
the secret from its own copy, so the secret is there to be leaked.
"""
from __future__ import annotations

import contextlib
import shutil
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, register_server_replication, require_data, server_reachable, SERVERS  # noqa: E402
from hostile_cases import CROSS_REPLICA, LIMITS, check_canary  # noqa: E402

require_data(SPIDER / "database" / "concert_singer")
register_server_replication()

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S  # noqa: E402
from polysql_ray.replication.base import get_writer, replicate  # noqa: E402

SECRET = f"polysql-secret-{uuid.uuid4().hex}"
ENGINES = ("sqlite", "duckdb", "postgres", "mysql", "clickhouse", "snowflake", "bigquery")

def _victim_source(d: Path) -> SourceDatabase:
    d.mkdir(parents=True, exist_ok=True)
    f = d / "vault.sqlite"
    with contextlib.closing(sqlite3.connect(f)) as con:
        con.execute("CREATE TABLE hidden (secret TEXT)")
        con.execute("INSERT INTO hidden VALUES (?)", (SECRET,))
        con.commit()
    return SourceDatabase("victim", "vault", "sqlite", str(f))


def _names(engine: str, victim, eng=None, loc_a: str = "") -> dict[str, str]:
    """Template values (``hostile_cases.CROSS_REPLICA``) and what must never come back: ``db``
    (the victim's database name) and, on DuckDB, ``host`` (the attacker's own host paths: its
    replica folder and its engine's temp folder)."""
    from polysql_ray.engines import clickhouse as ch

    loc = victim.location
    if engine == "postgres":
        from polysql_ray.engines.postgres import connect
        from polysql_ray.engines.servers import ServerSettings

        db = loc.split("/")[0]
        with connect(eng.settings if eng is not None else ServerSettings.from_dict({}), admin=True,
                     dbname="postgres") as c:
            oid = c.execute("SELECT oid FROM pg_database WHERE datname = %s", [db]).fetchone()[0]
        return {"loc": loc, "db": db, "path": "", "oid": str(oid)}
    if engine == "clickhouse":
        return {"loc": loc, "db": ch.replica_database(ch.read_replica_spec(loc)), "path": ""}
    if engine == "duckdb":
        host = f"{Path(loc_a).parent}|{getattr(eng, '_temp_dir', '')}"
        return {"loc": loc, "db": "", "path": loc, "host": host}
    if engine == "sqlite":
        return {"loc": loc, "db": "", "path": loc}
    return {"loc": loc, "db": loc, "path": ""}


def _leaks(res, names: dict[str, str]) -> list[str]:
    if not res.ok or res.table is None:
        return []
    cells = [str(v) for col in res.table.columns for v in col.to_pylist()]
    bad = [SECRET] + [n for k, n in names.items() if k == "db" and n] + \
        [p for p in names.get("host", "").split("|") if p]
    return [c for c in cells if any(b.lower() in c.lower() for b in bad)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """engine -> (attacker engine, attacker location, victim engine, victim replica)."""
    from polysql_ray.engines.registry import make_engine

    from tests.warehouse_targets import warehouse

    root = tmp_path_factory.mktemp("isolation")
    src_file = root / "attacker" / "concert_singer.sqlite"
    src_file.parent.mkdir()
    shutil.copy(SPIDER / "database" / "concert_singer" / "concert_singer.sqlite", src_file)
    attacker_src = SourceDatabase("hostile", "concert_singer", "sqlite", str(src_file))
    victim_src = _victim_source(root / "victim_sources")
    cache: dict = {}
    with contextlib.ExitStack() as stack:
        def get(engine):
            if engine in cache:
                return cache[engine]
            if engine in ("postgres", "mysql") and not server_reachable(*SERVERS[engine][:2]):
                pytest.skip(f"{engine} server unreachable")
            if engine == "sqlite":
                from polysql_ray.engines.sqlite import SqliteEngine

                eng = SqliteEngine()
                stack.callback(eng.close)
                victim = type("V", (), {"location": victim_src.location})()
                cache[engine] = (eng, str(src_file), eng, victim)
                return cache[engine]
            if engine in ("duckdb", "postgres", "mysql"):
                attacker = replicate(attacker_src, engine, root / "results_a" / "replicas")
                victim = replicate(victim_src, engine, root / "results_b" / "replicas")
                if engine != "duckdb":
                    writer = get_writer(engine, None)
                    stack.callback(writer.drop, attacker.location)
                    stack.callback(writer.drop, victim.location)
                eng, veng = make_engine(engine), make_engine(engine)
                stack.callback(eng.close)
                stack.callback(veng.close)
                cache[engine] = (eng, attacker.location, veng, victim)
                return cache[engine]
            pytest.importorskip({"clickhouse": "chdb", "snowflake": "snowflake.connector",
                                 "bigquery": "google.cloud.bigquery"}[engine])
            t = stack.enter_context(warehouse(engine, root / f"results_a_{engine}"))
            victim = replicate(victim_src, engine, root / f"results_b_{engine}" / "replicas", settings=t.settings)
            if t.settings is not None:
                stack.callback(get_writer(engine, t.settings).drop, victim.location)
            opts = {} if engine == "clickhouse" else {**t.settings, "client_grace_s": 4}
            veng = make_engine(engine, **opts)
            stack.callback(veng.close)
            cache[engine] = (t.engine, t.replica.location, veng, victim)
            return cache[engine]

        yield get


@pytest.mark.parametrize("engine", ENGINES)
def test_the_victim_run_reads_its_own_secret(runs, engine):
    """Control: the secret is there, readable from the victim's own copy."""
    _, _, veng, victim = runs(engine)
    own = veng.execute(victim.location, "SELECT secret FROM hidden", LIMITS)
    assert own.ok and own.table.column(0)[0].as_py() == SECRET, (own.status, own.error)


@pytest.mark.parametrize("engine,k", [(e, k) for e in ENGINES for k in range(len(CROSS_REPLICA[e]))],
                         ids=[f"{e}-{k}" for e in ENGINES for k in range(len(CROSS_REPLICA[e]))])
def test_another_runs_replica_is_unreadable(runs, engine, k, record_property):
    eng, loc, veng, victim = runs(engine)
    names = _names(engine, victim, eng, loc)
    sql = CROSS_REPLICA[engine][k].format(**names)
    res = LIMITS.enforce(eng.execute(loc, sql, LIMITS))
    for key, v in (("engine", engine), ("attack_class", "cross_replica"), ("attack_s", res.elapsed_s),
                   ("limit_s", LIMITS.timeout_s), ("status", res.status.value)):
        record_property(key, v)
    assert not _leaks(res, names), f"ESCAPE: {sql} -> {_leaks(res, names)}"
    assert res.status in (S.REJECTED, S.SCHEMA, S.SYNTAX, S.RUNTIME, S.OK), \
        f"UNCONTAINED: {sql} -> {res.status} {res.error}"
    check_canary(eng.execute(loc, f"SELECT count(*) + {k + 1} FROM singer", LIMITS), 6 + k + 1)


def test_postgres_reader_cannot_list_other_databases(runs):
    """Server side, without the client-side layer: the reader connected to the attacking copy's
    database can read or call none of the relations and functions that show the server's other
    databases (``engines.postgres.cluster_objects``, derived from the server), and listing the
    databases fails with 42501; the victim's database still exists and the reader still reads
    its own copy there."""
    import psycopg

    from polysql_ray.engines.postgres import cluster_objects, connect, exposed_objects

    eng, loc, _, victim = runs("postgres")
    db = loc.split("/")[0]
    with connect(eng.settings, admin=True, dbname=db) as c:
        rels, funcs = cluster_objects(c)
        assert {"pg_database", "pg_stat_database", "pg_roles", "pg_shdescription"} <= set(rels), rels
        assert {"pg_describe_object", "pg_database_size"} <= {f for _, f in funcs}, funcs
        assert exposed_objects(c, eng.settings.user) == []
        assert c.execute("SELECT count(*) FROM pg_database WHERE datname = %s",
                         [victim.location.split("/")[0]]).fetchone()[0] == 1
    with connect(eng.settings, dbname=db) as r:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            r.execute("SELECT datname FROM pg_database").fetchall()
    ok = eng.execute(loc, "SELECT count(*) FROM singer", LIMITS)
    assert ok.ok and ok.table.column(0)[0].as_py() == 6, (ok.status, ok.error)


def test_postgres_reused_copy_is_hardened_again(runs):
    """A copy whose database still grants a cluster catalog (built before it was revoked) is
    hardened again when it is reused (``PostgresWriter.ensure_reader``)."""
    from polysql_ray.engines.postgres import connect, exposed_objects
    from polysql_ray.replication.postgres import PostgresWriter

    eng, loc, _, _ = runs("postgres")
    db = loc.split("/")[0]
    with connect(eng.settings, admin=True, dbname=db) as c:
        c.execute("GRANT SELECT ON pg_catalog.pg_database TO PUBLIC")
        assert exposed_objects(c, eng.settings.user) == ["pg_database"]
    PostgresWriter(eng.settings).ensure_reader(loc)
    with connect(eng.settings, admin=True, dbname=db) as c:
        assert exposed_objects(c, eng.settings.user) == []
