"""SQLite source reader: schema from PRAGMAs, raw values from ``sqlite3``, no type guessing.

* Schema: ``sqlite_master`` (tables in creation order; ``sqlite_%`` internal tables skipped),
  ``PRAGMA table_info`` (exact names, declared type, NOT NULL, PK order) and
  ``PRAGMA foreign_key_list``.
* Types: per column, ``SELECT typeof(c), count(*) ... GROUP BY 1`` gives the storage classes
  really present, and ``typemap.sqlite_logical_type`` decides the storage logical type
  (widening recorded, never coercion). With ``types="declared"`` a declared type that promises
  more (``typemap.declared_family``: INTEGER width, BOOLEAN, DECIMAL(p,s), DATE, TIMESTAMP,
  VARCHAR(n)) is kept when a count of the values failing ``typemap.CONFORMS`` is zero (DECIMAL:
  ``typemap.decimal_fits`` on the distinct values); else the column keeps its storage type and
  records the count and up to three examples.
* Values: ``sqlite3`` with no ``detect_types`` returns int/float/str/bytes/None exactly as
  stored; text must be valid UTF-8 (else :class:`ReplicationError` naming the column).
  The database is opened ``mode=ro``.
"""
from __future__ import annotations

import datetime as dt
import sqlite3
from decimal import Decimal
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
    """Python value -> value for the Arrow column of ``logical`` type (lossless; the declared
    types only ever see values that passed their conformance check)."""
    if logical in ("BIGINT", "INTEGER", "SMALLINT"):
        return lambda v: v
    if logical == "BOOLEAN":
        return lambda v: None if v is None else bool(v)
    if logical == "DATE":
        return lambda v: None if v is None else dt.date.fromisoformat(v)
    if logical == "TIMESTAMP":
        return lambda v: None if v is None else dt.datetime.fromisoformat(v)
    if logical == "DECIMAL":
        return lambda v: None if v is None else (Decimal(repr(v)) if isinstance(v, float) else Decimal(v))
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

    def read_catalog(self, source: SourceDatabase) -> list[TableSpec]:
        """Tables with exact identifiers, declared types and keys, from the PRAGMAs alone: no
        value is read (logical types from the declared type, ``row_count`` 0)."""
        return self.read_schema(source, types="catalog")[0]

    def read_schema(self, source: SourceDatabase, types: str = "declared"
                    ) -> tuple[list[TableSpec], list[str]]:
        """Tables with exact identifiers, PK/FK/NOT NULL, row counts and logical types
        (``types``: ``declared`` or ``storage``, see module doc; ``catalog``: see
        :meth:`read_catalog`)."""
        con = self._connect(source)
        con.text_factory = str
        try:
            tables, skipped = [], []
            objects = con.execute(
                "SELECT type, name, sql FROM sqlite_master ORDER BY rowid").fetchall()
            for typ, name, sql in objects:
                if typ == "table" and not name.startswith("sqlite_"):
                    tables.append(self._table(con, name, types))
                elif typ in ("view", "trigger") or (typ == "index" and sql):
                    skipped.append(f"{typ} {name!r} not copied (only tables, keys and data are)")
            return tables, skipped
        except sqlite3.Error as e:
            raise ReplicationError(f"cannot read schema of {source.location}: {e}") from e
        finally:
            con.close()

    def _table(self, con: sqlite3.Connection, name: str, types: str = "declared") -> TableSpec:
        q = quote_ident(name)
        info = con.execute(f"PRAGMA table_info({q})").fetchall()
        cols, pk = [], []
        for _cid, cname, ctype, notnull, _default, pkpos in info:
            qc = quote_ident(cname)
            classes = {} if types == "catalog" else {t: n for t, n in con.execute(
                f"SELECT typeof({qc}), count(*) FROM {q} GROUP BY 1") if t != "null"}
            max_abs = None
            if "integer" in classes:
                lo, hi = con.execute(
                    f"SELECT min({qc}), max({qc}) FROM {q} WHERE typeof({qc})='integer'").fetchone()
                max_abs = max(abs(lo), abs(hi))
            logical, widened = typemap.sqlite_logical_type(ctype or "", set(classes), max_abs)
            col = ColumnSpec(name=cname, declared_type=ctype or "", logical_type=logical,
                             not_null=bool(notnull), storage_classes=tuple(sorted(classes)),
                             widened=widened)
            if types == "declared":
                self._declared(con, q, col)
            cols.append(col)
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
        rows = 0 if types == "catalog" else con.execute(f"SELECT count(*) FROM {q}").fetchone()[0]
        return TableSpec(name=name, columns=cols, primary_key=tuple(c for _, c in sorted(pk)),
                         foreign_keys=tuple(fk_specs), row_count=rows, schema="main")

    def _declared(self, con: sqlite3.Connection, q: str, col: ColumnSpec) -> None:
        """Keep ``col``'s declared type when every stored value conforms (module doc)."""
        want = typemap.declared_family(col.declared_type)
        if want is None or want.check in ("DOUBLE", "VARCHAR"):
            return  # the storage map already keeps these declarations
        qc = quote_ident(col.name)
        fam = want
        while True:
            pred = typemap.CONFORMS[fam.check].format(c=qc, n=fam.length)
            bad_sql = f"FROM {q} WHERE {qc} IS NOT NULL AND NOT ({pred})"
            bad = con.execute(f"SELECT count(*) {bad_sql}").fetchone()[0]
            examples = [r[0] for r in con.execute(f"SELECT DISTINCT {qc} {bad_sql} LIMIT 3")]
            if not bad and fam.family == "DECIMAL":
                counts = con.execute(f"SELECT {qc}, count(*) FROM {q} WHERE {qc} IS NOT NULL "
                                     f"GROUP BY 1").fetchall()
                misfit = [(v, n) for v, n in counts
                          if not typemap.decimal_fits(v, fam.precision, fam.scale)]
                bad = sum(n for _, n in misfit)
                examples = [v for v, _ in misfit[:3]]
            if not bad:
                break
            wider = typemap.FAMILY_WIDER.get(fam.family)
            if wider is None:
                col.fallback = (f"declared {col.declared_type}: {bad} stored values do not conform "
                                f"(e.g. {', '.join(repr(e) for e in examples)}) -> storage type "
                                f"{col.logical_type}")
                col.fallback_count = bad
                col.fallback_examples = tuple(repr(e) for e in examples)
                return
            col.fallback = (f"declared {col.declared_type}: {bad} values do not fit {fam.family} "
                            f"(e.g. {', '.join(repr(e) for e in examples)}) -> {wider}")
            col.fallback_count = bad
            col.fallback_examples = tuple(repr(e) for e in examples)
            fam = typemap.DeclaredType(wider)
        col.logical_type = fam.family
        col.precision, col.scale, col.length = fam.precision, fam.scale, fam.length
        col.widened = None

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
