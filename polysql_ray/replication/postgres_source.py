"""PostgreSQL *source* reader: replicate a PostgreSQL database (every schema) to any target.

:class:`PostgresReader` implements ``replication.base.SourceReader``. ``SourceDatabase.location``
is ``<database>/<schema>`` -- every user schema of ``<database>`` is read (``<schema>`` is the
*home* schema, the one unqualified names resolve in; the others are listed by
:meth:`PostgresReader.schema_names_of`, and each replica carries ``<schema>.<table>`` for all
of them as its engine allows: ``naming.qualifiers``) -- or a bare ``<schema>`` of the configured
``database``, which reads that schema only (a shared database whose other schemas are not the
source's). A table name held by two schemas is refused with one line naming both (a replica
has one namespace for unqualified names). The admin role reads. A plain-SQL ``pg_dump`` file becomes a source database through :func:`install_dump`
(``psql``, the ordinary client, loads it as it is into its own database, where gold SQL
runs, so names the dump's SQL qualifies, ``public.t``, resolve).

Typed source: the logical type comes from the declared type (:data:`POSTGRES_LOGICAL`, as data;
``information_schema.columns.data_type``):

| PostgreSQL                              | logical      | note |
|-----------------------------------------|--------------|------|
| smallint / integer / bigint             | SMALLINT / INTEGER / BIGINT | width kept |
| numeric(p,s)                            | DECIMAL(p,s) | exact |
| numeric (unconstrained)                 | DECIMAL(p,s) | the narrowest (p,s) holding every stored value (:func:`narrowest_decimal`); VARCHAR (its text) when none does (p > 38, NaN, Infinity), recorded |
| double precision                        | DOUBLE       | |
| real (4 bytes)                          | DOUBLE       | the float32 value widened exactly, recorded |
| text / varchar(n) / char(n)             | VARCHAR(n)   | char(n) values as the server returns them (blank-padded) |
| boolean, date, timestamp                | BOOLEAN, DATE, TIMESTAMP | |
| bytea                                   | BLOB         | |
| arrays, enums, ranges, composites, json, uuid, time, interval ... | VARCHAR | the server's ``::text``, decided per column with the reason recorded (:data:`TEXT_REASONS`): no target engine of the project has the type in every dialect |

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
    (``public.t``, ``sales.orders`` included) runs there as on the database the dump came from;
    the reader role gets ``CONNECT``, and ``USAGE`` and ``SELECT`` on every user schema (all
    are read and copied, :meth:`PostgresReader.schema_names_of`), the
    database is hardened like a replica (``engines.postgres.harden_database``). The database
    comment records the file's sha256; an unchanged file is not loaded again. Returns True
    when reused.
    """
    from psycopg import sql

    from polysql_ray.replication.base import file_sha256
    from polysql_ray.replication.postgres import PostgresWriter

    if not isinstance(settings, ServerSettings):
        settings = ServerSettings.from_dict(settings, **pg_engine.DEFAULTS)
    db, _ = split_location(source.location, settings.database)
    digest = f"polysql pg_dump {file_sha256(path)}"
    with pg_engine.connect(settings, admin=True, dbname="postgres") as c:
        row = c.execute("SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                        "WHERE datname = %s", [db]).fetchone()
    if row and row[0] == digest:
        return True
    PostgresWriter(settings)._ensure_role()  # the reader role exists before the GRANTs
    load_dump(path, db, settings)
    role, sdb = sql.Identifier(settings.user), sql.Identifier(db)
    schemas = PostgresReader(settings).schema_names_of(source)
    with pg_engine.connect(settings, admin=True, dbname=db) as c:
        c.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sdb))
        c.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sdb, role))
        pg_engine.harden_database(c)
        for schema in schemas:
            ssch = sql.Identifier(schema)
            c.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ssch, role))
            c.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(ssch, role))
        c.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sdb, sql.Literal(digest)))
    return False


#: information_schema data_types read as text already (never cast).
_TEXT_TYPES = ("text", "character varying", "character")

#: The widest decimal every target's type map holds (``typemap``: DECIMAL(p,s), 0 < p <= 38).
MAX_DECIMAL_PRECISION = 38

