"""SpiderMan as a MySQL-source dataset: install, examples, gold on MariaDB, replication out."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDERMAN, register_server_replication, require_data, require_servers  # noqa: E402

require_servers("mysql", "postgres")
require_data(SPIDERMAN / "test_queries.csv")
register_server_replication()

from polysql_ray.datasets import spiderman as sm  # noqa: E402
from polysql_ray.replication.spiderman_source import install_sources  # noqa: E402
from polysql_ray.engines.base import Limits  # noqa: E402
from polysql_ray.engines.mysql import MySQLEngine  # noqa: E402
from polysql_ray.replication.base import get_reader, get_writer, replicate  # noqa: E402

DBS = ["concert_singer", "wta_1", "pets_1"]


@pytest.fixture(scope="module")
def installed():
    install_sources(SPIDERMAN, db_ids=DBS)
    return install_sources(SPIDERMAN, db_ids=DBS)


def test_install_is_idempotent(installed):
    assert installed == {db: True for db in DBS}


def test_examples_order_ids_and_wta_policy(installed):
    ex = list(sm.load_spiderman(SPIDERMAN))
    assert len(ex) == 1034
    assert [e.question_id for e in ex[:3]] == ["0", "1", "2"] and ex[5].position == 5
    assert all(e.gold_dialect == e.source_engine == "mysql" for e in ex)
    wta = [e for e in ex if e.db_id == "wta_1"]
    errs = [e for e in wta if e.gold_error]
    assert 0 < len(errs) < len(wta)
    assert all("rankings" in e.gold_sql.lower() for e in errs)
    assert all(e.extra["missing_tables"] == ["rankings"] for e in wta)
    whole = [e for e in sm.load_spiderman(SPIDERMAN, missing_table_policy="database")
             if e.db_id == "wta_1"]
    assert all(e.gold_error and not e.database.exists for e in whole)


def test_gold_runs_on_mariadb(installed):
    eng = MySQLEngine()
    ex = [e for e in sm.load_spiderman(SPIDERMAN) if e.db_id in DBS and not e.gold_error]
    bad = [(e.question_id, r.status, r.error) for e in ex
           if not (r := eng.execute(e.database.location, e.gold_sql, Limits(10, 100_000))).ok]
    assert not bad
    assert eng.pool.stats.opened <= eng.pool.size
    eng.close()


@pytest.mark.parametrize("target", ["postgres", "duckdb"])
def test_mysql_source_replicates(installed, target, tmp_path):
    ex = next(e for e in sm.load_spiderman(SPIDERMAN) if e.db_id == "wta_1")
    rep = replicate(ex.database, target, tmp_path)
    reader = get_reader("mysql")
    tables, _ = reader.read_schema(ex.database)
    assert {t.name for t in tables} == {"players", "matches"}  # rankings not invented
    assert get_writer(target).checksums(rep.location, tables) == reader.checksums(ex.database, tables)
    ints = {c.logical_type for t in rep.manifest.tables for c in t.columns if c.declared_type.startswith("int")}
    assert ints == {"INTEGER"}  # declared width kept (PostgreSQL integer arithmetic)
    floats = [c for t in rep.manifest.tables for c in t.columns if c.declared_type.startswith("float")]
    assert floats and all(c.logical_type == "DOUBLE" and c.widened for c in floats)


def test_loader_only_reads_and_the_replication_stage_installs_with_the_run_settings(installed):
    from polysql_ray.replication.base import ReplicationError
    from polysql_ray.replication.sources import prepare

    ex = next(e for e in sm.load_spiderman(SPIDERMAN) if e.db_id == "pets_1")
    assert ex.database.install == f"spiderman:{SPIDERMAN.resolve()}" and ex.database.exists
    # the run's engines.mysql settings are the ones used: a wrong port fails, naming the source
    with pytest.raises(ReplicationError, match="pets_1"):
        prepare(ex.database, {"port": 1, "connect_timeout_s": 2})
    assert prepare(ex.database, {})
    bare = next(e for e in sm.load_spiderman(SPIDERMAN, installed=False) if e.db_id == "pets_1")
    assert bare.database.install == "" and not prepare(bare.database)
