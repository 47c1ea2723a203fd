"""PostgreSQL *source* reader: replicate a schema of a PostgreSQL database to any target.

:class:`PostgresReader` implements ``replication.base.SourceReader``. ``SourceDatabase.location``
is ``<schema>`` (in the configured ``database``) or ``<database>/<schema>``; the admin role
reads. A plain-SQL ``pg_dump`` file becomes a source database through :func:`install_dump`
(``psql``, the ordinary client, loads it as it is into its own database, where gold SQL
runs, so names the dump's SQL qualifies, ``public.t``, resolve).

Typed source: the logical type comes from the declared type (:data:`POSTGRES_LOGICAL`, as data;
``information_schema.columns.data_type``):

| PostgreSQL                              | logical      | note |
|-----------------------------------------|--------------|------|
| smallint / integer / bigint             | SMALLINT / INTEGER / BIGINT | width kept |
| numeric(p,s)                            | DECIMAL(p,s) | exact; unconstrained numeric -> VARCHAR (its text), recorded |
| double precision                        | DOUBLE       | |
| real (4 bytes)                          | DOUBLE       | the float32 value widened exactly, recorded |
| text / varchar(n) / char(n)             | VARCHAR(n)   | char(n) values as the server returns them (blank-padded) |
| boolean, date, timestamp                | BOOLEAN, DATE, TIMESTAMP | |
| bytea                                   | BLOB         | |
| anything else (time, json, uuid, arrays)| VARCHAR      | the server's ``::text``, recorded |

Names: PostgreSQL folds unquoted names to lower case, so ``singer`` is stored as written and any
unquoted spelling resolves to it; a quoted mixed-case name resolves only exactly
(``engines.identifiers``). Keys: ``pg_constraint`` (PRIMARY KEY, FOREIGN KEY in key order).
Content hash: ``replication.postgres.content_fingerprint`` of the schema (every row), so a
changed source invalidates every copy.
"""
from __future__ import annotations

import subprocess
from typing import Iterator

import pyarrow as pa

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import postgres as pg_engine
from polysql_ray.engines.postgres import split_location
from polysql_ray.engines.servers import ServerSettings
from polysql_ray.replication.base import (
    ColumnSpec, ForeignKeySpec, ReplicationError, TableChecksum, TableSpec,
)
from polysql_ray.replication.certificate import checksum_cursor
from polysql_ray.replication.postgres import content_fingerprint, qi

#: information_schema data_type -> logical type.
POSTGRES_LOGICAL: dict[str, str] = {
    "smallint": "SMALLINT", "integer": "INTEGER", "bigint": "BIGINT",
    "numeric": "DECIMAL", "double precision": "DOUBLE", "real": "DOUBLE",
    "text": "VARCHAR", "character varying": "VARCHAR", "character": "VARCHAR",
    "boolean": "BOOLEAN", "date": "DATE", "timestamp without time zone": "TIMESTAMP",
    "bytea": "BLOB",
}

#: data_types carried in a wider logical type, with the manifest note.
POSTGRES_WIDENED: dict[str, str] = {
    "real": "PostgreSQL real (4 bytes) carried as DOUBLE (exact widening)",
}


def load_dump(path: str, database: str, settings: ServerSettings | dict | None = None,
              psql: str = "psql") -> None:
    """Load a plain-SQL ``pg_dump`` file into a fresh database ``database`` (dropped first)
    with ``psql -v ON_ERROR_STOP=1`` as the admin role. Raises :class:`ReplicationError` with
    psql's message when the load fails."""
    from psycopg import sql

    if not isinstance(settings, ServerSettings):
        settings = ServerSettings.from_dict(settings, **pg_engine.DEFAULTS)
    with pg_engine.connect(settings, admin=True, dbname="postgres") as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(database)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    env = {"PGPASSWORD": settings.admin_password() or ""}
    import os

    proc = subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", settings.host, "-p", str(settings.port),
         "-U", settings.admin_user, "-d", database, "-f", path],
        capture_output=True, text=True, env={**os.environ, **env}, check=False)
    if proc.returncode:
        raise ReplicationError(f"loading pg_dump {path} into {database}: {proc.stderr.strip()[:600]}")


