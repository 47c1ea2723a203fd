"""Replication SQLite -> DuckDB: exact identifiers, explicit types, keys, certificate, reuse.

Synthetic databases in ``tmp_path`` cover the hard cases (spaces/mixed case/quotes in
identifiers, REAL, text in an INTEGER column, FK violated by the data, FK to a missing
table); every Spider dev database under ``<repo>/../shared/data`` (or $POLYSQL_SHARED) is
replicated and verified when present.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import duckdb
import pytest

from jobs.replicate import ensure_replicas
from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication import ReplicationError, replicate
from polysql_ray.replication import certificate, typemap
from polysql_ray.replication.base import get_reader, get_writer

SHARED = Path(os.environ.get("POLYSQL_SHARED", Path(__file__).resolve().parents[1].parent / "shared" / "data"))
SPIDER_DB = SHARED / "spider" / "database"


def make_source(path: Path) -> SourceDatabase:
    con = sqlite3.connect(path)
    con.executescript('''
        CREATE TABLE "Parent Table" ("Id" INTEGER PRIMARY KEY, "Full Name" TEXT NOT NULL,
                                     "weird""quote" VARCHAR(10));
        CREATE TABLE child (cid INT, "parentId" INTEGER REFERENCES "Parent Table"("Id"),
                            ghost INT REFERENCES nowhere(x), score REAL, price DECIMAL(19,4),
                            flag BOOL, born DATETIME, blobby BLOB, untyped,
                            PRIMARY KEY (cid));
        CREATE TABLE orphaned (oid INTEGER PRIMARY KEY, pid INTEGER REFERENCES "Parent Table"("Id"));
        CREATE VIEW v AS SELECT * FROM child;
    ''')
    con.executemany('INSERT INTO "Parent Table" VALUES (?,?,?)',
                    [(1, "Ann", 'a"b'), (2, "Bob Lee", None), (3, "Çé ü", "x")])
    con.executemany("INSERT INTO child VALUES (?,?,?,?,?,?,?,?,?)", [
        (10, 1, None, 0.1, 12.5, 1, "2020-01-02 03:04:05", b"\x00\x01", 5),
        (11, 2, None, 1e300, 7, 0, "2021-02-03", None, "text"),
        (12, None, None, 3.0, 0.30000000000000004, None, None, b"x", 2.5),
    ])
    con.executemany("INSERT INTO orphaned VALUES (?,?)", [(1, 1), (2, 99)])  # 99: no parent
    con.execute("CREATE TABLE loose (n INTEGER, r REAL)")
    con.executemany("INSERT INTO loose VALUES (?,?)", [(1, 1.5), ("N/A", "n/a"), (2 ** 62, None)])
    con.commit()
    con.close()
    return SourceDatabase("synthetic", "syn", "sqlite", str(path))


@pytest.fixture()
def source(tmp_path):
    return make_source(tmp_path / "syn.sqlite")


def duck_types(location):
    con = duckdb.connect(location, read_only=True)
    try:
        return {(t, c): ty for t, c, ty in con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "ORDER BY table_name, ordinal_position").fetchall()}
    finally:
        con.close()


def test_copy_is_exact(source, tmp_path):
    rep = replicate(source, "duckdb", tmp_path / "rep", types="storage")
    assert not rep.reused and Path(rep.location).exists() and rep.manifest_path.exists()
    types = duck_types(rep.location)
    # identifiers exactly as the source spells them, nothing added
    assert ("Parent Table", "Full Name") in types and ("Parent Table", 'weird"quote') in types
    assert ("child", "parentId") in types
    assert {t for t, _ in types} == {"Parent Table", "child", "orphaned", "loose"}
    assert sum(1 for t, _ in types if t == "child") == 9
    # explicit type map: REAL -> DOUBLE (8 bytes), DECIMAL holding floats -> DOUBLE,
    # DATETIME text -> VARCHAR, BOOL ints -> BIGINT, untyped mixed -> VARCHAR
    assert types[("child", "score")] == "DOUBLE"
    assert types[("child", "price")] == "DOUBLE"
    assert types[("child", "born")] == "VARCHAR"
    assert types[("child", "flag")] == "BIGINT"
    assert types[("child", "blobby")] == "BLOB"
    assert types[("child", "untyped")] == "VARCHAR"
    assert types[("Parent Table", "Id")] == "BIGINT"
    # text in an INTEGER / REAL column widens that column to VARCHAR and is recorded
    assert types[("loose", "n")] == "VARCHAR" and types[("loose", "r")] == "VARCHAR"
    widened = {(t.name, c.name): c.widened for t in rep.manifest.tables for c in t.columns}
    assert widened[("loose", "n")] and "N/A" not in widened[("loose", "n")]
    assert widened[("child", "score")] is None
    con = duckdb.connect(rep.location, read_only=True)
    vals = con.execute('SELECT n, r FROM loose ORDER BY rowid').fetchall()
    score = con.execute("SELECT score, price FROM child ORDER BY cid").fetchall()
    name = con.execute('SELECT "Full Name" FROM "Parent Table" WHERE "Id" = 3').fetchone()[0]
    con.close()
    assert vals == [("1", "1.5"), ("N/A", "n/a"), (str(2 ** 62), None)]
    assert score == [(0.1, 12.5), (1e300, 7.0), (3.0, 0.30000000000000004)]
    assert name == "Çé ü"


def test_declared_types_kept_where_values_conform(source, tmp_path):
    """replication.types=declared: INTEGER -> 4-byte INTEGER, BOOL 0/1 -> BOOLEAN; a DATETIME
    column holding a date-only text and a DECIMAL(19,4) holding 0.30000000000000004 fall back
    to their storage type with the count and examples recorded."""
    rep = replicate(source, "duckdb", tmp_path / "rep")
    assert rep.manifest.types == "declared"
    types = duck_types(rep.location)
    assert types[("Parent Table", "Id")] == "INTEGER" and types[("child", "cid")] == "INTEGER"
    assert types[("child", "flag")] == "BOOLEAN"
    assert types[("child", "born")] == "VARCHAR" and types[("child", "price")] == "DOUBLE"
    cols = {(t.name, c.name): c for t in rep.manifest.tables for c in t.columns}
    born = cols[("child", "born")]
    assert born.fallback_count == 1 and born.fallback_examples == ("'2021-02-03'",)
    assert "DATETIME" in born.fallback
    assert cols[("child", "price")].fallback_count == 1
    assert cols[("child", "flag")].fallback is None
    # loose.n holds 2**62 (too wide for INTEGER, fits BIGINT) and text 'N/A' (fits neither)
    assert cols[("loose", "n")].logical_type == "VARCHAR" and cols[("loose", "n")].fallback_examples == ("'N/A'",)
    con = duckdb.connect(rep.location, read_only=True)
    assert con.execute("SELECT flag FROM child ORDER BY cid").fetchall() == [(True,), (False,), (None,)]
    con.close()
    # the two modes are two different copies: switching rebuilds
    assert not replicate(source, "duckdb", tmp_path / "rep", types="storage").reused


def test_declared_dates_and_decimals(tmp_path):
    """ISO DATETIME/DATE text -> TIMESTAMP/DATE, DECIMAL(p,s) values that fit -> DECIMAL; the
    certificate compares the source text with the copy's ISO text."""
    path = tmp_path / "d.sqlite"
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE t (k INTEGER PRIMARY KEY, ts DATETIME, d DATE, amount DECIMAL(10,2),
                        big INTEGER, code VARCHAR(3), yes BOOL);
        INSERT INTO t VALUES (1, '2018-03-25 06:58:44', '2018-03-25', 12.5, 5000000000, 'abc', 'T');
        INSERT INTO t VALUES (2, NULL, '1999-12-31', 3, 1, 'x', 'F');
    """)
    con.close()
    src = SourceDatabase("synthetic", "d", "sqlite", str(path))
    rep = replicate(src, "duckdb", tmp_path / "rep")
    types = duck_types(rep.location)
    assert types[("t", "ts")] == "TIMESTAMP" and types[("t", "d")] == "DATE"
    assert types[("t", "amount")] == "DECIMAL(10,2)" and types[("t", "big")] == "BIGINT"
    assert types[("t", "code")] == "VARCHAR" and types[("t", "yes")] == "VARCHAR"
    cols = {c.name: c for t in rep.manifest.tables for c in t.columns}
    assert cols["code"].length == 3 and "INTEGER" in cols["big"].fallback
    d = duckdb.connect(rep.location, read_only=True)
    assert d.execute("SELECT count(*) FROM t WHERE ts < TIMESTAMP '2019-01-01 00:00:00' "
                     "AND d >= DATE '2018-01-01'").fetchone()[0] == 1
    d.close()
    assert typemap.decimal_fits(12.5, 10, 2) and not typemap.decimal_fits(0.125, 10, 2)


def test_keys_carried_or_dropped_with_reason(source, tmp_path):
    rep = replicate(source, "duckdb", tmp_path / "rep")
    dropped = "\n".join(rep.manifest.dropped_constraints)
    assert "nowhere" in dropped and "does not exist" in dropped
    assert "orphaned(pid)" in dropped and "violates" in dropped
    assert "child(parentId)" not in dropped
    assert any("view 'v'" in s for s in rep.manifest.skipped_objects)
    con = duckdb.connect(rep.location, read_only=True)
    cons = con.execute("SELECT table_name, constraint_type FROM duckdb_constraints()").fetchall()
    con.close()
    assert ("child", "FOREIGN KEY") in cons
    assert ("Parent Table", "PRIMARY KEY") in cons and ("orphaned", "PRIMARY KEY") in cons
    assert ("orphaned", "FOREIGN KEY") not in cons
    assert ("Parent Table", "NOT NULL") in cons


def test_checksums_equal_and_manifest_written(source, tmp_path):
    rep = replicate(source, "duckdb", tmp_path / "rep")
    m = certificate.read_manifest(rep.manifest_path)
    assert m.reuse_key() == rep.manifest.reuse_key()
    assert m.checksums["child"].rows == 3
    assert m.checksums["child"].columns["blobby"].non_null == 2
    writer = get_writer("duckdb")
    assert certificate.diff(m.checksums, writer.checksums(rep.location, m.tables)) == []
    assert m.type_map_version == typemap.TYPE_MAP_VERSION


def test_verification_detects_a_changed_copy(source, tmp_path):
    rep = replicate(source, "duckdb", tmp_path / "rep")
    con = duckdb.connect(rep.location)
    con.execute("UPDATE child SET score = 0.1000001 WHERE cid = 10")
    con.close()
    reader, writer = get_reader("sqlite"), get_writer("duckdb")
    with pytest.raises(ReplicationError, match="score"):
        certificate.verify(source, rep.manifest.tables, reader, writer, rep.location)
    # the changed copy no longer matches its fingerprint -> rebuilt, not reused
    again = replicate(source, "duckdb", tmp_path / "rep")
    assert not again.reused
    con = duckdb.connect(again.location, read_only=True)
    assert con.execute("SELECT score FROM child WHERE cid = 10").fetchone()[0] == 0.1
    con.close()


def test_reuse_and_invalidation(source, tmp_path):
    first = replicate(source, "duckdb", tmp_path / "rep")
    second = replicate(source, "duckdb", tmp_path / "rep")
    assert second.reused and second.manifest.source_hash == first.manifest.source_hash
    con = sqlite3.connect(source.location)
    con.execute("INSERT INTO loose VALUES (7, 7.5)")
    con.commit()
    con.close()
    third = replicate(source, "duckdb", tmp_path / "rep")
    assert not third.reused and third.manifest.source_hash != first.manifest.source_hash
    assert third.manifest.checksums["loose"].rows == 4


def test_missing_source_is_clear_error(tmp_path):
    missing = SourceDatabase("spider", "wta_1", "sqlite", str(tmp_path / "wta_1.sqlite"), False)
    with pytest.raises(ReplicationError, match="missing"):
        replicate(missing, "duckdb", tmp_path / "rep")
    assert ensure_replicas([missing], "duckdb", tmp_path / "rep") == {}


def test_unknown_target_is_clear_error(source, tmp_path):
    with pytest.raises(ReplicationError, match="no target writer"):
        replicate(source, "oracle", tmp_path / "rep")


def test_typemap_affinity_rules():
    assert typemap.sqlite_affinity("VARCHAR(255)") == "TEXT"
    assert typemap.sqlite_affinity("FLOAT(10,2)") == "REAL"
    assert typemap.sqlite_affinity("DECIMAL(19,4)") == "NUMERIC"
    assert typemap.sqlite_affinity("") == "BLOB"
    assert typemap.sqlite_affinity("POINT INT") == "INTEGER"  # SQLite rule order
    assert typemap.sqlite_logical_type("REAL", set(), None) == ("DOUBLE", None)
    assert typemap.sqlite_logical_type("DATETIME", set(), None) == ("VARCHAR", None)
    lt, why = typemap.sqlite_logical_type("INTEGER", {"integer", "real"}, 2 ** 60)
    assert lt == "VARCHAR" and why  # 2**60 is not exact in a DOUBLE
    assert all(typemap.TARGET_TYPES[e]["DOUBLE"] not in ("REAL", "FLOAT4", "FLOAT")
               for e in typemap.TARGET_TYPES)


def spider_sources():
    if not SPIDER_DB.is_dir():
        return []
    return [SourceDatabase("spider", d.name, "sqlite", str(d / f"{d.name}.sqlite"))
            for d in sorted(SPIDER_DB.iterdir()) if (d / f"{d.name}.sqlite").exists()]


def test_every_spider_database(tmp_path):
    sources = spider_sources()
    if not sources:
        pytest.skip(f"Spider databases not found under {SPIDER_DB}")
    reps = ensure_replicas(sources, "duckdb", tmp_path / "rep", strict=True)
    assert len(reps) == len(sources) >= 19
    writer = get_writer("duckdb")
    for (dataset, db_id), rep in reps.items():
        src = sqlite3.connect(f"file:{next(s.location for s in sources if s.db_id == db_id)}?mode=ro", uri=True)
        src_tables = {n: [r[1] for r in src.execute(f'PRAGMA table_info("{n}")')]
                      for (n,) in src.execute("SELECT name FROM sqlite_master WHERE type='table' "
                                              "AND name NOT LIKE 'sqlite_%'")}
        real_cols = {(n, r[1]) for n in src_tables for r in src.execute(f'PRAGMA table_info("{n}")')
                     if typemap.sqlite_affinity(r[2]) == "REAL"}
        src.close()
        types = writer.column_types(rep.location)
        copy_tables: dict[str, list] = {}
        for (t, c) in types:
            copy_tables.setdefault(t, []).append(c)
        assert set(copy_tables) == set(src_tables), db_id
        for t, cols in src_tables.items():
            assert sorted(copy_tables[t]) == sorted(cols), (db_id, t)
        for key in real_cols:
            assert types[key] in ("DOUBLE", "VARCHAR"), (db_id, key, types[key])
            assert types[key] != "FLOAT"
        assert certificate.diff(rep.manifest.checksums,
                                writer.checksums(rep.location, rep.manifest.tables)) == []
    # second pass reuses every copy
    again = ensure_replicas(sources, "duckdb", tmp_path / "rep", strict=True)
    assert all(r.reused for r in again.values())


def test_duckdb_file_as_source_round_trip(tmp_path):
    """Spider SQLite -> DuckDB file -> DuckDB as the source -> SQLite: every gold query of the
    database gives the same result on the round-trip SQLite copy as on the original."""
    import json

    db = "dog_kennels"
    path = SPIDER_DB / db / f"{db}.sqlite"
    if not path.exists():
        pytest.skip(f"Spider not found at {path}")
    duck = replicate(SourceDatabase("rt", db, "sqlite", str(path)), "duckdb", tmp_path)
    back = replicate(SourceDatabase("rt_duck", db, "duckdb", duck.location), "sqlite", tmp_path)
    assert back.manifest.source_engine == "duckdb"
    cols = {(t.name, c.name): c.logical_type for t in back.manifest.tables for c in t.columns}
    assert cols[("Dogs", "date_of_birth")] == "TIMESTAMP" and cols[("Dogs", "dog_id")] == "INTEGER"
    gold = [e["query"] for e in json.loads((SPIDER_DB.parent / "dev.json").read_text()) if e["db_id"] == db]
    a, b = sqlite3.connect(str(path)), sqlite3.connect(back.location)

    def rows(con, sql):  # DECIMAL(19,4) holding 139 comes back as REAL 139.0: compare numbers
        return sorted(repr(tuple(float(v) if isinstance(v, (int, float)) else v for v in r))
                      for r in con.execute(sql).fetchall())

    try:
        for sql in gold:
            assert rows(a, sql) == rows(b, sql), sql
    finally:
        a.close()
        b.close()
    assert len(gold) > 20
