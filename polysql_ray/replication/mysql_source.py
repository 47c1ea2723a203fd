"""MySQL / MariaDB *source* reader: replicate a MySQL database (SpiderMan) to any target.

:class:`MySQLReader` implements ``replication.base.SourceReader`` for a database on the
server of ``engines.mysql.DEFAULTS`` (admin role), ``SourceDatabase.location`` being the
database name. Typed source, so the logical type comes from the declared type alone
(:data:`MYSQL_LOGICAL`, as data; information_schema ``DATA_TYPE``):

| MySQL                                   | logical   | note |
|-----------------------------------------|-----------|------|
| tinyint..bigint, year, bit              | BIGINT    | ``tinyint(1)``/BOOL stays an integer (as MySQL returns it); with ``types=declared`` signed tinyint/smallint -> SMALLINT, mediumint/int -> INTEGER |
| double, real                            | DOUBLE    | |
| float (4 bytes)                         | DOUBLE    | the value MySQL *returns* (shortest float32 text, e.g. 23.45) parsed as a double; recorded as ``widened`` |
| decimal/numeric(p,s)                    | DECIMAL   | exact, precision/scale kept |
| char, varchar, *text, enum, set         | VARCHAR   | ``types=declared``: varchar(n)/char(n) keep n |
| binary, varbinary, *blob                | BLOB      | |
| date                                    | DATE      | |
| datetime, timestamp                     | TIMESTAMP | microseconds |
| anything else (time, json, geometry)    | VARCHAR   | PyMySQL's text of the value, recorded as ``widened`` |

Schema: ``information_schema.COLUMNS`` (ordinal order), ``KEY_COLUMN_USAGE`` for the PRIMARY
KEY and FOREIGN KEYs (``REFERENCED_*``), tables by name. Content hash: the content
fingerprint of the database (schema + every row; ``replication.mysql.mysql_fingerprint``),
so a changed source invalidates every copy of it.
"""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import mysql as my_engine
from polysql_ray.engines.servers import ServerSettings
from polysql_ray.replication.base import (
    ColumnSpec, ForeignKeySpec, ReplicationError, TableChecksum, TableSpec,
)
from polysql_ray.replication.certificate import ChecksumAccumulator

#: information_schema DATA_TYPE -> logical type.
MYSQL_LOGICAL: dict[str, str] = {
    **{t: "BIGINT" for t in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint",
                             "year", "bit")},
    "double": "DOUBLE", "real": "DOUBLE", "float": "DOUBLE",
    "decimal": "DECIMAL", "numeric": "DECIMAL",
    **{t: "VARCHAR" for t in ("char", "varchar", "tinytext", "text", "mediumtext", "longtext",
                              "enum", "set")},
    **{t: "BLOB" for t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")},
    "date": "DATE", "datetime": "TIMESTAMP", "timestamp": "TIMESTAMP",
}

#: ``replication.types: declared``: integer widths kept (signed types only; an UNSIGNED
#: column, a ``bit`` or ``year`` stays BIGINT), and ``varchar(n)``/``char(n)`` keep their length.
MYSQL_DECLARED_INT: dict[str, str] = {
    "tinyint": "SMALLINT", "smallint": "SMALLINT", "mediumint": "INTEGER", "int": "INTEGER",
    "integer": "INTEGER",
}

#: DATA_TYPEs carried in a wider logical type, with the manifest note.
MYSQL_WIDENED: dict[str, str] = {
    "float": "MySQL FLOAT (4 bytes) carried as DOUBLE holding the value MySQL returns "
             "(shortest float32 text)",
}


def _bq(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _convert(logical: str):
    if logical == "VARCHAR":
        return lambda v: v if v is None or isinstance(v, str) else (
            v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v))
    if logical == "DOUBLE":
        return lambda v: None if v is None else float(v)
    if logical in ("BIGINT", "INTEGER", "SMALLINT"):
        return lambda v: None if v is None else (
            int.from_bytes(v, "big") if isinstance(v, (bytes, bytearray)) else int(v))
    return lambda v: v