#: ``pg_type`` kind of a column type with no logical equivalent -> the manifest reason it is
#: carried as the server's ``::text`` (PostgreSQL docs, "pg_type": ``typtype`` b/c/d/e/m/p/r,
#: ``typcategory`` A = array). Decided per column; the database is never refused for it.
TEXT_REASONS: dict[str, str] = {
    "array": "PostgreSQL array {t} carried as its text ('{{1,2}}'): SQLite and MySQL have no array "
             "type, so no target holds it in every dialect; array operators do not carry",
    "enum": "PostgreSQL enum {t} carried as its label text: '=' and IN compare the same labels, but "
            "ORDER BY and '<' follow the text, not the enum's declaration order",
    "range": "PostgreSQL range {t} carried as its text ('[1,5)'): no target has range types",
    "multirange": "PostgreSQL multirange {t} carried as its text: no target has range types",
    "composite": "PostgreSQL composite {t} carried as its row text ('(a,b)'): no target has row types",
    "other": "PostgreSQL {t} carried as its text",
}

_TYPTYPE = {"e": "enum", "r": "range", "m": "multirange", "c": "composite"}


def _kind(typtype: str, typcategory: str) -> str:
    return "array" if typcategory == "A" else _TYPTYPE.get(typtype, "other")


def narrowest_decimal(conn, schema: str, table: str, column: str) -> tuple[int, int] | str:
    """The narrowest ``(precision, scale)`` holding every stored value of an unconstrained
    ``numeric`` column exactly (integer digits + the largest display scale, ``scale()``;
    all NULL: ``(1, 0)``), or the reason none does (NaN/Infinity stored, or more than
    :data:`MAX_DECIMAL_PRECISION` digits). PostgreSQL docs, "Arbitrary Precision Numbers"."""
    c = f"{qi(schema)}.{qi(table)}.{qi(column)}"
    special, scale, digits = conn.execute(
        f"SELECT count(*) FILTER (WHERE {c} IN ('NaN', 'Infinity', '-Infinity')), "
        f"max(scale({c})) FILTER (WHERE {c} NOT IN ('NaN', 'Infinity', '-Infinity')), "
        f"max(CASE WHEN trunc(abs({c})) = 0 THEN 0 ELSE length(trunc(abs({c}))::text) END) "
        f"FILTER (WHERE {c} NOT IN ('NaN', 'Infinity', '-Infinity')) "
        f"FROM {qi(schema)}.{qi(table)}").fetchone()
    if special:
        return f"{special} NaN/Infinity value(s) stored, which no exact decimal holds"
    scale, digits = int(scale or 0), int(digits or 0)
    p = max(digits + scale, 1)
    if p > MAX_DECIMAL_PRECISION:
        return f"a value needs {p} digits, more than DECIMAL({MAX_DECIMAL_PRECISION}) holds"
    return p, scale


def _convert(logical: str, data_type: str):
    if data_type not in POSTGRES_LOGICAL or logical == "VARCHAR":  # read as ::text
        return lambda v: v
    if logical == "DOUBLE":
        return lambda v: None if v is None else float(v)
    if logical == "BLOB":
        return lambda v: None if v is None else bytes(v)
    return lambda v: v


