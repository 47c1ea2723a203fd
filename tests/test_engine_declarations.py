"""Engines are declared, not listed: every registered engine declares every required fact,
and a new engine declared in this module registers without any edit to the registry."""
from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import pytest

from polysql_ray.engines import declaration, registry
from polysql_ray.engines.base import ExecStatus, Limits
from polysql_ray.engines.declaration import REQUIRED_FACTS, EngineDeclaration
from polysql_ray.engines.sqlite import SqliteEngine

REPO = Path(__file__).resolve().parents[1]
SEVEN = {"sqlite", "duckdb", "postgres", "mysql", "clickhouse", "snowflake", "bigquery"}
LOGICAL = {"INTEGER", "SMALLINT", "BIGINT", "DOUBLE", "VARCHAR", "BLOB", "DECIMAL", "BOOLEAN", "DATE",
           "TIMESTAMP"}


def test_the_seven_engines_are_found_by_declaration():
    assert SEVEN <= set(registry.declared_engines())
    assert "sqlite" not in (REPO / "polysql_ray/engines/registry.py").read_text()


@pytest.mark.parametrize("name", sorted(SEVEN))
def test_every_engine_declares_every_fact(name):
    cls = registry.engine_class(name)
    assert cls.missing_facts() == [], f"{name} leaves undeclared: {cls.missing_facts()}"
    assert set(REQUIRED_FACTS) >= {"identifiers", "structural", "error_table", "connection"}
    assert cls.error_table and all(isinstance(s, ExecStatus) for s in dict(cls.error_table).values())
    assert cls.type_map is None or set(cls.type_map) == LOGICAL
    if cls.prompt_rules is not None:
        assert (REPO / "polysql_ray/generation/dialect_rules" / cls.prompt_rules).is_file()
    if cls.structural.keywords is not None:
        assert (REPO / "polysql_ray/comparison/keywords" / cls.structural.keywords).is_file()
    for ref in (cls.writer, cls.reader):
        if ref is not None:
            module, _, klass = ref.partition(":")
            assert klass and importlib.util.find_spec(module) is not None, ref
    assert cls.connection.kind in ("per-location", "per-limits", "pool", "client")


def test_an_incomplete_declaration_names_what_it_lacks():
    class Half(EngineDeclaration):  # no name: not registered
        embedded = True

    assert {"name", "identifiers", "structural", "error_table"} <= set(Half.missing_facts())
    assert "Half" not in {c.__name__ for c in registry.declared_engines().values()}


@pytest.fixture
def tiny_engine():
    """A throw-away engine over SQLite, declared here: nothing else is edited."""

    class TinySqlite(SqliteEngine):
        name = "tiny_sqlite"
        dialect = "sqlite"
        aliases = ("tiny",)
        settings = {"progress_steps": 500}
        semantic_settings = ("progress_steps",)

    yield TinySqlite
    declaration.unregister("tiny_sqlite")


def test_a_new_engine_registers_by_declaration(tiny_engine, tmp_path):
    from polysql_ray.engines.identifiers import IDENTIFIER_RULES
    from polysql_ray.replication.base import WRITERS

    assert registry.engine_class("tiny_sqlite") is tiny_engine
    assert registry.engine_for_dialect("tiny") == "tiny_sqlite"
    assert registry.engine_for_dialect("tiny_sqlite") == "tiny_sqlite"
    assert registry.engine_for_dialect("sqlite") == "sqlite"  # the shared sqlglot dialect keeps its engine
    assert registry.default_dialect("tiny_sqlite") == "sqlite"
    assert registry.engine_spec("tiny_sqlite").embedded
    assert registry.engine_fingerprint("tiny_sqlite") == "tiny_sqlite:progress_steps=500"
    assert IDENTIFIER_RULES["tiny_sqlite"] is SqliteEngine.identifiers
    assert WRITERS["tiny_sqlite"] == WRITERS["sqlite"]
    assert registry.SEMANTICS["tiny_sqlite"] == registry.SEMANTICS["sqlite"]
    db = tmp_path / "t.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (a INTEGER)")
    con.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)])
    con.commit()
    con.close()
    eng = registry.make_engine("tiny_sqlite")
    assert eng.progress_steps == 500
    res = eng.execute(str(db), "SELECT sum(a) FROM t", Limits())
    assert res.ok and res.table.column(0).to_pylist() == [3]
    assert eng.execute(str(db), "DELETE FROM t", Limits()).status is ExecStatus.REJECTED
    eng.close()


def test_unregistered_engine_is_gone(tiny_engine):
    declaration.unregister("tiny_sqlite")
    with pytest.raises(KeyError, match="unknown engine 'tiny_sqlite'"):
        registry.engine_class("tiny_sqlite")
    with pytest.raises(KeyError):
        registry.engine_for_dialect("tiny")


def test_a_name_taken_by_another_class_is_refused():
    with pytest.raises(ValueError, match="declared twice"):
        class Impostor(SqliteEngine):  # noqa: F841
            name = "duckdb"
    assert registry.engine_class("duckdb").__name__ == "DuckDBEngine"
