"""Render a source database's schema as CREATE TABLE statements of the *target* dialect.

The model must see the same schema in every dialect (evaluation-notes.md section 3: a
schema that differs per dialect confounds the dialect gap). So:

* the schema is read once from the SOURCE SQLite database (``PRAGMA table_info`` /
  ``PRAGMA foreign_key_list``) into a dialect-free :class:`SchemaSpec` with the exact
  identifiers;
* each column's *logical* type is chosen exactly as replication chooses it
  (``polysql_ray.replication.typemap.sqlite_logical_type``: declared type affinity plus the
  storage classes really present), so the prompt shows the type the replicated column has;
* each table becomes one canonical sqlglot expression tree (``exp.Create``); a column's type
  node is the replication target type (``typemap.TARGET_TYPES[dialect]``) where replication
  defines one, else :data:`LOGICAL_TO_SQLGLOT`;
* sqlglot renders that one tree per dialect (``DOUBLE`` -> ``DOUBLE PRECISION`` in PostgreSQL,
  ``FLOAT64`` in BigQuery, ``Float64`` in ClickHouse ...). Every identifier is quoted with the
  dialect's quote character, so names are byte-identical across dialects (and PostgreSQL /
  Snowflake case folding cannot change them); PRIMARY KEY and FOREIGN KEY clauses appear in
  every dialect. The DDL is informational (a prompt), not executed: e.g. ClickHouse gets no
  ``ENGINE`` clause and BigQuery keys are shown without ``NOT ENFORCED``.

Sources: SQLite "Datatypes In SQLite" section 3.1 (affinity rules, used for the type map);
PolySQL arXiv 2605.07796 (prompt contains the target-dialect schema).
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp

from polysql_ray.replication import typemap

#: Logical type (replication.typemap) -> canonical sqlglot type, for dialects that
#: replication.typemap.TARGET_TYPES does not cover (sqlite, snowflake, bigquery ...).
LOGICAL_TO_SQLGLOT: dict[str, str] = {
    "BIGINT": "BIGINT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "TEXT",
    "BLOB": "BLOB",
    "DECIMAL": "DECIMAL",
    "BOOLEAN": "BOOLEAN",
    "DATE": "DATE",
    "TIMESTAMP": "TIMESTAMP",
}


@dataclass(frozen=True)
class ColumnSpec:
    """One column as declared in the source database.

    Attributes:
        name: exact identifier.
        declared_type: the source's declared type text (``varchar(20)``, ``REAL``, "").
        not_null: declared NOT NULL.
        pk: 1-based position in the primary key, 0 when not part of it.
        logical_type: replication's logical type (``BIGINT``, ``DOUBLE``, ``VARCHAR``, ``BLOB``
            ...); "" means "from the declared type alone" (all-NULL / unknown values).
        precision / scale: for a ``DECIMAL`` logical type.
    """

    name: str
    declared_type: str = ""
    not_null: bool = False
    pk: int = 0
    logical_type: str = ""
    precision: int | None = None
    scale: int | None = None


@dataclass(frozen=True)
class ForeignKeySpec:
    """A (possibly composite) foreign key.

    Attributes:
        columns: referencing columns of this table, in key order.
        ref_table: referenced table (exact identifier).
        ref_columns: referenced columns, same length as ``columns``.
    """

    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]


@dataclass(frozen=True)
class TableSpec:
    """One table: columns in declaration order and its foreign keys."""

    name: str
    columns: tuple[ColumnSpec, ...]
    foreign_keys: tuple[ForeignKeySpec, ...] = ()

    @property
    def primary_key(self) -> tuple[str, ...]:
        """Primary-key column names in key order (empty when none)."""
        return tuple(c.name for c in sorted((c for c in self.columns if c.pk), key=lambda c: c.pk))


@dataclass(frozen=True)
class SchemaSpec:
    """A dialect-free database schema.

    Attributes:
        tables: tables in the source's creation order.
        sample_rows: optional ``{table: [row tuple, ...]}`` read from the source.
    """

    tables: tuple[TableSpec, ...]
    sample_rows: dict = field(default_factory=dict, compare=False, hash=False)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _logical_type(con: sqlite3.Connection, table: str, column: str, declared: str) -> str:
    """Replication's logical type of one column: declared affinity + stored storage classes."""
    q, qc = _q(table), _q(column)
    classes = {r[0] for r in con.execute(f"SELECT DISTINCT typeof({qc}) FROM {q}") if r[0] != "null"}
    max_abs = None
    if "integer" in classes:
        lo, hi = con.execute(f"SELECT min({qc}), max({qc}) FROM {q} WHERE typeof({qc})='integer'").fetchone()
        max_abs = max(abs(lo), abs(hi))
    return typemap.sqlite_logical_type(declared, classes, max_abs)[0]


