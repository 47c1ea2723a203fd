"""ClickHouse through chdb (a real ClickHouse in-process): replica folder + certificate, the
connection-level sandbox (hostile SQL -> typed statuses), typed errors, a stock server's
join_use_nulls=0 and a statement's own SETTINGS join_use_nulls = 1, the one-data-path-per-process
design (a second process loads the same replica), Spider replicas."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

pytest.importorskip("chdb")

from polysql_ray.engines import clickhouse as ch  # noqa: E402
from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402
from polysql_ray.engines.registry import engine_fingerprint, make_engine  # noqa: E402
from polysql_ray.replication import ReplicationError, replicate  # noqa: E402
from polysql_ray.replication.base import get_writer  # noqa: E402

from tests.test_replication import SPIDER_DB, make_source  # noqa: E402

LIMITS = Limits(timeout_s=2, row_cap=50)


@pytest.fixture(scope="module")
def replica(tmp_path_factory):
    d = tmp_path_factory.mktemp("ch")
    return replicate(make_source(d / "syn.sqlite"), "clickhouse", d / "replicas")


@pytest.fixture(scope="module")
def engine():
    e = make_engine("clickhouse")
    yield e
    e.close()


def run(engine, replica, sql, limits=LIMITS):
    return engine.execute(replica.location, sql, limits)


def test_replica_verified_and_typed(replica):
    m = replica.manifest
    assert set(m.checksums) == {"Parent Table", "child", "orphaned", "loose"}
    assert m.checksums["child"].rows == 3 and m.checksums["loose"].rows == 3
    types = get_writer("clickhouse").column_types(replica.location)
    assert types[("Parent Table", "Id")] == "Nullable(Int32)"  # declared INTEGER kept; no NOT NULL
    assert types[("Parent Table", "Full Name")] == "String"     # NOT NULL carried
    assert types[("child", "score")] == "Nullable(Float64)"     # REAL is 8 bytes
    assert types[("child", "blobby")] == "Nullable(String)"
    assert any("PRIMARY KEY child(cid)" in s for s in m.dropped_constraints)
    assert any(s.startswith("FOREIGN KEY child(parentId)") for s in m.dropped_constraints)


def test_reuse_and_tamper(replica, tmp_path):
    again = replicate(make_source(tmp_path / "syn.sqlite"), "clickhouse", Path(replica.manifest_path).parents[3])
    assert again.reused
    data = Path(replica.location) / "0.arrow"
    original = data.read_bytes()
    try:
        data.write_bytes(original[:-8] + b"\0" * 8)
        assert get_writer("clickhouse").fingerprint(replica.location) == ""  # tampered -> rebuild
    finally:
        data.write_bytes(original)


def test_values_exact(engine, replica):
    r = run(engine, replica, 'SELECT "Full Name", `weird"quote` FROM `Parent Table` ORDER BY Id')
    assert r.ok, r.error
    assert r.table.column(0).to_pylist() == ["Ann", "Bob Lee", "Çé ü"]
    assert r.table.column(1).to_pylist() == ['a"b', None, "x"]
    r = run(engine, replica, "SELECT score, blobby FROM child ORDER BY cid")
    assert r.table.column(0).to_pylist() == [0.1, 1e300, 3.0]
    # ClickHouse has one String type: BLOB bytes that are valid UTF-8 come back as text ...
    assert r.table.column(1).to_pylist() == ["\x00\x01", None, "x"]
    # ... bytes that are not valid UTF-8 come back as binary, never mis-decoded
    r = run(engine, replica, "SELECT unhex('FF00') AS b")
    assr = r.table.column(0)
    assert r.ok and assr.type == pa.binary() and assr.to_pylist() == [b"\xff\x00"]


LEFT_JOIN = ('SELECT o.oid, p."Full Name", p.Id FROM orphaned AS o LEFT JOIN `Parent Table` AS p '
             'ON o.pid = p.Id ORDER BY o.oid')


def test_stock_server_defaults_and_a_query_sets_join_use_nulls_itself(engine, replica):
    """A stock ClickHouse (join_use_nulls=0) fills the unmatched side with defaults; the
    ClickHouse-correct ``SETTINGS join_use_nulls = 1`` runs under readonly=1 and gives NULLs."""
    r = run(engine, replica, LEFT_JOIN)
    assert r.ok, r.error
    # the NOT NULL name gets String's default ''; the Nullable id stays NULL (its type's default)
    assert [tuple(x.values()) for x in r.table.to_pylist()] == [(1, "Ann", 1), (2, "", None)]
    for clause in ("SETTINGS join_use_nulls = 1", "SETTINGS join_use_nulls = true",
                   "SETTINGS join_use_nulls = 1, transform_null_in = 0"):
        r = run(engine, replica, f"{LEFT_JOIN} {clause}")
        assert r.ok, (clause, r.error)
        assert [tuple(x.values()) for x in r.table.to_pylist()] == [(1, "Ann", 1), (2, None, None)]
    # the session value is per statement: the next statement is a stock server's again
    assert run(engine, replica, LEFT_JOIN).table.column(1).to_pylist() == ["Ann", ""]
    # a sandbox setting next to an allowed one is still refused by readonly=1
    r = run(engine, replica, f"{LEFT_JOIN} SETTINGS join_use_nulls = 1, max_execution_time = 1000")
    assert r.status is S.REJECTED and "readonly" in r.error.lower(), r.error
    assert engine_fingerprint("clickhouse") == "clickhouse:join_use_nulls=0"
    assert engine_fingerprint("clickhouse", {"join_use_nulls": 1}) != engine_fingerprint("clickhouse")
    assert engine.identity()["settings"] == {"join_use_nulls": "0"}
    assert engine_fingerprint("duckdb") == ""  # engines without such settings keep their cell keys


def test_engine_wide_join_use_nulls_still_selectable(replica):
    e = make_engine("clickhouse", join_use_nulls=1)
    try:
        r = run(e, replica, LEFT_JOIN)
        assert r.ok and r.table.column(1).to_pylist() == ["Ann", None]
        assert e.identity()["settings"] == {"join_use_nulls": "1"}
    finally:
        e.close()


@pytest.mark.parametrize("sql,applied", [
    ("SELECT 1 SETTINGS join_use_nulls = 1", {"join_use_nulls": "1"}),
    ("SELECT 1 SETTINGS join_use_nulls = true, max_threads = 4, union_default_mode = 'DISTINCT'",
     {"join_use_nulls": "1", "union_default_mode": "DISTINCT"}),
    ("SELECT * FROM (SELECT 1 SETTINGS join_use_nulls = 1)", {}),   # a subquery's clause: not session-wide
    ("SELECT 'SETTINGS join_use_nulls = 1'", {}),                     # inside a string
    ("SELECT 1 /* SETTINGS join_use_nulls = 1 */", {}),               # inside a comment
    ("SELECT 1 SETTINGS join_use_nulls = 2", {}),                     # not a value the setting takes
    ("SELECT 1 SETTINGS readonly = 0, max_result_rows = 0", {}),      # sandbox settings: never applied
])
def test_query_settings_allowlist(sql, applied):
    assert ch.query_settings(sql) == applied


def test_allowlist_names_are_server_settings():
    """Every allowlisted name is a setting of this chdb (system.settings), so none is ignored."""
    assert ch.process_result_settings() == frozenset(ch.RESULT_SETTINGS)


HOSTILE = [
    ("SELECT * FROM file('/etc/hostname', 'LineAsString')", S.REJECTED),  # table function: readonly
    ("SELECT file('/etc/hostname')", S.REJECTED),                          # scalar: token check
    ("SELECT `file`('/etc/hostname')", S.REJECTED),
    ("SELECT * FROM url('http://127.0.0.1:9/x', 'CSV')", S.REJECTED),
    ("SELECT * FROM s3('http://127.0.0.1:9/bucket/key.csv', 'CSV')", S.REJECTED),
    ("SELECT * FROM executable('cat /etc/passwd', 'LineAsString', 'x String')", S.REJECTED),
    ("SELECT * FROM sqlite('/tmp/x.sqlite', 't')", S.REJECTED),
    ("SELECT * FROM Python(tbl)", S.REJECTED),
    ("SELECT * FROM postgresql('127.0.0.1:5432', 'a', 'b', 'postgres', '')", S.REJECTED),
    ("SELECT * FROM cluster('default', system.one)", S.REJECTED),
    ("SELECT 1 INTO OUTFILE '/tmp/polysql_ch_outfile.txt'", S.REJECTED),
    ("SELECT 1 INTO /* hidden */ OUTFILE '/tmp/polysql_ch_outfile.txt'", S.REJECTED),
    ("INSERT INTO child (cid) VALUES (99)", S.REJECTED),
    ("DROP TABLE child", S.REJECTED),
    ("SELECT 1; DROP TABLE child", S.REJECTED),
    ("SET readonly = 0", S.REJECTED),
    ("SELECT * FROM child SETTINGS readonly = 0", S.REJECTED),
    ("SELECT * FROM child SETTINGS max_execution_time = 1000", S.REJECTED),
    ("SELECT * FROM child SETTINGS join_use_nulls = 1, readonly = 0", S.REJECTED),
    ("SELECT * FROM child SETTINGS join_use_nulls = 1, max_result_rows = 0", S.REJECTED),
    # a subquery's SETTINGS clause is ignored by ClickHouse (not applied, not refused): the limit holds
    ("SELECT count() FROM (SELECT sum(number) FROM numbers(1e13) SETTINGS max_execution_time = 1000) "
     "SETTINGS join_use_nulls = 1", S.TIMEOUT),
    ("SELECT 1 FORMAT JSON", S.REJECTED),
    ("SELECT count() FROM numbers(1e12) AS a, numbers(1e12) AS b", S.TIMEOUT),
    ("SELECT sum(number) FROM numbers(1e13)", S.TIMEOUT),
    ("SELECT number FROM numbers(51)", S.TOO_LARGE),
]


@pytest.mark.parametrize("sql,status", HOSTILE)
def test_sandbox(engine, replica, sql, status):
    r = run(engine, replica, sql)
    assert r.status is status, (r.status, r.error)
    assert not os.path.exists("/tmp/polysql_ch_outfile.txt")
    after = run(engine, replica, "SELECT count() FROM child")
    assert after.ok and after.table.column(0).to_pylist() == [3]


@pytest.mark.parametrize("sql,status", [
    ("SELEC 1", S.SYNTAX),
    ("SELECT nosuch FROM child", S.SCHEMA),
    ("SELECT * FROM nosuch", S.SCHEMA),
    ("SELECT * FROM Child", S.SCHEMA),                 # case-sensitive table names
    ("SELECT CID FROM child", S.SCHEMA),               # case-sensitive column names
    ("SELECT nosuchfunction(1)", S.SYNTAX),
    ("SELECT cid, count() FROM child GROUP BY score", S.SYNTAX),
    ("SELECT avg(`Full Name`) FROM `Parent Table`", S.SYNTAX),   # no overload: as PG 42883
    ("SELECT intDiv(1, 0)", S.RUNTIME),
    ("SELECT toInt64('abc')", S.RUNTIME),
    ("", S.EMPTY),
])
def test_error_typing(engine, replica, sql, status):
    r = run(engine, replica, sql)
    assert r.status is status, (r.status, r.error)


def test_row_cap_boundary(engine, replica):
    assert run(engine, replica, "SELECT number FROM numbers(50)").ok


def test_missing_replica_unavailable(engine, tmp_path):
    r = engine.execute(str(tmp_path / "nope"), "SELECT 1", LIMITS)
    assert r.status is S.UNAVAILABLE


def test_error_table_is_data():
    assert ch.classify_error("Code: 159. DB::Exception: Timeout exceeded") is S.TIMEOUT
    assert ch.classify_error("Code: 999999. unknown") is S.RUNTIME
    assert ch.classify_error("no code at all") is S.RUNTIME


def test_second_process_loads_same_replica(replica):
    """chdb locks its data path per process: another process (an execution actor) loads the
    same replica folder into its own path and gets the same answer."""
    code = ("import sys; from polysql_ray.engines.registry import make_engine; "
            "from polysql_ray.engines.base import Limits; "
            "r = make_engine('clickhouse').execute(sys.argv[1], 'SELECT sum(cid) FROM child', Limits()); "
            "print(r.status.value, r.table.column(0).to_pylist() if r.ok else r.error)")
    out = subprocess.run([sys.executable, "-c", code, replica.location], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
                         timeout=300)
    assert out.stdout.strip() == "ok [33]", out.stderr[-2000:]


def test_certificate_catches_a_bad_load(tmp_path, monkeypatch):
    """A loader that silently loses a row must fail verification (the check can fail)."""
    src = make_source(tmp_path / "syn.sqlite")
    real, loaded = ch.load_replica, []

    def lossy(location, spec=None):
        spec = spec or ch.read_replica_spec(location)
        ch.drop_loaded("r_" + spec["content_id"][:24])  # load afresh, then lose rows
        db = real(location, spec)
        loaded.append(db)
        ch._loader().query(f"ALTER TABLE {ch.quote(db)}.`loose` DELETE WHERE r IS NULL "
                           f"SETTINGS mutations_sync = 1")
        return db

    monkeypatch.setattr(ch, "load_replica", lossy)
    try:
        with pytest.raises(ReplicationError, match="loose"):
            replicate(src, "clickhouse", tmp_path / "replicas")
    finally:
        for db in loaded:
            ch.drop_loaded(db)  # later tests reload the intact copy


@pytest.mark.skipif(not SPIDER_DB.is_dir(), reason="Spider data not present")
def test_spider_dbs_replicate_and_verify(tmp_path):
    from polysql_ray.datasets.example import SourceDatabase

    names = sorted(p.name for p in SPIDER_DB.iterdir() if (p / f"{p.name}.sqlite").exists())[:12]
    for db in names:
        rep = replicate(SourceDatabase("spider", db, "sqlite", str(SPIDER_DB / db / f"{db}.sqlite")),
                        "clickhouse", tmp_path)
        assert rep.manifest.checksums


def test_clickhouse_types_compare_under_the_shared_policy(engine, replica):
    """Decimal, Date32, DateTime64 (UTC), UInt64 counts and Nullable from ClickHouse meet the
    values SQLite returns for the same question under the default comparison policy."""
    import sqlite3

    from polysql_ray.comparison import ComparisonPolicy, analyze_gold, compare

    gold_sql = ("SELECT 3 AS n, 1.5 AS d, '2020-01-02' AS day, '2020-01-02 03:04:05' AS ts, NULL AS x")
    con = sqlite3.connect(":memory:")
    row = con.execute(gold_sql).fetchone()
    gold = pa.table({f"c{i}": pa.array([v]) for i, v in enumerate(row)})
    r = run(engine, replica, "SELECT count() AS n, toDecimal64(1.5, 3) AS d, toDate32('2020-01-02') AS day, "
                             "toDateTime64('2020-01-02 03:04:05', 6) AS ts, CAST(NULL AS Nullable(Int64)) AS x "
                             "FROM (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3)")
    assert r.ok, r.error
    assert str(r.table.schema.field("n").type) == "uint64"
    assert pa.types.is_decimal(r.table.schema.field("d").type)
    res = compare(gold, r.table, analyze_gold(gold_sql, "sqlite"), ComparisonPolicy())
    assert res.match, res


def test_orphaned_data_paths_are_removed(tmp_path):
    """A data path whose process died (no exit hook ran) is deleted; a live one is kept."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    orphan = tmp_path / f"polysql-chdb-{dead}-abc"
    live = tmp_path / f"polysql-chdb-{os.getpid()}-def"
    orphan.mkdir()
    live.mkdir()
    assert ch.remove_orphaned_paths(str(tmp_path)) == [str(orphan)]
    assert not orphan.exists() and live.exists()


