"""SQLite target writer: an exact copy of a (typed) source database in one ``.sqlite`` file.

Used to replicate SpiderMan's MySQL sources into SQLite (fidelity study, issue 3 item 5),
but works for any :class:`~polysql_ray.replication.base.SourceReader`.

Type map (logical -> declared SQLite type, :data:`SQLITE_TYPES`; data, not branches). The
declared type fixes the column's *affinity* (SQLite docs "Datatypes In SQLite" section 3.1),
so every value is stored in exactly one storage class:

| logical   | declared  | stored as (Python value bound)                                   |
|-----------|-----------|------------------------------------------------------------------|
| BIGINT    | INTEGER   | integer                                                          |
| DOUBLE    | REAL      | real (8-byte IEEE, bit-exact)                                    |
| DECIMAL   | REAL      | real: ``float(Decimal)``; exact only up to 15 significant digits, which the certificate checks (``Decimal(repr(float))`` must equal the source decimal), so a wider value fails the copy instead of drifting |
| VARCHAR   | TEXT      | text                                                             |
| BLOB      | BLOB      | blob                                                             |
| BOOLEAN   | INTEGER   | integer 0/1 (SQLite has no BOOLEAN; MySQL returns 0/1 too)       |
| DATE      | TEXT      | ``YYYY-MM-DD`` (ISO-8601, what SQLite date functions read)       |
| TIMESTAMP | TEXT      | ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (``datetime.isoformat(" ")``)   |

Why DECIMAL -> REAL: SQLite has no exact decimal; REAL is what SQLite arithmetic (AVG, ``/``)
would use on such values anyway and what Spider's own SQLite files hold for its DECIMAL
columns. ``NUMERIC`` affinity was rejected: it stores ``100.00`` as the *integer* 100, which
turns later divisions into integer divisions.

Procedure: stage every table without constraints in an attached ``:memory:`` database
(``executemany`` bulk insert, identifiers always double-quoted, never renamed); decide which
PRIMARY KEY / NOT NULL / FOREIGN KEY constraints the data allows (as in ``duckdb_writer``:
PK without NULL or duplicate -- important since a single ``INTEGER PRIMARY KEY`` becomes the
rowid and would silently number NULLs; FK whose parent table and columns exist and whose
child rows all have a parent); create the final tables with the carried constraints in
source order (SQLite accepts forward references) and ``INSERT ... SELECT``; write to
``<name>.tmp`` then move. Each dropped constraint is recorded with its reason.

Location: ``<replicas_dir>/sqlite/<dataset>/<db_id>/<db_id>.sqlite``. Fingerprint: sha256
of the file (the SQLite engine opens it ``mode=ro``).
"""
from __future__ import annotations

import datetime as dt
import os
import sqlite3
from decimal import Decimal
from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication.base import (
    FileTargetWriter, ReplicationError, TableChecksum, TableSpec,
)
from polysql_ray.replication.certificate import checksum_cursor
from polysql_ray.replication.constraints import carryable_not_null, carryable_primary_keys
from polysql_ray.replication.sqlite_reader import quote_ident as q

STAGING = "polysql_staging"

#: Logical type -> declared SQLite type (see module doc).
SQLITE_TYPES: dict[str, str] = {
    "BIGINT": "INTEGER", "INTEGER": "INTEGER", "SMALLINT": "INTEGER", "DOUBLE": "REAL", "DECIMAL": "REAL", "VARCHAR": "TEXT",
    "BLOB": "BLOB", "BOOLEAN": "INTEGER", "DATE": "TEXT", "TIMESTAMP": "TEXT",
}


def _to_sqlite(logical: str):
    """Python value (from the reader's Arrow batch) -> value bound into SQLite."""
    if logical == "DECIMAL":
        return lambda v: None if v is None else float(v)
    if logical == "BOOLEAN":
        return lambda v: None if v is None else int(bool(v))
    if logical == "DATE":
        return lambda v: None if v is None else v.isoformat()
    if logical == "TIMESTAMP":
        return lambda v: None if v is None else v.isoformat(sep=" ")
    if logical == "BLOB":
        return lambda v: None if v is None else bytes(v)
    return lambda v: v