def read_sqlite_schema(path: str | Path, sample_rows: int = 0) -> SchemaSpec:
    """Read the schema of a SQLite database file (read-only).

    Args:
        path: the ``.sqlite`` file.
        sample_rows: rows per table to read for the prompt (0: none). Rows come in the
            table's storage order (``SELECT * ... LIMIT n``), deterministic for a given file.

    Returns:
        A :class:`SchemaSpec` with exact identifiers, each column's logical type as
        replication will choose it (one scan per column: cache the result per database), tables in ``sqlite_master`` order
        (internal ``sqlite_%`` tables skipped). A foreign key that names no referenced
        columns refers to the referenced table's primary key.

    Raises:
        FileNotFoundError: when the file does not exist (sqlite3 would create it otherwise).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SQLite database not found: {path}")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        con.text_factory = lambda b: b.decode("utf-8", errors="replace")
        names = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        cols: dict[str, tuple[ColumnSpec, ...]] = {}
        for t in names:
            specs = []
            for r in con.execute(f"PRAGMA table_info({_q(t)})").fetchall():
                specs.append(ColumnSpec(name=r[1], declared_type=r[2] or "", not_null=bool(r[3]),
                                        pk=int(r[5]), logical_type=_logical_type(con, t, r[1], r[2] or "")))
            cols[t] = tuple(specs)
        tables = []
        samples: dict[str, list[tuple]] = {}
        for t in names:
            fk_rows: dict[int, list] = {}
            for r in con.execute(f"PRAGMA foreign_key_list({_q(t)})"):
                # id, seq, table, from, to, on_update, on_delete, match
                fk_rows.setdefault(r[0], []).append(r)
            fks = []
            for _, rows in sorted(fk_rows.items()):
                rows.sort(key=lambda r: r[1])
                ref = rows[0][2]
                to = [r[4] for r in rows]
                if any(x is None for x in to):  # REFERENCES t  -> t's primary key
                    ref_pk = tuple(c.name for c in sorted((c for c in cols.get(ref, ()) if c.pk), key=lambda c: c.pk))
                    to = list(ref_pk) if len(ref_pk) == len(rows) else [r[3] for r in rows]
                fks.append(ForeignKeySpec(tuple(r[3] for r in rows), ref, tuple(to)))
            tables.append(TableSpec(t, cols[t], tuple(fks)))
            if sample_rows > 0:
                samples[t] = con.execute(f"SELECT * FROM {_q(t)} LIMIT ?", (sample_rows,)).fetchall()
        return SchemaSpec(tuple(tables), samples)
    finally:
        con.close()


def column_type(column: ColumnSpec, dialect: str) -> exp.DataType:
    """The type node of one column for ``dialect``.

    The logical type (or, when empty, ``typemap.sqlite_default_logical(declared_type)``)
    becomes the replication target type text of ``dialect`` when
    ``typemap.TARGET_TYPES`` has one (parsed in that dialect, so it renders back the same),
    else the canonical :data:`LOGICAL_TO_SQLGLOT` type that sqlglot renders per dialect.

    Returns:
        A ``sqlglot.exp.DataType``.
    """
    logical = column.logical_type or typemap.sqlite_default_logical(column.declared_type)
    target = typemap.TARGET_TYPES.get(dialect, {}).get(logical)
    if target is not None:
        if logical == "DECIMAL" and column.precision:
            target = f"{target}({column.precision},{column.scale or 0})"
        return exp.DataType.build(target, dialect=dialect)
    text = LOGICAL_TO_SQLGLOT[logical]
    if logical == "DECIMAL" and column.precision:
        text = f"DECIMAL({column.precision},{column.scale or 0})"
    return exp.DataType.build(text)


def table_expression(table: TableSpec, dialect: str) -> exp.Create:
    """The ``CREATE TABLE`` tree of one table; only type nodes depend on ``dialect``.

    Columns keep their exact names and order; NOT NULL, PRIMARY KEY (table constraint, key
    order) and FOREIGN KEY ... REFERENCES clauses are always present when declared.
    """
    items: list[exp.Expression] = []
    for c in table.columns:
        kind = column_type(c, dialect)
        constraints = []
        if c.not_null:
            kind.set("nullable", False)  # ClickHouse: no Nullable(...) wrapper
            constraints.append(exp.ColumnConstraint(kind=exp.NotNullColumnConstraint()))
        items.append(exp.ColumnDef(this=exp.to_identifier(c.name, quoted=True), kind=kind,
                                   constraints=constraints or None))
    if table.primary_key:
        items.append(exp.PrimaryKey(expressions=[exp.to_identifier(n, quoted=True) for n in table.primary_key]))
    for fk in table.foreign_keys:
        items.append(exp.ForeignKey(
            expressions=[exp.to_identifier(n, quoted=True) for n in fk.columns],
            reference=exp.Reference(this=exp.Schema(
                this=exp.Table(this=exp.to_identifier(fk.ref_table, quoted=True)),
                expressions=[exp.to_identifier(n, quoted=True) for n in fk.ref_columns]))))
    return exp.Create(this=exp.Schema(this=exp.Table(this=exp.to_identifier(table.name, quoted=True)),
                                      expressions=items), kind="TABLE")


def render_create_table(table: TableSpec, dialect: str) -> str:
    """``CREATE TABLE`` text of one table in ``dialect`` (a sqlglot dialect name).

    One line per column / key clause, all identifiers quoted with the dialect's quote
    character. The same tree is rendered for every dialect; only the syntax differs.
    """
    create = table_expression(table, dialect)
    schema = create.this
    head = f"CREATE TABLE {schema.this.sql(dialect=dialect, identify=True)} ("
    body = ",\n".join("  " + e.sql(dialect=dialect, identify=True) for e in schema.expressions)
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
        schema: from :func:`read_sqlite_schema`.
        dialect: sqlglot dialect name (``sqlite``, ``duckdb``, ``postgres``, ``mysql``,
            ``clickhouse``, ``snowflake``, ``bigquery`` ...).
        sample_rows: rows per table to show (at most those read into ``schema``); shown
            after each table as a ``/* ... */`` comment with ``|``-separated values.

    Returns:
        The DDL text, tables separated by a blank line.
    """
    parts = []
    for t in schema.tables:
        ddl = render_create_table(t, dialect)
        rows = (schema.sample_rows.get(t.name) or [])[:sample_rows] if sample_rows > 0 else []
        if rows:
            lines = [f"{len(rows)} example rows from {t.name}:", " | ".join(c.name for c in t.columns)]
            lines += [" | ".join(_fmt_value(v) for v in r) for r in rows]
            ddl += "\n/*\n" + "\n".join(lines).replace("*/", "* /") + "\n*/"
        parts.append(ddl)
    return "\n\n".join(parts)
