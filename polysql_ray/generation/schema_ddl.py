"""Render a source database's schema as the CREATE TABLE statements of each target's replica.

The model must see the schema its SQL will run on (evaluation-notes.md section 3): the names
the replica really has and the types it really has. So:

* the schema is read once per source by that engine's replication reader
  (``replication.base.get_reader(engine).read_schema``: SQLite, MySQL ...), into the one
  schema model the project has (``replication.base.TableSpec`` / ``ColumnSpec``: exact names,
  declared and logical types, keys);
* each name becomes the name the target's replica stores
  (``engines.identifiers.replica_name_for``: folded to lower case for PostgreSQL when the
  source resolves it case-insensitively) and is written *unquoted wherever an unquoted
  reference resolves* (quoted only for non-regular names, reserved words, or a case the target
  would fold away), so the schema text is the same across dialects wherever they allow it;
* each column's type is the replica's type: ``typemap.target_type`` where replication defines
  the target (DuckDB, PostgreSQL, MySQL, ClickHouse), else :data:`LOGICAL_TO_SQLGLOT`
  rendered by sqlglot (``DOUBLE`` -> ``FLOAT64`` in BigQuery ...); declared types are kept
  where replication keeps them (``replication.types: declared``);
* PRIMARY KEY and FOREIGN KEY clauses appear in every dialect (informational DDL, never run:
  ClickHouse gets no ``ENGINE`` clause, BigQuery keys are shown without ``NOT ENFORCED``).

Sources: PolySQL arXiv 2605.07796 (prompt contains the target-dialect schema); the engines'
identifier rules in ``engines/identifiers.py``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines.identifiers import IDENTIFIER_RULES, replica_name_for
from polysql_ray.replication import typemap
from polysql_ray.replication.base import ColumnSpec, ForeignKeySpec, TableSpec, get_reader

__all__ = ["ColumnSpec", "ForeignKeySpec", "TableSpec", "SchemaSpec", "read_schema",
           "read_sqlite_schema", "render_create_table", "render_schema", "column_type"]

#: Logical type (replication.typemap) -> canonical sqlglot type, for dialects that
#: replication.typemap.TARGET_TYPES does not cover (sqlite, snowflake, bigquery ...).
LOGICAL_TO_SQLGLOT: dict[str, str] = {
    "BIGINT": "BIGINT",
    "INTEGER": "INT",
    "SMALLINT": "SMALLINT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "TEXT",
    "BLOB": "BLOB",
    "DECIMAL": "DECIMAL",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
}


@dataclass(frozen=True)
class SchemaSpec:
    """A source database's schema (the replication model) plus optional sample rows.

    Attributes:
        tables: ``replication.base.TableSpec`` in the source's order (treat as read-only).
        source_engine: the engine the schema was read from (decides name resolution).
        sample_rows: optional ``{table: [row tuple, ...]}`` read from the source.
    """

    tables: tuple[TableSpec, ...]
    source_engine: str = "sqlite"
    sample_rows: dict = field(default_factory=dict, compare=False, hash=False)


def read_schema(source: SourceDatabase, sample_rows: int = 0, types: str = "declared",
                settings: dict | None = None) -> SchemaSpec:
    """Read a source database's schema with its engine's replication reader.

    Args:
        source: the source database (any engine with a reader in ``replication.base.READERS``).
        sample_rows: rows per table to read for the prompt (0: none), in storage order.
        types: ``declared`` or ``storage`` (as ``replication.types``).
        settings: connection settings of a server source.

    Raises:
        ReplicationError: the source is missing or unreadable (or has no reader).
    """
    reader = get_reader(source.engine, settings)
    tables, _ = reader.read_schema(source, types=types)
    samples: dict[str, list[tuple]] = {}
    if sample_rows > 0:
        for t in tables:
            batch = next(iter(reader.batches(source, t, batch_rows=sample_rows)), None)
            rows = list(zip(*[c.to_pylist() for c in batch.columns])) if batch is not None else []
            samples[t.name] = rows[:sample_rows]
    return SchemaSpec(tuple(tables), source.engine, samples)


def read_sqlite_schema(path: str | Path, sample_rows: int = 0, types: str = "declared") -> SchemaSpec:
    """:func:`read_schema` of one SQLite file (read-only).

    Raises:
        FileNotFoundError: when the file does not exist (sqlite3 would create it otherwise).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    return read_schema(SourceDatabase("-", path.stem, "sqlite", str(path)), sample_rows, types)


def _namer(schema: SchemaSpec, dialect: str):
    """``(name, kind, siblings) -> identifier node`` with the replica's name, quoted only when
    an unquoted reference would not resolve to it in ``dialect``."""
    rules = IDENTIFIER_RULES.get(dialect)

    def ident(name: str, kind: str, siblings: list[str]) -> exp.Identifier:
        stored = name
        if rules is not None and schema.source_engine in IDENTIFIER_RULES:
            stored, _ = replica_name_for(name, kind, schema.source_engine, dialect, siblings)
        plain = exp.to_identifier(stored).sql(dialect=dialect)
        quoted = (rules.needs_quotes(stored) if rules is not None else True) or plain != stored
        return exp.to_identifier(stored, quoted=quoted)

    return ident