def install_dump(source: SourceDatabase, path: str, settings: ServerSettings | dict | None = None) -> bool:
    """Installer of ``replication.sources`` (``install="pg_dump:<file>"``).

    ``source.location`` is ``<database>/<schema>``: the dump is loaded by :func:`load_dump`
    into that database as it is, schemas and names kept, so the gold SQL written for the dump
    (``public.t`` included) runs there as on the database the dump came from; the reader role
    gets ``CONNECT`` and ``SELECT`` on ``<schema>`` (the schema that is read and copied), the
    database is hardened like a replica (``engines.postgres.harden_database``). The database
    comment records the file's sha256; an unchanged file is not loaded again. Returns True
    when reused.
    """
    from psycopg import sql

    from polysql_ray.replication.base import file_sha256
    from polysql_ray.replication.postgres import PostgresWriter

    if not isinstance(settings, ServerSettings):
        settings = ServerSettings.from_dict(settings, **pg_engine.DEFAULTS)
    db, schema = split_location(source.location, settings.database)
    digest = f"polysql pg_dump {file_sha256(path)}"
    with pg_engine.connect(settings, admin=True, dbname="postgres") as c:
        row = c.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                        "WHERE datname = %s", [db]).fetchone()
    if row and row[0] == digest:
        return True
    PostgresWriter(settings)._ensure_role()  # the reader role exists before the GRANTs
    load_dump(path, db, settings)
    role, sdb, ssch = (sql.Identifier(settings.user), sql.Identifier(db), sql.Identifier(schema))
    with pg_engine.connect(settings, admin=True, dbname=db) as c:
        c.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sdb))
        c.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sdb, role))
        pg_engine.harden_database(c)
        c.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ssch, role))
        c.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(ssch, role))
        c.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sdb, sql.Literal(digest)))
    return False


def _convert(logical: str, data_type: str):
    if data_type not in POSTGRES_LOGICAL:  # read as ::text
        return lambda v: v
    if logical == "DOUBLE":
        return lambda v: None if v is None else float(v)
    if logical == "BLOB":
        return lambda v: None if v is None else bytes(v)
    return lambda v: v


