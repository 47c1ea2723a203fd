"""Prompts, dialect rules and target-dialect schema DDL (issue 4)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.generation import prompts
from polysql_ray.generation.prompts import (EXAMPLE_SCHEMA, INSTRUCTION_LEVELS, InstructionLevel,
                                            available_dialects, load_dialect_rules, prompt_for,
                                            render_all, render_prompt)
from polysql_ray.generation.schema_ddl import read_sqlite_schema, render_create_table, render_schema

DIALECTS = ("sqlite", "duckdb", "postgres", "mysql", "clickhouse", "snowflake", "bigquery")
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def toy_db(tmp_path):
    db = tmp_path / "toy.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE "Stadium" ("Stadium_ID" INTEGER PRIMARY KEY, "Name" VARCHAR(20) NOT NULL,
                                "Avg Score" REAL, "order" TEXT);
        CREATE TABLE concert ("concert_ID" INT, "Stadium_ID" INT, "Year" TEXT, "Price" NUMERIC,
                              PRIMARY KEY ("concert_ID", "Year"),
                              FOREIGN KEY ("Stadium_ID") REFERENCES "Stadium");
        INSERT INTO "Stadium" VALUES (1, 'Park', 2.5, 'a'), (2, 'Field', NULL, 'b');
        INSERT INTO concert VALUES (1, 1, '2014', 10), (2, 2, '2015', 12.5);
    """)
    con.commit()
    con.close()
    return db


def example_on(db, evidence=""):
    src = SourceDatabase("toy", "toy", "sqlite", str(db))
    return Example("toy", "q1", "toy", "How many concerts per stadium?", evidence,
                   "SELECT 1", "sqlite", "sqlite", src)


def structure(ddl: str, dialect: str):
    """(table, [columns], pk, fks) per CREATE TABLE, as parsed back by sqlglot in ``dialect``."""
    out = []
    for stmt in sqlglot.parse(ddl, read=dialect):
        schema = stmt.this
        cols = [e.this.name for e in schema.expressions if isinstance(e, exp.ColumnDef)]
        pk = [tuple(i.name for i in e.expressions) for e in schema.expressions if isinstance(e, exp.PrimaryKey)]
        fks = [(tuple(i.name for i in e.expressions), e.args["reference"].this.this.name,
                tuple(i.name for i in e.args["reference"].this.expressions))
               for e in schema.expressions if isinstance(e, exp.ForeignKey)]
        out.append((schema.this.name, cols, pk, fks))
    return out


def test_instruction_levels():
    assert INSTRUCTION_LEVELS == ("11", "12", "13", "21", "22", "23")
    assert str(InstructionLevel.parse("23")) == "23"
    for bad in ("", "1", "31", "14", "123", "ab"):
        with pytest.raises(ValueError):
            InstructionLevel.parse(bad)


def test_rules_files_cover_every_dialect_and_topic():
    assert set(DIALECTS) <= set(available_dialects())
    for d in DIALECTS:
        r = load_dialect_rules(d)
        topics = [t for t, _ in r.rules]
        for need in ("quoting", "casts", "dates", "concatenation", "limit", "case_sensitivity",
                     "integer_division"):
            assert need in topics, (d, need)
        # the worked example is valid SQL of its own dialect
        assert sqlglot.parse_one(r.example_sql, read=d).find(exp.Select) is not None
    with pytest.raises(ValueError, match="no dialect rules"):
        load_dialect_rules("oracle")


@pytest.mark.parametrize("dialect", ["sqlite", "duckdb"])
def test_worked_example_runs_on_its_engine(dialect):
    ddl = render_schema(EXAMPLE_SCHEMA, dialect)
    sql = load_dialect_rules(dialect).example_sql
    rows = [(1, "Ada", "Lovelace", "2020-05-01", 1), (2, "Alan", "Turing", "2021-03-02", 1)]
    if dialect == "sqlite":
        con = sqlite3.connect(":memory:")
        con.executescript(ddl)
        con.execute("INSERT INTO departments VALUES (1, 'R&D')")
        con.executemany("INSERT INTO employees VALUES (?,?,?,?,?)", rows)
    else:
        con = duckdb.connect()
        for stmt in ddl.split(";"):
            if stmt.strip():
                con.execute(stmt)
        con.execute("INSERT INTO departments VALUES (1, 'R&D')")
        con.executemany("INSERT INTO employees VALUES (?,?,?,?,?)", rows)
    got = con.execute(sql).fetchall()
    assert [r[0] for r in got] == ["Alan Turing", "Ada Lovelace"]