class MySQLReader:
    """``SourceReader`` for a MySQL/MariaDB database (module doc).

    Args:
        settings: server settings (admin role reads); default ``engines.mysql.DEFAULTS``.
    """

    engine = "mysql"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **my_engine.DEFAULTS)
        self.settings = settings

    def _conn(self, source: SourceDatabase):
        import pymysql

        try:
            return my_engine.connect_raw(self.settings, admin=True, database=source.location)
        except pymysql.err.MySQLError as e:
            raise ReplicationError(f"cannot open MySQL source {source.location}: {e}") from e

    def content_hash(self, source: SourceDatabase) -> str:
        """Content fingerprint of the source database (schema + rows)."""
        from polysql_ray.replication.mysql import mysql_fingerprint

        fp = mysql_fingerprint(self.settings, source.location)
        if not fp:
            raise ReplicationError(f"MySQL source database {source.location} is missing or empty")
        return fp

    def read_schema(self, source: SourceDatabase, types: str = "declared"
                    ) -> tuple[list[TableSpec], list[str]]:
        """Tables by name with columns, PK, FKs, row counts; views listed as skipped."""
        with self._conn(source) as conn, conn.cursor() as cur:
            db = source.location
            cur.execute("SELECT table_name, table_type FROM information_schema.tables "
                        "WHERE table_schema = %s ORDER BY table_name", (db,))
            listing = cur.fetchall()
            skipped = [f"view {n!r} not copied (only tables, keys and data are)"
                       for n, typ in listing if typ != "BASE TABLE"]
            tables = []
            for (name, typ) in listing:
                if typ != "BASE TABLE":
                    continue
                cur.execute("SELECT column_name, data_type, column_type, is_nullable, "
                            "numeric_precision, numeric_scale, character_maximum_length "
                            "FROM information_schema.columns "
                            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                            (db, name))
                cols = []
                for cname, dtype, ctype, nullable, prec, scale, clen in cur.fetchall():
                    dtype = dtype.lower()
                    logical = MYSQL_LOGICAL.get(dtype, "VARCHAR")
                    length = None
                    if types == "declared":
                        if dtype in MYSQL_DECLARED_INT and "unsigned" not in ctype.lower():
                            logical = MYSQL_DECLARED_INT[dtype]
                        if dtype in ("varchar", "char") and clen:
                            length = int(clen)
                    widened = MYSQL_WIDENED.get(dtype) or (
                        None if dtype in MYSQL_LOGICAL else f"MySQL {ctype} carried as text")
                    cols.append(ColumnSpec(
                        name=cname, declared_type=ctype, logical_type=logical,
                        not_null=(nullable == "NO"), widened=widened,
                        precision=int(prec) if logical == "DECIMAL" else None,
                        scale=int(scale or 0) if logical == "DECIMAL" else None, length=length))
                cur.execute("SELECT constraint_name, column_name, referenced_table_name, "
                            "referenced_column_name FROM information_schema.key_column_usage "
                            "WHERE table_schema = %s AND table_name = %s "
                            "ORDER BY constraint_name, ordinal_position", (db, name))
                pk, fks = [], {}
                for cons, col, rtab, rcol in cur.fetchall():
                    if cons == "PRIMARY":
                        pk.append(col)
                    elif rtab is not None:
                        fks.setdefault(cons, []).append((col, rtab, rcol))
                fk_specs = tuple(
                    ForeignKeySpec(tuple(p[0] for p in parts), parts[0][1],
                                   tuple(p[2] for p in parts), i)
                    for i, (_, parts) in enumerate(sorted(fks.items())))
                cur.execute(f"SELECT COUNT(*) FROM {_bq(name)}")
                tables.append(TableSpec(name=name, columns=cols, primary_key=tuple(pk),
                                        foreign_keys=fk_specs, row_count=cur.fetchone()[0],
                                        schema=db))
            return tables, skipped

    def _rows(self, conn, t: TableSpec, batch_rows: int):
        import pymysql

        cur = conn.cursor(pymysql.cursors.SSCursor)
        cur.execute(f"SELECT {', '.join(_bq(c.name) for c in t.columns)} FROM {_bq(t.name)}")
        while rows := cur.fetchmany(batch_rows):
            yield rows
        cur.close()

    def batches(self, source: SourceDatabase, table: TableSpec,
                batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Rows as record batches typed by ``table.arrow_schema()``."""
        schema = table.arrow_schema()
        convs = [_convert(c.logical_type) for c in table.columns]
        with self._conn(source) as conn:
            for rows in self._rows(conn, table, batch_rows):
                arrays = [pa.array([convs[i](r[i]) for r in rows], type=schema.field(i).type)
                          for i in range(len(table.columns))]
                yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    def checksums(self, source: SourceDatabase, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side A from PyMySQL's values, canonicalised by logical type."""
        out = {}
        with self._conn(source) as conn:
            for t in tables:
                acc = ChecksumAccumulator(t)
                convs = [_convert(c.logical_type) for c in t.columns]
                for rows in self._rows(conn, t, 65_536):
                    acc.add_rows([tuple(f(v) for f, v in zip(convs, r)) for r in rows])
                out[t.name] = acc.result()
        return out
