"""MySQL -> SQLite replication (replication/sqlite_writer.py) on the local MariaDB."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import require_servers  # noqa: E402

require_servers("mysql")

import pymysql  # noqa: E402

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.replication.base import ReplicationError, WRITERS, replicate  # noqa: E402

DB = "pq_src_sqlitewriter_test"


def _make(extra_rows=()):
    c = pymysql.connect(host="127.0.0.1", user="root", password="", autocommit=True)
    with c.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB} CHARACTER SET utf8mb4")
        cur.execute(f"USE {DB}")
        cur.execute("CREATE TABLE `Parent` (`Id` INT PRIMARY KEY, `Name Text` VARCHAR(20) NOT NULL, "
                    "`price` DECIMAL(10,2), `born` DATE, `at` DATETIME, `w` FLOAT, `d` DOUBLE)")
        cur.execute("CREATE TABLE `child` (`cid` INT PRIMARY KEY, `pid` INT, "
                    "FOREIGN KEY (`pid`) REFERENCES `Parent`(`Id`))")
        cur.executemany("INSERT INTO `Parent` VALUES (%s,%s,%s,%s,%s,%s,%s)", [
            (1, "a", "100.00", "1980-09-30", "2020-01-02 03:04:05", 23.45, 0.1),
            (2, "B ", "0.10", None, None, None, None), *extra_rows])
        cur.executemany("INSERT INTO `child` VALUES (%s,%s)", [(10, 1), (11, None)])
    c.close()
    return SourceDatabase("sqlitewriter_test", "t", "mysql", DB, True)


def test_registered():
    assert WRITERS["sqlite"].endswith("sqlite_writer:SqliteWriter")


def test_exact_copy_types_keys_and_reuse(tmp_path):
    src = _make()
    rep = replicate(src, "sqlite", tmp_path)
    con = sqlite3.connect(rep.location)
    # the table name as the MySQL source reports it: with lower_case_table_names=1 (README) the
    # server itself stores `Parent` as `parent`; column names keep their case either way
    c = pymysql.connect(host="127.0.0.1", user="root", password="")
    with c.cursor() as cur:
        cur.execute("SELECT @@lower_case_table_names")
        P = "parent" if int(cur.fetchone()[0]) == 1 else "Parent"
    c.close()
    # exact quoted identifiers, explicit types, keys carried
    ddl = con.execute("SELECT sql FROM sqlite_master WHERE name=?", [P]).fetchone()[0]
    assert '"Name Text" TEXT NOT NULL' in ddl and '"price" REAL' in ddl and 'PRIMARY KEY ("Id")' in ddl
    assert f'REFERENCES "{P}" ("Id")' in con.execute(
        "SELECT sql FROM sqlite_master WHERE name='child'").fetchone()[0]
    rows = con.execute('SELECT "Id", "Name Text", price, typeof(price), born, "at", w, d '
                       f'FROM "{P}" ORDER BY 1').fetchall()
    # DECIMAL 100.00 stays a REAL (not the integer 100: no integer division later)
    assert rows[0] == (1, "a", 100.0, "real", "1980-09-30", "2020-01-02 03:04:05", 23.45, 0.1)
    assert rows[1][1] == "B "  # trailing space kept
    assert con.execute(f'SELECT 7 / price FROM "{P}" WHERE "Id" = 1').fetchone()[0] == 0.07
    assert rep.manifest.checksums[P].rows == 2 and not rep.manifest.dropped_constraints
    assert replicate(src, "sqlite", tmp_path).reused


def test_wide_decimal_fails_verification(tmp_path):
    c = pymysql.connect(host="127.0.0.1", user="root", password="", autocommit=True)
    with c.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute(f"CREATE DATABASE {DB}")
        cur.execute(f"CREATE TABLE {DB}.`x` (`v` DECIMAL(30,10))")
        cur.execute(f"INSERT INTO {DB}.`x` VALUES ('12345678901234567.0000000001')")
    c.close()
    src = SourceDatabase("sqlitewriter_test", "w", "mysql", DB, True)
    with pytest.raises(ReplicationError, match="verification"):
        replicate(src, "sqlite", tmp_path)
    assert not list(Path(tmp_path).rglob("*.sqlite"))
