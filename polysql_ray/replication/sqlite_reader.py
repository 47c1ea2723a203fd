"""SQLite source reader: schema from PRAGMAs, raw values from ``sqlite3``, no type guessing.

* Schema: ``sqlite_master`` (tables in creation order; ``sqlite_%`` internal tables skipped),
  ``PRAGMA table_info`` (exact names, declared type, NOT NULL, PK order) and
  ``PRAGMA foreign_key_list``.
* Types: per column, ``SELECT typeof(c), count(*) ... GROUP BY 1`` gives the storage classes
  really present, and ``typemap.sqlite_logical_type`` decides the logical type (widening
  recorded, never coercion).
* Values: ``sqlite3`` with no ``detect_types`` returns int/float/str/bytes/None exactly as
  stored; text must be valid UTF-8 (else :class:`ReplicationError` naming the column).
  The database is opened ``mode=ro``.
"""
from __future__ import annotations

import sqlite3
from typing import Iterator

import pyarrow as pa

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication import typemap
from polysql_ray.replication.base import (
    ColumnSpec, ForeignKeySpec, ReplicationError, TableChecksum, TableSpec, file_sha256,
)
from polysql_ray.replication.certificate import checksum_cursor


def quote_ident(name: str) -> str:
    """Double-quote an identifier, doubling inner quotes (SQL standard; SQLite/DuckDB/PG)."""
    return '"' + name.replace('"', '""') + '"'


def _render_text(v) -> str:
    """Exact text of a value in a widened VARCHAR column (shortest round-trip for floats)."""
    return repr(v) if isinstance(v, float) else str(v)


def _converter(logical: str):
    """Python value -> value for the Arrow column of ``logical`` type (lossless)."""
    if logical == "BIGINT":
        return lambda v: v
    if logical == "DOUBLE":
        return lambda v: v if v is None or isinstance(v, float) else float(v)
    if logical == "VARCHAR":
        return lambda v: v if v is None or isinstance(v, str) else _render_text(v)
    if logical == "BLOB":
        return lambda v: (v if v is None or isinstance(v, bytes)
                          else _render_text(v).encode("utf-8"))
    raise ReplicationError(f"SQLite reader cannot produce logical type {logical}")


class SqliteReader:
    """:class:`~polysql_ray.replication.base.SourceReader` for SQLite files."""

    engine = "sqlite"

    def _connect(self, source: SourceDatabase) -> sqlite3.Connection:
        try:
            con = sqlite3.connect(f"file:{source.location}?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise ReplicationError(f"cannot open {source.location}: {e}") from e
        con.text_factory = bytes  # decode ourselves to name the column on bad UTF-8
        return con

    def content_hash(self, source: SourceDatabase) -> str:
        """sha256 hex of the SQLite file bytes."""
        return file_sha256(source.location)

    def read_schema(self, source: SourceDatabase) -> tuple[list[TableSpec], list[str]]:
        """Tables with exact identifiers, PK/FK/NOT NULL, row counts and logical types."""
        con = self._connect(source)
        con.text_factory = str
        try:
            tables, skipped = [], []
            objects = con.execute(
                "SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall()
            for typ, name, sql in objects:
                if typ == "table" and not name.startswith("sqlite_"):
                    tables.append(self._table(con, name))
                elif typ in ("view", "trigger") or (typ == "index" and sql):
                    skipped.append(f"{typ} {name!r} not copied (only tables, keys and data are)")
            return tables, skipped
        except sqlite3.Error as e:
            raise ReplicationError(f"cannot read schema of {source.location}: {e}") from e
        finally:
            con.close()

    def _table(self, con: sqlite3.Connection, name: str) -> TableSpec:
        q = quote_ident(name)
        info = con.execute(f"PRAGMA table_info({q})").fetchall()
        cols, pk = [], []
        for _cid, cname, ctype, notnull, _default, pkpos in info:
            qc = quote_ident(cname)
            classes = {t: n for t, n in con.execute(
                f"SELECT typeof({qc}), count(*) FROM {q} GROUP BY 1") if t != "null"}
            max_abs = None
            if "integer" in classes:
                lo, hi = con.execute(
                    f"SELECT min({qc}), max({qc}) FROM {q} WHERE typeof({qc})='integer'").fetchone()
                max_abs = max(abs(lo), abs(hi))
            logical, widened = typemap.sqlite_logical_type(ctype or "", set(classes), max_abs)
            cols.append(ColumnSpec(name=cname, declared_type=ctype or "", logical_type=logical,
                                   not_null=bool(notnull), storage_classes=tuple(sorted(classes)),
                                   widened=widened))
            if pkpos:
                pk.append((pkpos, cname))
        fks: dict[int, list] = {}
        for fid, seq, ref_table, from_col, to_col, *_ in con.execute(
                f"PRAGMA foreign_key_list({q})"):
            fks.setdefault(fid, []).append((seq, ref_table, from_col, to_col))
        fk_specs = []
        for fid, parts in sorted(fks.items()):
            parts.sort()
            fk_specs.append(ForeignKeySpec(
                columns=tuple(p[2] for p in parts), ref_table=parts[0][1],
                ref_columns=tuple(p[3] for p in parts if p[3] is not None), id=fid))
        rows = con.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
        return TableSpec(name=name, columns=cols, primary_key=tuple(c for _, c in sorted(pk)),
                         foreign_keys=tuple(fk_specs), row_count=rows)

    def batches(self, source: SourceDatabase, table: TableSpec,
                batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Stream rows as record batches typed by ``table.arrow_schema()`` (lossless)."""
        schema = table.arrow_schema()
        convs = [_converter(c.logical_type) for c in table.columns]
        # SQLite returns TEXT and BLOB both as bytes under text_factory=bytes; select
        # typeof() beside each column that holds both so the two stay distinct.
        con = self._connect(source)
        try:
            sel = []
            for c in table.columns:
                qc = quote_ident(c.name)
                sel.append(qc)
                sel.append(f"typeof({qc})")
            cur = con.execute(f"SELECT {', '.join(sel)} FROM {quote_ident(table.name)}")
            n = len(table.columns)
            while True:
                rows = cur.fetchmany(batch_rows)
                if not rows:
                    break
                arrays = []
                for i in range(n):
                    conv = convs[i]
                    vals = []
                    for r in rows:
                        v, t = r[2 * i], r[2 * i + 1]
                        if t == b"text":
                            try:
                                v = v.decode("utf-8")
                            except UnicodeDecodeError as e:
                                raise ReplicationError(
                                    f"{table.name}.{table.columns[i].name}: text value is not "
                                    f"valid UTF-8 ({e}); cannot be carried exactly") from e
                        vals.append(conv(v))
                    arrays.append(pa.array(vals, type=schema.field(i).type))
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)
        except sqlite3.Error as e:
            raise ReplicationError(f"reading {table.name} from {source.location}: {e}") from e
        finally:
            con.close()

    def checksums(self, source: SourceDatabase, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side A, from the raw stored values (not the loaded Arrow batches),
        canonicalised by the column's logical type (``certificate.canonical_text``)."""
        con = self._connect(source)
        con.text_factory = str
        out = {}
        try:
            for t in tables:
                cols = ", ".join(quote_ident(c.name) for c in t.columns)
                out[t.name] = checksum_cursor(t, con.execute(f"SELECT {cols} FROM {quote_ident(t.name)}"))
        except (sqlite3.Error, UnicodeDecodeError) as e:
            raise ReplicationError(f"checksumming {source.location}: {e}") from e
        finally:
            con.close()
        return out