def _fold(shape):
    low = lambda xs: tuple(x.lower() for x in xs)  # noqa: E731
    return [(t.lower(), list(low(cs)), [low(p) for p in pk], [(low(a), b.lower(), low(c)) for a, b, c in fk])
            for t, cs, pk, fks in shape for fk in [fks]]


def test_schema_shows_the_replica_names_in_every_dialect(toy_db):
    """Same tables, columns and keys in every dialect; names as each replica stores them:
    PostgreSQL/Snowflake fold case, so a name the SQLite source resolves in any case is shown
    folded and unquoted there; names that need quotes (spaces, reserved words) stay exact."""
    schema = read_sqlite_schema(toy_db)
    shapes = {d: structure(render_schema(schema, d), d) for d in DIALECTS}
    ref = shapes["sqlite"]
    assert ref[0] == ("Stadium", ["Stadium_ID", "Name", "Avg Score", "order"], [("Stadium_ID",)], [])
    # FK without referenced columns resolves to the referenced table's primary key
    assert ref[1] == ("concert", ["concert_ID", "Stadium_ID", "Year", "Price"], [("concert_ID", "Year")],
                      [(("Stadium_ID",), "Stadium", ("Stadium_ID",))])
    for d in ("duckdb", "mysql", "clickhouse", "bigquery"):
        assert shapes[d] == ref, d
    assert shapes["postgres"][0] == ("stadium", ["stadium_id", "name", "Avg Score", "order"], [("stadium_id",)], [])
    assert shapes["snowflake"][0][0] == "STADIUM"
    for d, shape in shapes.items():
        assert _fold(shape) == _fold(ref), d
    pg = render_schema(schema, "postgres")
    assert "CREATE TABLE stadium (" in pg and '"Avg Score" DOUBLE PRECISION' in pg and '"order" TEXT' in pg
    duck = render_schema(schema, "duckdb")
    assert "CREATE TABLE Stadium (" in duck and "  Stadium_ID INT," in duck and '"order"' in duck
    assert "`Avg Score`" in render_schema(schema, "mysql")


def test_types_follow_the_target_dialect(toy_db):
    t = read_sqlite_schema(toy_db).tables[0]
    col = {d: render_create_table(t, d).splitlines()[3] for d in DIALECTS}  # "Avg Score" REAL
    assert col["postgres"].endswith("DOUBLE PRECISION,")
    assert col["duckdb"].endswith("DOUBLE,") and col["mysql"].endswith("DOUBLE,")
    assert col["clickhouse"].endswith("Float64,") and col["bigquery"].endswith("FLOAT64,")
    assert "`Avg Score`" in col["mysql"] and '"Avg Score"' in col["postgres"]
    assert "name VARCHAR(20) NOT NULL" in render_create_table(t, "postgres")  # declared length kept
    not_null = render_create_table(t, "clickhouse").splitlines()[2]
    assert "NOT NULL" in not_null and "Nullable" not in not_null


def test_prompt_sections_by_level(toy_db):
    ex = example_on(toy_db)
    p11, p12, p13 = (render_prompt(ex, "postgres", lvl, read_sqlite_schema(toy_db)) for lvl in ("11", "12", "13"))
    p21 = render_prompt(ex, "postgres", "21", read_sqlite_schema(toy_db))
    user = lambda p: p.messages[-1]["content"]  # noqa: E731
    assert "rules to follow" not in user(p11) and "Worked example" not in user(p11)
    assert "rules to follow" in user(p12) and "Worked example" not in user(p12)
    assert "rules to follow" in user(p13) and "Worked example" in user(p13)
    assert "ILIKE" in user(p12)  # a PostgreSQL rule
    assert "step by step" in user(p21) and "step by step" not in user(p11)
    assert 'CREATE TABLE concert' in user(p11) and ex.question in user(p11)
    assert p11.messages[0]["role"] == "system" and "PostgreSQL" in p11.messages[0]["content"]
    assert len({p.sha256 for p in (p11, p12, p13, p21)}) == 4
    assert p11.text.startswith(p11.messages[0]["content"]) and p11.text.endswith(user(p11))