class PostgresReader:
    """``SourceReader`` for a PostgreSQL database, every schema (module doc).

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
        """The source's home schema (``<database>/<schema>`` or ``<schema>``): the one
        unqualified names resolve in, as queries qualify it."""
        return split_location(source.location, self.settings.database)[1]

    _schema = schema_name

    def _schemas(self, conn, source: SourceDatabase) -> list[str]:
        """The schemas read: the home schema first, then (``<database>/<schema>`` locations whose
        home schema exists) every other user schema of the database, by name."""
        home = self._schema(source)
        if "/" not in source.location or conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", [home]).fetchone() is None:
            return [home]  # a bare schema, or a location whose home schema is not there
        return [home] + [r[0] for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname <> ALL(%s) AND nspname NOT LIKE 'pg\\_%%' "
            "AND nspname <> 'information_schema' ORDER BY nspname", [[home]])]

    def schema_names_of(self, source: SourceDatabase) -> list[str]:
        """Every schema this source is read from (home first)."""
        with self._connect(source) as conn:
            return self._schemas(conn, source)

    def content_hash(self, source: SourceDatabase) -> str:
        """Content fingerprint of the schemas read (column list + every row)."""
        with self._connect(source) as conn:
            schemas = self._schemas(conn, source)
            cols = [tuple(r) for s in schemas for r in conn.execute(
                        "SELECT table_schema || '.' || table_name, column_name, data_type "
                        "FROM information_schema.columns WHERE table_schema = %s "
                        "ORDER BY table_name, ordinal_position", [s])]
            if not cols:
                raise ReplicationError(f"PostgreSQL source {source.location} has no tables "
                                       f"(schemas read: {', '.join(schemas)})")

            def rows(t: str, cs: list[str]):
                s, _, name = t.partition(".")
                cur = conn.cursor()
                cur.execute(f"SELECT {', '.join(map(qi, cs))} FROM {qi(s)}.{qi(name)}")
                return cur

            return content_fingerprint(cols, rows)

    def read_schema(self, source: SourceDatabase, types: str = "declared"
                    ) -> tuple[list[TableSpec], list[str]]:
        """Tables of every schema read (home schema first, each by name), columns in ordinal
        order with their logical types, keys. Raises :class:`ReplicationError` when two
        schemas hold a table of the same name (one line naming both)."""
        tables: list[TableSpec] = []
        skipped: list[str] = []
        with self._connect(source) as conn:
            for schema in self._schemas(conn, source):
                t, s = self._read_one_schema(conn, schema)
                tables += t
                skipped += s
        seen: dict[str, str] = {}
        for t in tables:
            if t.name.lower() in seen:
                raise ReplicationError(
                    f"PostgreSQL source {source.location}: table {t.name!r} exists in schemas "
                    f"{seen[t.name.lower()]!r} and {t.schema!r}; a replica holds one table per "
                    f"unqualified name, so rename one of them in the source")
            seen[t.name.lower()] = t.schema
        return tables, skipped

    def _read_one_schema(self, conn, schema: str) -> tuple[list[TableSpec], list[str]]:
        names = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "AND table_type = 'BASE TABLE' ORDER BY table_name", [schema])]
        skipped = [f"view {schema}.{r[0]} not copied (only tables, keys and data are)" for r in conn.execute(
            "SELECT table_name FROM information_schema.views WHERE table_schema = %s", [schema])]
        tables = []
        for name in names:
            kinds = {r[0]: (r[1], _kind(r[2], r[3])) for r in conn.execute(
                "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typtype, t.typcategory "
                "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_type t ON t.oid = a.atttypid "
                "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped",
                [schema, name])}
            cols = []
            for cname, dtype, nullable, clen, prec, scale in conn.execute(
                    "SELECT column_name, data_type, is_nullable, character_maximum_length, "
                    "numeric_precision, numeric_scale FROM information_schema.columns "
                    "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                    [schema, name]):
                logical = POSTGRES_LOGICAL.get(dtype, "VARCHAR")
                widened = POSTGRES_WIDENED.get(dtype)
                fmt, kind = kinds.get(cname, (dtype, "other"))
                declared = dtype + (f"({clen})" if clen else f"({prec},{scale})" if logical == "DECIMAL"
                                    and prec is not None else "")
                if logical == "DECIMAL" and prec is None:
                    fit = narrowest_decimal(conn, schema, name, cname)
                    if isinstance(fit, str):
                        logical, widened = "VARCHAR", f"unconstrained numeric carried as its text: {fit}"
                    else:
                        prec, scale = fit
                        widened = (f"unconstrained numeric carried as DECIMAL({prec},{scale}), the "
                                   f"narrowest exact decimal holding every stored value")
                elif dtype not in POSTGRES_LOGICAL:
                    widened = TEXT_REASONS[kind].format(t=fmt)
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
        cols = [qi(c.name) if data_types.get(c.name) in POSTGRES_LOGICAL and (
                    c.logical_type != "VARCHAR" or data_types.get(c.name) in _TEXT_TYPES)
                else f"{qi(c.name)}::text" for c in table.columns]
        return f"SELECT {', '.join(cols)} FROM {qi(schema)}.{qi(table.name)}"

    def _types(self, conn, schema: str, table: str) -> dict[str, str]:
        return {r[0]: r[1] for r in conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s", [schema, table])}

    def batches(self, source: SourceDatabase, table: TableSpec,
                batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Stream rows as record batches typed by ``table.arrow_schema()``."""
        schema = table.schema or self._schema(source)
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
        out = {}
        with self._connect(source) as conn:
            for t in tables:
                schema = t.schema or self._schema(source)
                dtypes = self._types(conn, schema, t.name)
                convs = [_convert(c.logical_type, dtypes.get(c.name, "")) for c in t.columns]
                with conn.cursor() as cur:
                    cur.execute(self._select(schema, t, dtypes))
                    out[t.name] = checksum_cursor(t, cur, convs, chunk=10_000)
        return out