def test_left_join_verdict_both_directions(tmp_path):
    """Dual execution against a SQLite gold: on a stock ClickHouse the unmatched side is ''/0, so
    the plain LEFT JOIN fails against the gold's NULLs; the ClickHouse-correct fix
    ``SETTINGS join_use_nulls = 1`` passes (issue 20, item 1)."""
    import sqlite3

    from polysql_ray.comparison.equivalence import score_sql

    db = tmp_path / "shop.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
    con.execute("CREATE TABLE orders (oid INTEGER PRIMARY KEY, cid INTEGER NOT NULL, amount INTEGER NOT NULL, "
                "note TEXT NOT NULL)")
    con.executemany("INSERT INTO customer VALUES (?, ?)", [(1, "Ann"), (2, "Bob"), (3, "Cid")])
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", [(10, 1, 5, "x"), (11, 3, 7, "y")])
    con.commit()
    con.close()
    gold = ("SELECT c.name, o.amount, o.note FROM customer AS c LEFT JOIN orders AS o ON o.cid = c.id "
            "ORDER BY c.id")
    kw = dict(database=str(db), dialect="clickhouse", replicas_dir=str(tmp_path / "replicas"), dataset="ch_join")
    plain = score_sql(gold, gold, **kw)
    assert (plain.verdict, plain.reason) == ("fail", "values"), plain.explanation
    fixed = score_sql(gold, gold + " SETTINGS join_use_nulls = 1", **kw)
    assert fixed.passed, (fixed.verdict, fixed.reason, fixed.explanation)


def test_a_config_xml_in_the_current_directory_is_not_read(tmp_path):
    """chdb, like clickhouse-local, reads ./config.xml when it starts; a worker started in a
    folder holding one ran under that server config. The engine's connections name their own
    empty config (``config-file``), so the folder's file changes nothing (here: displayName)."""
    (tmp_path / "config.xml").write_text("<clickhouse><display_name>from-cwd-config</display_name></clickhouse>")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from polysql_ray.engines import clickhouse as ch; "
            "con = ch._loader(); print(con.query('SELECT displayName()', 'TSV').bytes().decode().strip())")
    out = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parents[1])], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and out.stdout.strip() != "from-cwd-config"
    # the same connection without the engine's config file does read it (the test can fail)
    code_raw = ("import chdb, sys; con = chdb.connect('file:' + sys.argv[1]); "
                "print(con.query('SELECT displayName()', 'TSV').bytes().decode().strip())")
    raw = subprocess.run([sys.executable, "-c", code_raw, str(tmp_path / "data")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert raw.stdout.strip() == "from-cwd-config", raw.stderr