def _from_sqlite(logical: str):
    """Value read back from the copy -> the Python value the certificate canonicalises
    (inverse of :func:`_to_sqlite`; raises on a value of the wrong storage class)."""
    if logical == "DECIMAL":
        return lambda v: None if v is None else Decimal(repr(float(v)))
    if logical == "DATE":
        return lambda v: None if v is None else dt.date.fromisoformat(v)
    if logical == "TIMESTAMP":
        return lambda v: None if v is None else dt.datetime.fromisoformat(v)
    if logical == "BOOLEAN":
        return lambda v: None if v is None else bool(v)
    return lambda v: v


class SqliteWriter(FileTargetWriter):
    """:class:`~polysql_ray.replication.base.TargetWriter` for SQLite files (module doc)."""

    engine = "sqlite"
    suffix = ".sqlite"
    temp_suffixes = (".tmp", ".tmp-journal")

    def carry_schema(self, location: str, tables: list[TableSpec], schema: str, stored: str) -> str:
        """SQLite has one schema per opened file, ``main``: a source schema of that name
        resolves; any other (a MySQL database, a PostgreSQL schema) would need the engine to
        ATTACH the file a second time under that name, which it does not: recorded
        unavailable."""
        if stored == "main":
            return "resolves: schema 'main' of the replica"
        return (f"unavailable: an SQLite replica has only schema 'main', so {schema}.<table> "
                f"does not resolve")

    def __init__(self, settings: dict | None = None) -> None:
        self.settings = settings or {}

    def version(self) -> str:
        """The SQLite library version (``sqlite3.sqlite_version``)."""
        return sqlite3.sqlite_version


    # ------------------------------------------------------------------ write

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase,
              reader) -> list[str]:
        """Build the copy (module doc). Returns the dropped-constraint sentences.

        Raises:
            ReplicationError: SQLite refused a table or value (nothing is left behind).
        """
        self.drop(location)
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        tmp = location + ".tmp"
        for t in tables:
            for c in t.columns:
                c.target_type = SQLITE_TYPES[c.logical_type]
        dropped: list[str] = []
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute(f"ATTACH ':memory:' AS {STAGING}")
            for t in tables:
                self._stage(con, t, source, reader)
            staged = lambda name: f"{STAGING}.{q(name)}"  # noqa: E731
            count = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
            pks = carryable_primary_keys(tables, staged, count, dropped)
            not_null = carryable_not_null(tables, staged, count, dropped)
            fks = self._carryable_fks(con, tables, dropped)
            con.execute("BEGIN")
            for t in tables:
                con.execute(self._ddl(t, pks, not_null, fks))
                con.execute(f"INSERT INTO main.{q(t.name)} SELECT * FROM {STAGING}.{q(t.name)}")
            con.execute("COMMIT")
            con.execute(f"DETACH {STAGING}")
        except sqlite3.Error as e:
            con.close()
            self.drop(location)
            raise ReplicationError(f"SQLite copy of {source.dataset}/{source.db_id} failed: {e}") from e
        except BaseException:
            con.close()
            self.drop(location)
            raise
        con.close()
        os.replace(tmp, location)
        return dropped

    def _stage(self, con, t: TableSpec, source, reader) -> None:
        cols = ", ".join(f"{q(c.name)} {c.target_type}" for c in t.columns)
        con.execute(f"CREATE TABLE {STAGING}.{q(t.name)} ({cols})")
        convs = [_to_sqlite(c.logical_type) for c in t.columns]
        ins = (f"INSERT INTO {STAGING}.{q(t.name)} VALUES "
               f"({', '.join('?' * len(t.columns))})")
        for batch in reader.batches(source, t):
            cols_py = [[conv(v) for v in col.to_pylist()]
                       for conv, col in zip(convs, batch.columns)]
            con.executemany(ins, list(zip(*cols_py)))

    def _count(self, con, sql: str) -> int:
        return con.execute(sql).fetchone()[0]

    def _carryable_fks(self, con, tables, dropped) -> dict[str, list[tuple]]:
        """table -> [(child columns, parent name, parent columns)] that the data satisfies."""
        by_fold = {t.name.casefold(): t for t in tables}
        out: dict[str, list] = {t.name: [] for t in tables}
        for t in tables:
            cols = {c.name.casefold(): c.name for c in t.columns}
            for fk in t.foreign_keys:
                what = (f"FOREIGN KEY {t.name}({', '.join(fk.columns)}) REFERENCES "
                        f"{fk.ref_table}({', '.join(fk.ref_columns)})")
                parent = by_fold.get(fk.ref_table.casefold())
                if parent is None:
                    dropped.append(f"{what}: referenced table does not exist")
                    continue
                pcols = {c.name.casefold(): c.name for c in parent.columns}
                ref = fk.ref_columns or parent.primary_key
                if len(ref) != len(fk.columns) or any(c.casefold() not in cols for c in fk.columns) \
                        or any(c.casefold() not in pcols for c in ref):
                    dropped.append(f"{what}: a referenced or referencing column does not exist")
                    continue
                child = tuple(cols[c.casefold()] for c in fk.columns)
                ref = tuple(pcols[c.casefold()] for c in ref)
                cond = " AND ".join(f"p.{q(pc)} = c.{q(cc)}" for pc, cc in zip(ref, child))
                nonnull = " AND ".join(f"c.{q(cc)} IS NOT NULL" for cc in child)
                orphans = self._count(
                    con, f"SELECT count(*) FROM {STAGING}.{q(t.name)} c WHERE {nonnull} AND NOT "
                         f"EXISTS (SELECT 1 FROM {STAGING}.{q(parent.name)} p WHERE {cond})")
                if orphans:
                    dropped.append(f"{what}: source data violates it ({orphans} child rows "
                                   f"without a parent row)")
                    continue
                out[t.name].append((child, parent.name, ref))
        return out

    def _ddl(self, t: TableSpec, pks, not_null, fks) -> str:
        parts = [f"{q(c.name)} {c.target_type}" + (" NOT NULL" if c.name in not_null[t.name] else "")
                 for c in t.columns]
        if t.name in pks:
            parts.append(f"PRIMARY KEY ({', '.join(q(c) for c in pks[t.name])})")
        for child, parent, ref in fks[t.name]:
            parts.append(f"FOREIGN KEY ({', '.join(q(c) for c in child)}) REFERENCES "
                         f"{q(parent)} ({', '.join(q(c) for c in ref)})")
        return f"CREATE TABLE main.{q(t.name)} ({', '.join(parts)})"

    # ------------------------------------------------------------------ verify

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B: read the copy back (read-only) and checksum the values,
        converted back by :func:`_from_sqlite` (a value in the wrong storage class fails)."""
        con = sqlite3.connect(f"file:{location}?mode=ro", uri=True)
        try:
            out = {}
            for t in tables:
                convs = [_from_sqlite(c.logical_type) for c in t.columns]
                cur = con.execute(f"SELECT {', '.join(q(c.name) for c in t.columns)} FROM {q(t.name)}")
                out[t.name] = checksum_cursor(t, cur, convs)
            return out
        except (sqlite3.Error, ValueError, TypeError) as e:
            raise ReplicationError(f"checksumming SQLite copy {location}: {e}") from e
        finally:
            con.close()

    def column_types(self, location: str) -> dict[tuple[str, str], str]:
        """(table, column) -> declared type in the copy (for tests/tools)."""
        con = sqlite3.connect(f"file:{location}?mode=ro", uri=True)
        try:
            out = {}
            for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
                for row in con.execute(f"PRAGMA table_info({q(t)})"):
                    out[(t, row[1])] = row[2]
            return out
        finally:
            con.close()