def column_type(column: ColumnSpec, dialect: str) -> exp.DataType:
    """The type node of one column for ``dialect``: the replica's type text where replication
    defines the target (``typemap.target_type``, parsed in that dialect so it renders back the
    same), else the canonical :data:`LOGICAL_TO_SQLGLOT` type that sqlglot renders per dialect."""
    logical = column.logical_type or typemap.sqlite_default_logical(column.declared_type)
    if logical in typemap.TARGET_TYPES.get(dialect, {}):
        spec = column if column.logical_type else ColumnSpec(column.name, column.declared_type, logical)
        return exp.DataType.build(typemap.target_type(dialect, spec), dialect=dialect)
    text = LOGICAL_TO_SQLGLOT[logical]
    if logical == "DECIMAL" and column.precision:
        text = f"DECIMAL({column.precision},{column.scale or 0})"
    elif logical == "VARCHAR" and column.length:
        text = f"VARCHAR({column.length})"
    return exp.DataType.build(text)


def _resolved_fk(table: TableSpec, fk: ForeignKeySpec, by_name: dict[str, TableSpec]):
    """(child columns, parent table, parent columns) as the source resolves them."""
    from polysql_ray.replication.constraints import resolve_foreign_key

    _, parent, pcols, ccols, problem = resolve_foreign_key(table, fk, by_name)
    if problem or parent is None:
        return list(fk.columns), fk.ref_table, list(fk.ref_columns or fk.columns)
    return ccols, parent, pcols


def table_expression(table: TableSpec, dialect: str, schema: SchemaSpec | None = None) -> exp.Create:
    """The ``CREATE TABLE`` tree of one table as ``dialect``'s replica has it.

    Columns keep their order; NOT NULL, PRIMARY KEY (table constraint, key order) and
    FOREIGN KEY ... REFERENCES clauses are always present when declared.
    """
    schema = schema or SchemaSpec((table,))
    ident = _namer(schema, dialect)
    by_name = {t.name: t for t in schema.tables}
    table_names = [t.name for t in schema.tables]

    def col(t: TableSpec, name: str) -> exp.Identifier:
        real = next((c.name for c in t.columns if c.name.lower() == name.lower()), name)
        return ident(real, "column", [c.name for c in t.columns])

    items: list[exp.Expression] = []
    for c in table.columns:
        kind = column_type(c, dialect)
        constraints = []
        if c.not_null:
            kind.set("nullable", False)  # ClickHouse: no Nullable(...) wrapper
            constraints.append(exp.ColumnConstraint(kind=exp.NotNullColumnConstraint()))
        items.append(exp.ColumnDef(this=col(table, c.name), kind=kind, constraints=constraints or None))
    if table.primary_key:
        items.append(exp.PrimaryKey(expressions=[col(table, n) for n in table.primary_key]))
    for fk in table.foreign_keys:
        ccols, parent, pcols = _resolved_fk(table, fk, by_name)
        ptable = by_name.get(parent)
        items.append(exp.ForeignKey(
            expressions=[col(table, n) for n in ccols],
            reference=exp.Reference(this=exp.Schema(
                this=exp.Table(this=ident(parent, "table", table_names)),
                expressions=[col(ptable, n) if ptable else ident(n, "column", [n]) for n in pcols]))))
    return exp.Create(this=exp.Schema(this=exp.Table(this=ident(table.name, "table", table_names)),
                                      expressions=items), kind="TABLE")


def render_create_table(table: TableSpec, dialect: str, schema: SchemaSpec | None = None) -> str:
    """``CREATE TABLE`` text of one table in ``dialect`` (a sqlglot dialect name).

    One line per column / key clause; names as the replica stores them, quoted only where an
    unquoted reference would not resolve (see module doc).
    """
    create = table_expression(table, dialect, schema)
    sch = create.this
    head = f"CREATE TABLE {sch.this.sql(dialect=dialect)} ("
    body = ",\n".join("  " + e.sql(dialect=dialect) for e in sch.expressions)
    return f"{head}\n{body}\n);"


def _fmt_value(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bytes):
        return f"<{len(v)} bytes>"
    s = str(v)
    return s if len(s) <= 60 else s[:57] + "..."


def render_schema(schema: SchemaSpec, dialect: str, sample_rows: int = 0) -> str:
    """The whole schema as target-dialect DDL, optionally with sample rows.

    Args:
        schema: from :func:`read_schema` / :func:`read_sqlite_schema`.
        dialect: sqlglot dialect name (``sqlite``, ``duckdb``, ``postgres``, ``mysql``,
            ``clickhouse``, ``snowflake``, ``bigquery`` ...).
        sample_rows: rows per table to show (at most those read into ``schema``); shown
            after each table as a ``/* ... */`` comment with ``|``-separated values.

    Returns:
        The DDL text, tables separated by a blank line.
    """
    parts = []
    for t in schema.tables:
        ddl = render_create_table(t, dialect, schema)
        rows = (schema.sample_rows.get(t.name) or [])[:sample_rows] if sample_rows > 0 else []
        if rows:
            lines = [f"{len(rows)} example rows from {t.name}:", " | ".join(c.name for c in t.columns)]
            lines += [" | ".join(_fmt_value(v) for v in r) for r in rows]
            ddl += "\n/*\n" + "\n".join(lines).replace("*/", "* /") + "\n*/"
        parts.append(ddl)
    return "\n\n".join(parts)