class PostgresReader:
    """``SourceReader`` for one schema of a PostgreSQL database (module doc).

    Args:
        settings: server settings (admin role reads); default ``engines.postgres.DEFAULTS``.
    """

    engine = "postgres"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **pg_engine.DEFAULTS)
        self.settings = settings

    def _connect(self, source: SourceDatabase):
        db, _ = split_location(source.location, self.settings.database)
        try:
            return pg_engine.connect(self.settings, admin=True, dbname=db)
        except Exception as e:  # noqa: BLE001 - psycopg raises several kinds
            raise ReplicationError(f"cannot connect to PostgreSQL source {source.location}: {e}") from e

    def schema_name(self, source: SourceDatabase) -> str:
        """The source's schema (``<database>/<schema>`` or ``<schema>``), as queries qualify it."""
        return split_location(source.location, self.settings.database)[1]

    _schema = schema_name

    def content_hash(self, source: SourceDatabase) -> str:
        """Content fingerprint of the schema (column list + every row)."""
        schema = self._schema(source)
        with self._connect(source) as conn:
            cols = [tuple(r) for r in conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %s ORDER BY table_name, ordinal_position", [schema])]
            if not cols:
                raise ReplicationError(f"PostgreSQL source {source.location} has no tables")

            def rows(t: str, cs: list[str]):
                cur = conn.cursor()
                cur.execute(f"SELECT {', '.join(map(qi, cs))} FROM {qi(schema)}.{qi(t)}")
                return cur

            return content_fingerprint(cols, rows)

    def read_schema(self, source: SourceDatabase, types: str = "declared"
                    ) -> tuple[list[TableSpec], list[str]]:
        """Tables (by name), columns in ordinal order with their logical types, keys."""
        schema = self._schema(source)
        with self._connect(source) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "AND table_type = 'BASE TABLE' ORDER BY table_name", [schema])]
            skipped = [f"view {r[0]!r} not copied (only tables, keys and data are)" for r in conn.execute(
                "SELECT table_name FROM information_schema.views WHERE table_schema = %s", [schema])]
            tables = []
            for name in names:
                cols = []
                for cname, dtype, nullable, clen, prec, scale in conn.execute(
                        "SELECT column_name, data_type, is_nullable, character_maximum_length, "
                        "numeric_precision, numeric_scale FROM information_schema.columns "
                        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                        [schema, name]):
                    logical = POSTGRES_LOGICAL.get(dtype, "VARCHAR")
                    widened = POSTGRES_WIDENED.get(dtype)
                    if logical == "DECIMAL" and prec is None:
                        logical, widened = "VARCHAR", "unconstrained numeric carried as its text"
                    elif dtype not in POSTGRES_LOGICAL:
                        widened = f"PostgreSQL {dtype} carried as its text"
                    declared = dtype + (f"({clen})" if clen else f"({prec},{scale})" if logical == "DECIMAL" else "")
                    cols.append(ColumnSpec(
                        name=cname, declared_type=declared, logical_type=logical,
                        not_null=nullable == "NO", widened=widened,
                        precision=prec if logical == "DECIMAL" else None,
                        scale=scale if logical == "DECIMAL" else None,
                        length=clen if logical == "VARCHAR" else None))
                pk: tuple[str, ...] = ()
                fks = []
                for contype, ref, kcols, rcols, oid in conn.execute(
                        "SELECT c.contype, fr.relname, "
                        "  ARRAY(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) "
                        "        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i), "
                        "  ARRAY(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i) "
                        "        JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i), "
                        "  c.oid "
                        "FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid "
                        "JOIN pg_namespace n ON n.oid = r.relnamespace "
                        "LEFT JOIN pg_class fr ON fr.oid = c.confrelid "
                        "WHERE n.nspname = %s AND r.relname = %s AND c.contype IN ('p', 'f') "
                        "ORDER BY c.oid", [schema, name]):
                    if contype == "p":
                        pk = tuple(kcols)
                    else:
                        fks.append(ForeignKeySpec(tuple(kcols), ref, tuple(rcols), id=len(fks)))
                rows = conn.execute(f"SELECT count(*) FROM {qi(schema)}.{qi(name)}").fetchone()[0]
                tables.append(TableSpec(name=name, columns=cols, primary_key=pk,
                                        foreign_keys=tuple(fks), row_count=rows, schema=schema))
            return tables, skipped

    def _select(self, schema: str, table: TableSpec, data_types: dict[str, str]) -> str:
        cols = [qi(c.name) if data_types.get(c.name) in POSTGRES_LOGICAL else f"{qi(c.name)}::text"
                for c in table.columns]
        return f"SELECT {', '.join(cols)} FROM {qi(schema)}.{qi(table.name)}"

    def _types(self, conn, schema: str, table: str) -> dict[str, str]:
        return {r[0]: r[1] for r in conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s", [schema, table])}

    def batches(self, source: SourceDatabase, table: TableSpec,
                batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Stream rows as record batches typed by ``table.arrow_schema()``."""
        schema = self._schema(source)
        arrow = table.arrow_schema()
        with self._connect(source) as conn:
            dtypes = self._types(conn, schema, table.name)
            convs = [_convert(c.logical_type, dtypes.get(c.name, "")) for c in table.columns]
            # a server-side cursor (needs a transaction): a large table never sits in memory
            with conn.transaction(), conn.cursor(name="polysql_read") as cur:
                cur.execute(self._select(schema, table, dtypes))
                while rows := cur.fetchmany(batch_rows):
                    arrays = [pa.array([f(r[i]) for r in rows], type=arrow.field(i).type)
                              for i, f in enumerate(convs)]
                    yield pa.RecordBatch.from_arrays(arrays, schema=arrow)

    def checksums(self, source: SourceDatabase, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side A from psycopg's Python values of the source."""
        schema = self._schema(source)
        out = {}
        with self._connect(source) as conn:
            for t in tables:
                dtypes = self._types(conn, schema, t.name)
                convs = [_convert(c.logical_type, dtypes.get(c.name, "")) for c in t.columns]
                with conn.cursor() as cur:
                    cur.execute(self._select(schema, t, dtypes))
                    out[t.name] = checksum_cursor(t, cur, convs, chunk=10_000)
        return out
