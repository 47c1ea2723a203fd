"""PostgreSQL target writer: an exact copy of a source database in one *database*.

Layout (see ``engines/postgres.py``): one database ``pq_<dataset>_<db_id>_<tag>`` per copy
(``tag``: the copy's content and results-folder tag, ``Manifest.content_tag``), holding the
source's tables in a schema named as the source names it (``naming.source_schema``: ``main`` for
an SQLite or DuckDB source, the source database's name for MySQL, the source schema for
PostgreSQL), so a qualified reference (``main.singer``, ``concert_singer.singer``,
``public.t``) resolves as on the source. The location is ``<database>/<schema>``; the engine
sets ``search_path`` to that schema, and the database's own default ``search_path`` is set to
it too (``ALTER DATABASE ... SET search_path``), so unqualified names resolve in any session.
A database per copy (not a schema of one shared database) is what lets every copy have a
schema called ``main``; two runs or two contents never share a database name.

Names: the replica stores ``TableSpec.stored`` / ``ColumnSpec.stored``
(``engines.identifiers``): a name the source resolves case-insensitively (SQLite, DuckDB,
MySQL columns) and that is a regular, non-reserved identifier is stored folded to lower case,
so ``SELECT name FROM singer`` and ``SELECT Name FROM Singer`` both resolve, as they do on the
source. Other names keep their exact spelling (quoted).

Procedure (README "Replication"), as the admin role:

1. ``DROP DATABASE IF EXISTS ... WITH (FORCE)``; ``CREATE DATABASE``; harden it for the reader
   (``CONNECT`` only for the reader role, server-control functions revoked:
   ``engines.postgres.harden_database``); ``CREATE SCHEMA`` named after the source's schema.
2. In ONE transaction (DDL is transactional in PostgreSQL): ``CREATE TABLE`` per table with
   the replica names (always double-quoted in the DDL) and the types of
   ``typemap.TARGET_TYPES["postgres"]`` (BIGINT, DOUBLE PRECISION - never REAL/FLOAT4 -,
   TEXT, BYTEA, NUMERIC(p,s), DATE, TIMESTAMP), no added columns; bulk load with
   ``COPY ... FROM STDIN`` (psycopg ``Copy.write_row``; floats are sent as their shortest
   round-trip text, so bit-exact); constraints after loading, each under a SAVEPOINT so that
   one the data violates is dropped *alone* and recorded with the server's reason: PRIMARY
   KEY, NOT NULL, then FOREIGN KEY (referenced table/columns resolved case-insensitively, as
   SQLite resolves them); ``GRANT USAGE`` on the schema and ``SELECT`` on its tables to the
   reader role (:func:`ensure_reader_role`), nothing else. A failure drops the database
   (``replicate``). A reused copy is hardened again when the reader can still see the server's
   other databases there (:meth:`PostgresWriter.ensure_reader`).

Fingerprint (reuse check): :func:`content_fingerprint` - sha256 over the schema's tables,
column names/types and an order-independent hash of every row, recomputed at each reuse, so
a changed copy is rebuilt. Version: ``server_version`` (part of the reuse key).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import postgres as pg_engine
from polysql_ray.engines.postgres import split_location
from polysql_ray.engines.servers import ServerSettings, replica_name
from polysql_ray.replication import typemap
from polysql_ray.replication.constraints import resolve_foreign_key
from polysql_ray.replication.base import ReplicationError, TableChecksum, TableSpec
from polysql_ray.replication.certificate import checksum_cursor

_MASK = (1 << 64) - 1

#: Role attributes and defaults of the reader role (PostgreSQL docs: CREATE ROLE,
#: ALTER ROLE ... SET). ``statement_timeout`` is a backstop; the engine sets its own per query.
READER_ROLE_SETTINGS: dict[str, str] = {
    "default_transaction_read_only": "on",
    "statement_timeout": "300s",
    "idle_in_transaction_session_timeout": "60s",
}


def qi(name: str) -> str:
    """Double-quote a PostgreSQL identifier (inner quotes doubled)."""
    return '"' + name.replace('"', '""') + '"'


def content_fingerprint(columns: list[tuple[str, str, str]],
                        read_rows: Callable[[str, list[str]], Iterable[tuple]]) -> str:
    """Engine-neutral fingerprint of a copy's schema and content.

    Args:
        columns: ``(table, column, type text)`` rows in table/ordinal order.
        read_rows: ``(table, [column names]) -> iterable of row tuples``.

    Returns: sha256 hex over the column list and, per table, the row count and the sum mod
    2**64 of BLAKE2b-64 of ``repr(row)`` (order-independent). "" when there are no tables.
    """
    if not columns:
        return ""
    h = hashlib.sha256(json.dumps(columns).encode())
    by_table: dict[str, list[str]] = {}
    for t, c, _ in columns:
        by_table.setdefault(t, []).append(c)
    for t, cols in by_table.items():
        n, s = 0, 0
        for row in read_rows(t, cols):
            n += 1
            s += int.from_bytes(hashlib.blake2b(repr(tuple(row)).encode("utf-8", "surrogatepass"),
                                                digest_size=8).digest(), "little")
        h.update(f"|{t}|{n}|{s & _MASK:016x}".encode())
    return h.hexdigest()


def ensure_reader_role(settings: ServerSettings, conn) -> None:
    """Create/refresh the least-privilege reader role (admin connection ``conn``, autocommit).

    LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION, password from the reader secret
    (none: trust/peer auth), role defaults :data:`READER_ROLE_SETTINGS`, ``CONNECT`` on the
    replica database only (``PUBLIC`` loses CONNECT/TEMP there), server-control functions
    revoked (``engines.postgres.harden_database``). Idempotent.
    """
    from psycopg import sql

    role = settings.user
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
    verb = "ALTER" if exists else "CREATE"
    conn.execute(sql.SQL(verb + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
                         "NOREPLICATION NOBYPASSRLS NOINHERIT").format(sql.Identifier(role)))
    pw = settings.reader_password()
    conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
        sql.Identifier(role), sql.Literal(pw) if pw is not None else sql.SQL("NULL")))
    for k, v in READER_ROLE_SETTINGS.items():
        conn.execute(sql.SQL("ALTER ROLE {} SET {} = {}").format(
            sql.Identifier(role), sql.Identifier(k), sql.Literal(v)))
    db = sql.Identifier(settings.database)
    conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db))
    conn.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, sql.Identifier(role)))
    conn.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
    pg_engine.harden_database(conn)  # no server control, no other sessions' queries


def ensure_database(settings: ServerSettings) -> None:
    """Create the replica database ``settings.database`` when missing (admin role)."""
    from psycopg import sql

    with pg_engine.connect(settings, admin=True, dbname="postgres") as c:
        if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                         [settings.database]).fetchone():
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(settings.database)))


class PostgresWriter:
    """:class:`~polysql_ray.replication.base.TargetWriter` for PostgreSQL (see module doc).

    Args:
        settings: :class:`ServerSettings` or config dict; default ``engines.postgres.DEFAULTS``.
    """

    engine = "postgres"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **pg_engine.DEFAULTS)
        self.settings = settings
        self._ready = False

    def __repr__(self) -> str:
        return f"PostgresWriter({self.settings.admin_user}@{self.settings.host}:{self.settings.port})"

    def _admin(self):
        """Admin connection to the configured database (reader role ensured first)."""
        self._ensure_role()
        return pg_engine.connect(self.settings, admin=True)

    def _ensure_role(self) -> None:
        """Create the configured database and refresh the reader role, once per writer."""
        if not self._ready:
            ensure_database(self.settings)
            with pg_engine.connect(self.settings, admin=True) as c:
                # replication tasks run in parallel: serialize the role DDL across processes
                # (concurrent ALTER ROLE fails with "tuple concurrently updated")
                with c.transaction():
                    c.execute("SELECT pg_advisory_xact_lock(hashtext('polysql_ray:reader_role'))")
                    ensure_reader_role(self.settings, c)
            self._ready = True

    def version(self) -> str:
        """``server_version`` of the server (e.g. ``15.20 (Debian 15.20-0+deb12u1)``)."""
        with pg_engine.connect(self.settings, admin=True, dbname="postgres") as c:
            return "postgresql " + c.execute("SHOW server_version").fetchone()[0]

    def location_for(self, dataset: str, db_id: str, replicas_dir: Path, tag: str = "",
                     schema: str = "") -> str:
        """``<database>/<schema>``: database ``pq_<dataset>_<db_id>_<tag>``
        (``servers.replica_name``), schema the source's (``naming.source_schema``; ``public``
        when not given)."""
        return f"{replica_name(dataset, db_id, tag=tag)}/{schema or 'public'}"

    def _create_database(self, db: str, schema: str) -> None:
        """A fresh, hardened database ``db`` with schema ``schema`` (module doc, step 1)."""
        from psycopg import sql

        role = sql.Identifier(self.settings.user)
        with pg_engine.connect(self.settings, admin=True, dbname="postgres") as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(db)))
        with pg_engine.connect(self.settings, admin=True, dbname=db) as c:
            c.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(db)))
            c.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(db), role))
            c.execute("REVOKE ALL ON SCHEMA public FROM PUBLIC")
            pg_engine.harden_database(c)
            c.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
            c.execute(sql.SQL("ALTER DATABASE {} SET search_path = {}").format(
                sql.Identifier(db), sql.Identifier(schema)))

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase,
              reader) -> list[str]:
        """Build the copy (module doc); returns dropped-constraint sentences."""
        import psycopg
        from psycopg import sql

        dropped: list[str] = []
        db, schema = split_location(location, self.settings.database)
        s = qi(schema)
        try:
            self._ensure_role()  # the reader role exists before the GRANTs
            self._create_database(db, schema)
            with pg_engine.connect(self.settings, admin=True, dbname=db) as conn:
                with conn.transaction():
                    for t in tables:
                        cols = []
                        for c in t.columns:
                            c.target_type = typemap.target_type("postgres", c)
                            cols.append(f"{qi(c.stored)} {c.target_type}")
                        conn.execute(f"CREATE TABLE {s}.{qi(t.stored)} ({', '.join(cols)})")
                        self._load(conn, s, t, source, reader)
                    for t in tables:
                        self._constraints(conn, s, t, tables, dropped)
                    role = sql.Identifier(self.settings.user)
                    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                        sql.Identifier(schema), role))
                    conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                        sql.Identifier(schema), role))
        except psycopg.Error as e:
            raise ReplicationError(f"postgres copy {location}: {e}") from e
        return dropped

    def carry_schema(self, location: str, tables: list[TableSpec], schema: str, stored: str) -> str:
        """Make ``<schema>.<table>`` resolve for a qualifier other than the copy's own schema
        (another schema of a PostgreSQL source, a DuckDB source's catalog name): a schema
        ``stored`` of this copy's database holding one view per table over the copy's schema,
        ``USAGE`` and ``SELECT`` granted to the reader. Returns the manifest sentence."""
        from psycopg import sql

        db, home = split_location(location, self.settings.database)
        if stored == home:
            return f"resolves: schema {home!r} of the replica"
        role, sch = sql.Identifier(self.settings.user), sql.Identifier(stored)
        with pg_engine.connect(self.settings, admin=True, dbname=db) as conn, conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sch))
            for t in tables:
                conn.execute(sql.SQL("CREATE VIEW {}.{} AS SELECT * FROM {}.{}").format(
                    sch, sql.Identifier(t.stored), sql.Identifier(home), sql.Identifier(t.stored)))
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sch, role))
            conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(sch, role))
        return f"resolves: schema {stored!r} of views over schema {home!r}"

    def _load(self, conn, s: str, t: TableSpec, source, reader) -> None:
        cols = ", ".join(qi(c.stored) for c in t.columns)
        with conn.cursor() as cur:
            with cur.copy(f"COPY {s}.{qi(t.stored)} ({cols}) FROM STDIN") as cp:
                for batch in reader.batches(source, t):
                    pycols = [c.to_pylist() for c in batch.columns]
                    for row in zip(*pycols):
                        cp.write_row(row)

    def _try(self, conn, ddl: str, what: str, dropped: list[str]) -> bool:
        import psycopg

        try:
            with conn.transaction():  # SAVEPOINT
                conn.execute(ddl)
            return True
        except psycopg.Error as e:
            dropped.append(f"{what}: {str(e).splitlines()[0]} [{e.sqlstate}]")
            return False

    def _constraints(self, conn, s: str, t: TableSpec, tables: list[TableSpec],
                     dropped: list[str]) -> None:
        tq = f"{s}.{qi(t.stored)}"
        if t.primary_key:
            self._try(conn, f"ALTER TABLE {tq} ADD PRIMARY KEY "
                            f"({', '.join(qi(t.stored_column(c)) for c in t.primary_key)})",
                      f"PRIMARY KEY {t.name}({', '.join(t.primary_key)})", dropped)
        for c in t.columns:
            if c.not_null and c.name not in t.primary_key:
                self._try(conn, f"ALTER TABLE {tq} ALTER COLUMN {qi(c.stored)} SET NOT NULL",
                          f"NOT NULL {t.name}.{c.name}", dropped)
        by_name = {x.name: x for x in tables}
        for fk in t.foreign_keys:
            what, parent_name, pcols, ccols, problem = resolve_foreign_key(t, fk, by_name)
            if problem:
                dropped.append(f"{what}: {problem}")
                continue
            parent = by_name[parent_name]
            self._try(conn, f"ALTER TABLE {tq} ADD FOREIGN KEY "
                            f"({', '.join(qi(t.stored_column(c)) for c in ccols)}) "
                            f"REFERENCES {s}.{qi(parent.stored)} "
                            f"({', '.join(qi(parent.stored_column(c)) for c in pcols)})",
                      what, dropped)

    def _connect(self, location: str):
        """Admin connection to the database of ``location``; None when it does not exist."""
        import psycopg

        db, _ = split_location(location, self.settings.database)
        self._ensure_role()
        try:
            return pg_engine.connect(self.settings, admin=True, dbname=db)
        except psycopg.OperationalError:
            with pg_engine.connect(self.settings, admin=True, dbname="postgres") as c:
                if c.execute("SELECT 1 FROM pg_database WHERE datname = %s", [db]).fetchone():
                    raise
            return None

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B from psycopg's Python values of the copy."""
        out = {}
        schema = split_location(location, self.settings.database)[1]
        conn = self._connect(location)
        if conn is None:
            raise ReplicationError(f"postgres copy {location} does not exist")
        with conn:
            for t in tables:
                cols = ", ".join(qi(c.stored) for c in t.columns)
                with conn.cursor() as cur:
                    cur.execute(f"SELECT {cols} FROM {qi(schema)}.{qi(t.stored)}")
                    out[t.name] = checksum_cursor(t, cur, chunk=10_000)
        return out

    def ensure_reader(self, location: str) -> None:
        """Before a copy is reused: harden its database again when the reader can still read
        or call one of ``engines.postgres.cluster_objects`` there (a copy built before these
        were revoked, or a server upgrade that added one); a no-op otherwise. Raises
        ReplicationError on server errors."""
        import psycopg

        db, _ = split_location(location, self.settings.database)
        try:
            with pg_engine.connect(self.settings, admin=True, dbname=db) as c:
                if pg_engine.exposed_objects(c, self.settings.user):
                    with c.transaction():
                        c.execute("SELECT pg_advisory_xact_lock(hashtext('polysql_ray:harden:' || current_database()))")
                        pg_engine.harden_database(c)
        except psycopg.Error as e:
            raise ReplicationError(f"postgres copy {location}: hardening for reuse: {e}") from e

    def fingerprint(self, location: str) -> str:
        """:func:`content_fingerprint` of the schema ("" when absent)."""
        schema = split_location(location, self.settings.database)[1]
        conn = self._connect(location)
        if conn is None:
            return ""
        with conn:
            cols = [tuple(r) for r in conn.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = %s ORDER BY table_name, ordinal_position", [schema])]

            def rows(t: str, cs: list[str]):
                cur = conn.cursor()
                cur.execute(f"SELECT {', '.join(map(qi, cs))} FROM {qi(schema)}.{qi(t)}")
                return cur

            return content_fingerprint(cols, rows)

    def drop(self, location: str) -> None:
        """Drop the copy's database (``<database>/<schema>``; a bare ``<schema>``, the layout
        before one database per copy, drops that schema of the configured database). No
        error when absent."""
        from psycopg import sql

        if "/" in location:
            db = split_location(location, self.settings.database)[0]
            with pg_engine.connect(self.settings, admin=True, dbname="postgres") as c:
                c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(db)))
            return
        with self._admin() as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {qi(location)} CASCADE")
