"""DuckDB *source* reader: replicate a ``.duckdb`` file (schema ``main``) to any target.

Typed source: the logical type comes from the declared type (:data:`DUCKDB_LOGICAL`, as data;
``information_schema.columns.data_type``); anything else (HUGEINT, INTERVAL, LIST, STRUCT,
TIMESTAMP WITH TIME ZONE ...) is carried as DuckDB's ``CAST(... AS VARCHAR)`` text and recorded
as widened. Keys from ``duckdb_constraints()``. Names resolve case-insensitively in DuckDB
(``engines.identifiers``), so a PostgreSQL target stores them folded. The file is opened
read-only; content hash: sha256 of the file.
"""
from __future__ import annotations

import re
from typing import Iterator

import pyarrow as pa

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication.base import (
    ColumnSpec, ForeignKeySpec, ReplicationError, TableChecksum, TableSpec, file_sha256,
)
from polysql_ray.replication.certificate import checksum_cursor
from polysql_ray.replication.sqlite_reader import quote_ident as q

#: DuckDB type name (without parameters) -> logical type.
DUCKDB_LOGICAL: dict[str, str] = {
    "TINYINT": "SMALLINT", "SMALLINT": "SMALLINT", "INTEGER": "INTEGER", "BIGINT": "BIGINT",
    "UTINYINT": "SMALLINT", "USMALLINT": "INTEGER", "UINTEGER": "BIGINT",
    "DOUBLE": "DOUBLE", "FLOAT": "DOUBLE", "DECIMAL": "DECIMAL", "VARCHAR": "VARCHAR",
    "BOOLEAN": "BOOLEAN", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP", "BLOB": "BLOB",
}

#: Types carried in a wider logical type, with the manifest note.
DUCKDB_WIDENED: dict[str, str] = {"FLOAT": "DuckDB FLOAT (4 bytes) carried as DOUBLE (exact widening)"}


def _base(data_type: str) -> str:
    return re.sub(r"\(.*", "", data_type).strip().upper()


class DuckDBReader:
    """``SourceReader`` for a DuckDB file (module doc)."""

    engine = "duckdb"

    def __init__(self, settings: dict | None = None) -> None:
        self.settings = settings or {}

    def _connect(self, source: SourceDatabase):
        import duckdb

        try:
            return duckdb.connect(source.location, read_only=True)
        except duckdb.Error as e:
            raise ReplicationError(f"cannot open DuckDB source {source.location}: {e}") from e

    def catalog_name(self, source: SourceDatabase) -> str:
        """The catalog DuckDB opens the file as: its stem (``nyc.duckdb`` -> ``nyc``), so
        ``nyc.taxi`` resolves on the source; replicas carry it like a schema name
        (``naming.qualifiers``). DuckDB docs, "ATTACH": the default alias is the file's base
        name without extension."""
        from pathlib import Path

        return Path(source.location).stem

    def content_hash(self, source: SourceDatabase) -> str:
        """sha256 of the file bytes."""
        return file_sha256(source.location)

    def read_schema(self, source: SourceDatabase, types: str = "declared"
                    ) -> tuple[list[TableSpec], list[str]]:
        """Tables of schema ``main`` (by name), typed columns, PRIMARY/FOREIGN keys."""
        con = self._connect(source)
        try:
            names = [r[0] for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_type = 'BASE TABLE' ORDER BY table_name").fetchall()]
            skipped = [f"view {r[0]!r} not copied (only tables, keys and data are)" for r in con.execute(
                "SELECT view_name FROM duckdb_views() WHERE NOT internal AND schema_name = 'main'").fetchall()]
            tables = []
            for name in names:
                cols = []
                for cname, dtype, nullable, prec, scale in con.execute(
                        "SELECT column_name, data_type, is_nullable, numeric_precision, numeric_scale "
                        "FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ? "
                        "ORDER BY ordinal_position", [name]).fetchall():
                    base = _base(dtype)
                    logical = DUCKDB_LOGICAL.get(base, "VARCHAR")
                    widened = DUCKDB_WIDENED.get(base) or (
                        None if base in DUCKDB_LOGICAL else f"DuckDB {dtype} carried as its text")
                    cols.append(ColumnSpec(
                        name=cname, declared_type=dtype, logical_type=logical,
                        not_null=nullable == "NO", widened=widened,
                        precision=prec if logical == "DECIMAL" else None,
                        scale=scale if logical == "DECIMAL" else None))
                pk: tuple[str, ...] = ()
                fks = []
                for ctype, ccols, ref, rcols in con.execute(
                        "SELECT constraint_type, constraint_column_names, referenced_table, "
                        "referenced_column_names FROM duckdb_constraints() "
                        "WHERE schema_name = 'main' AND table_name = ? "
                        "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') ORDER BY constraint_index",
                        [name]).fetchall():
                    if ctype == "PRIMARY KEY":
                        pk = tuple(ccols)
                    else:
                        fks.append(ForeignKeySpec(tuple(ccols), ref, tuple(rcols or ()), id=len(fks)))
                rows = con.execute(f"SELECT count(*) FROM {q(name)}").fetchone()[0]
                tables.append(TableSpec(name=name, columns=cols, primary_key=pk,
                                        foreign_keys=tuple(fks), row_count=rows, schema="main"))
            return tables, skipped
        except Exception as e:  # noqa: BLE001 - duckdb errors, named
            if isinstance(e, ReplicationError):
                raise
            raise ReplicationError(f"cannot read schema of {source.location}: {e}") from e
        finally:
            con.close()

    def _select(self, table: TableSpec) -> str:
        cols = [q(c.name) if _base(c.declared_type) in DUCKDB_LOGICAL else f"CAST({q(c.name)} AS VARCHAR)"
                for c in table.columns]
        return f"SELECT {', '.join(cols)} FROM {q(table.name)}"

    @staticmethod
    def _convs(table: TableSpec):
        return [(lambda v: None if v is None else float(v)) if c.logical_type == "DOUBLE"
                else (lambda v: v) for c in table.columns]

    def batches(self, source: SourceDatabase, table: TableSpec,
                batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Stream rows as record batches typed by ``table.arrow_schema()``."""
        arrow = table.arrow_schema()
        convs = self._convs(table)
        con = self._connect(source)
        try:
            cur = con.execute(self._select(table))
            while rows := cur.fetchmany(batch_rows):
                arrays = [pa.array([f(r[i]) for r in rows], type=arrow.field(i).type)
                          for i, f in enumerate(convs)]
                yield pa.RecordBatch.from_arrays(arrays, schema=arrow)
        finally:
            con.close()

    def checksums(self, source: SourceDatabase, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side A from DuckDB's Python values of the source."""
        con = self._connect(source)
        try:
            return {t.name: checksum_cursor(t, con.execute(self._select(t)), self._convs(t))
                    for t in tables}
        finally:
            con.close()
