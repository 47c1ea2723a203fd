"""Replication SQLite -> PostgreSQL / MariaDB on real servers: certificates, reuse, rebuild."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, register_server_replication, require_data, require_servers  # noqa: E402

require_servers("postgres", "mysql")
require_data(SPIDER / "database")
register_server_replication()

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines import mysql as my, postgres as pg  # noqa: E402
from polysql_ray.engines.servers import ServerSettings  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S  # noqa: E402
from polysql_ray.replication.base import get_reader, get_writer, replicate  # noqa: E402

DBS = ["concert_singer", "pets_1", "car_1"]


def _src(db):
    return SourceDatabase("spidertest", db, "sqlite", str(SPIDER / "database" / db / f"{db}.sqlite"))


@pytest.mark.parametrize("target", ["postgres", "mysql"])
def test_spider_dbs_replicate_with_equal_checksums(target, tmp_path):
    reader = get_reader("sqlite")
    writer = get_writer(target)
    for db in DBS:
        rep = replicate(_src(db), target, tmp_path)
        assert not rep.reused
        tables = rep.manifest.tables  # with the replica's names and declared types
        assert writer.checksums(rep.location, tables) == reader.checksums(_src(db), tables)
        assert {t.name for t in rep.manifest.tables} == {t.name for t in tables}
        # exact types: no 4-byte floats, 8-byte integers
        types = {c.target_type for t in rep.manifest.tables for c in t.columns}
        assert not types & {"REAL", "FLOAT", "FLOAT4"}
        again = replicate(_src(db), target, tmp_path)
        assert again.reused and again.manifest.copy_fingerprint == rep.manifest.copy_fingerprint


def test_identifiers_and_keys_exact(tmp_path):
    pr = replicate(_src("car_1"), "postgres", tmp_path)
    db, schema = pg.split_location(pr.location, pg.DEFAULTS["database"])
    assert schema == "main"  # an SQLite source's schema, by its name
    with pg.connect(ServerSettings.from_dict({}, **pg.DEFAULTS), admin=True, dbname=db) as c:
        names = {r[0] for r in c.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            [schema])}
        pks = c.execute("SELECT count(*) FROM information_schema.table_constraints WHERE "
                        "table_schema = %s AND constraint_type = 'PRIMARY KEY'", [schema]).fetchone()[0]
    # names the source resolves case-insensitively are stored folded to lower case
    assert names == {t.stored for t in pr.manifest.tables} == {t.name.lower() for t in pr.manifest.tables}
    assert pks == sum(1 for t in pr.manifest.tables if t.primary_key) - sum(
        1 for d in pr.manifest.dropped_constraints if d.startswith("PRIMARY KEY"))
    mr = replicate(_src("car_1"), "mysql", tmp_path)
    with my.connect_raw(ServerSettings.from_dict({}, **my.DEFAULTS), admin=True) as c, c.cursor() as cur:
        cur.execute("SELECT @@lower_case_table_names")
        lctn = cur.fetchone()[0]
        assert mr.manifest.server_settings == {"lower_case_table_names": lctn}
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (mr.location,))
        stored = {t.name.lower() if lctn else t.name for t in mr.manifest.tables}
        assert {r[0] for r in cur.fetchall()} == stored
    # key text columns are sized VARCHAR(n), others LONGTEXT
    for t in mr.manifest.tables:
        for c in t.columns:
            if c.logical_type == "VARCHAR":
                assert c.target_type == "LONGTEXT" or c.target_type.startswith("VARCHAR(")


@pytest.mark.parametrize("target", ["postgres", "mysql"])
def test_tampered_copy_is_rebuilt(target, tmp_path):
    rep = replicate(_src("pets_1"), target, tmp_path)
    if target == "postgres":
        db, schema = pg.split_location(rep.location, pg.DEFAULTS["database"])
        with pg.connect(ServerSettings.from_dict({}, **pg.DEFAULTS), admin=True, dbname=db) as c:
            c.execute(f'DELETE FROM "{schema}".pets WHERE petid = 2001')
    else:
        with my.connect_raw(ServerSettings.from_dict({}, **my.DEFAULTS), admin=True) as c:
            c.cursor().execute(f"DELETE FROM `{rep.location}`.`Pets` WHERE PetID = 2001")
    again = replicate(_src("pets_1"), target, tmp_path)
    assert not again.reused
    assert again.manifest.checksums == rep.manifest.checksums


def test_reader_can_only_read_its_own_copy(tmp_path):
    """Each copy has its own reader account, granted SELECT on that copy only; a reuse puts a
    lost account back, and dropping the copy drops its account."""
    import pymysql

    from polysql_ray.replication.mysql import MySQLWriter, reader_account

    settings = ServerSettings.from_dict({}, **my.DEFAULTS)
    rep = replicate(_src("pets_1"), "mysql", tmp_path)
    other = replicate(_src("concert_singer"), "mysql", tmp_path)
    account = my.copy_account(settings.user, rep.location)
    try:
        with my.connect_raw(settings, user=account) as c, c.cursor() as cur:
            cur.execute("SHOW GRANTS")
            grants = [r[0] for r in cur.fetchall()]
        assert not [g for g in grants if "ALL PRIVILEGES" in g or "FILE" in g]
        assert [g for g in grants if not g.startswith("GRANT USAGE")] == [
            f"GRANT SELECT ON `{rep.location}`.* TO `{account}`@`%`"], grants
        with my.connect_raw(settings, admin=True) as c, c.cursor() as cur:
            cur.execute(f"DROP USER {reader_account(settings, rep.location)}")
        assert replicate(_src("pets_1"), "mysql", tmp_path).reused  # reuse re-creates the account
        with my.connect_raw(settings, user=account, database=rep.location) as c, c.cursor() as cur:
            cur.execute("SELECT count(*) FROM pets")
            assert cur.fetchone()[0] > 0
            with pytest.raises(pymysql.err.MySQLError) as ei:
                cur.execute(f"SELECT count(*) FROM `{other.location}`.singer")
            assert my.ERRNO_STATUS[ei.value.args[0]] is S.REJECTED
    finally:
        MySQLWriter(settings).drop(rep.location)
        MySQLWriter(settings).drop(other.location)
    with my.connect_raw(settings, admin=True) as c, c.cursor() as cur:  # the account went with its copy
        cur.execute("SELECT count(*) FROM mysql.user WHERE User = %s", (account,))
        assert cur.fetchone()[0] == 0
    with pytest.raises(pymysql.err.OperationalError) as ei:
        my.connect_raw(settings, user=account)
    assert ei.value.args[0] in (1045, 1698)  # access denied (1698: no such user, no password)


@pytest.mark.parametrize("target", ["postgres", "mysql"])
def test_parallel_replication_tasks_do_not_collide_on_the_reader_account(target, tmp_path):
    """A sweep replicates many databases at once, each task setting up the shared reader
    account; PostgreSQL answered 'tuple concurrently updated' before the DDL was serialized."""
    from concurrent.futures import ThreadPoolExecutor

    dbs = ["concert_singer", "pets_1", "poker_player", "singer", "orchestra", "tvshow"]
    with ThreadPoolExecutor(len(dbs)) as pool:
        replicas = list(pool.map(lambda db: replicate(_src(db), target, tmp_path, force=True), dbs))
    assert [r.db_id for r in replicas] == dbs
    assert all(not r.reused and r.manifest.checksums for r in replicas)