def test_evidence_and_sample_rows(toy_db):
    schema = read_sqlite_schema(toy_db, sample_rows=2)
    with_ev = render_prompt(example_on(toy_db, "Price is in dollars"), "mysql", "11", schema, sample_rows=2)
    without = render_prompt(example_on(toy_db), "mysql", "11", schema)
    assert "Evidence: Price is in dollars" in with_ev.text and "Evidence" not in without.text
    assert "2 example rows from Stadium" in with_ev.text and "Park" in with_ev.text
    assert "example rows" not in without.text


def test_hash_is_stable_and_versioned(toy_db, monkeypatch):
    ex = example_on(toy_db)
    a = prompt_for(ex, "duckdb", "22")
    assert a.sha256 == prompt_for(ex, "duckdb", "22").sha256
    assert a.sha256 != prompt_for(ex, "sqlite", "22").sha256
    monkeypatch.setattr(prompts, "TEMPLATE_VERSION", "999")
    assert prompt_for(ex, "duckdb", "22").sha256 != a.sha256


def test_render_all_reports_missing_database(toy_db, tmp_path):
    good = example_on(toy_db)
    missing = Example("toy", "q2", "gone", "?", "", "SELECT 1", "sqlite", "sqlite",
                      SourceDatabase("toy", "gone", "sqlite", str(tmp_path / "nope.sqlite")))
    ps, errors = render_all([good, missing], "sqlite", "11")
    assert ps[0] is not None and ps[1] is None and "nope.sqlite" in errors[1]
    with pytest.raises(ValueError):
        render_all([good], "oracle", "11")


def test_real_spider_schema_keys():
    db = SHARED / "spider" / "database" / "concert_singer" / "concert_singer.sqlite"
    if not db.is_file():
        pytest.skip(f"shared Spider data not found at {db}")
    schema = read_sqlite_schema(db)
    sic = next(t for t in schema.tables if t.name == "singer_in_concert")
    assert sic.primary_key == ("concert_ID", "Singer_ID")
    assert {fk.ref_table for fk in sic.foreign_keys} == {"singer", "concert"}
    pg = render_schema(schema, "postgres")
    assert 'song_release_year TEXT' in pg and 'PRIMARY KEY (concert_id, singer_id)' in pg


@pytest.mark.servers
@pytest.mark.parametrize("dialect", ["postgres", "mysql"])
def test_worked_example_runs_on_server(dialect):
    """The PostgreSQL / MySQL worked examples run on the local servers (skipped when down)."""
    ddl = [s for s in render_schema(EXAMPLE_SCHEMA, dialect).split(";") if s.strip()]
    sql = load_dialect_rules(dialect).example_sql
    rows = [(1, "Ada", "Lovelace", "2020-05-01", 1), (2, "Alan", "Turing", "2021-03-02", 1)]
    if dialect == "postgres":
        psycopg = pytest.importorskip("psycopg")
        try:
            con = psycopg.connect("host=127.0.0.1 port=5432 user=postgres dbname=postgres", connect_timeout=3)
        except psycopg.Error as e:
            pytest.skip(f"PostgreSQL at 127.0.0.1:5432 unavailable: {e}")
        try:
            with con.cursor() as cur:  # one transaction, rolled back: nothing persists
                cur.execute("CREATE SCHEMA polysql_prompt_test; SET search_path TO polysql_prompt_test")
                for stmt in ddl:
                    cur.execute(stmt)
                cur.execute("INSERT INTO departments VALUES (1, 'R&D')")
                cur.executemany("INSERT INTO employees VALUES (%s,%s,%s,%s,%s)", rows)
                cur.execute(sql)
                got = cur.fetchall()
        finally:
            con.rollback()
            con.close()
    else:
        pymysql = pytest.importorskip("pymysql")
        try:
            con = pymysql.connect(host="127.0.0.1", port=3306, user="root", password="", connect_timeout=3)
        except pymysql.Error as e:
            pytest.skip(f"MariaDB at 127.0.0.1:3306 unavailable: {e}")
        name = f"polysql_prompt_test_{__import__('os').getpid()}"
        try:
            with con.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{name}`")
                cur.execute(f"USE `{name}`")
                for stmt in ddl:
                    cur.execute(stmt)
                cur.execute("INSERT INTO departments VALUES (1, 'R&D')")
                cur.executemany("INSERT INTO employees VALUES (%s,%s,%s,%s,%s)", rows)
                cur.execute(sql)
                got = cur.fetchall()
        finally:
            with con.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            con.close()
    assert [r[0] for r in got] == ["Alan Turing", "Ada Lovelace"]
