"""MySQL / MariaDB target writer: an exact copy of a source database in one database.

Layout: database ``pq_<dataset>_<db_id>`` (``servers.replica_name``), InnoDB tables, charset
``utf8mb4`` with the *server's default collation* (MariaDB 10.11: ``utf8mb4_general_ci``):
case-/accent-insensitive comparison is MySQL semantics that predictions must face
(README "Comparison policy in brief"), so it is kept, not hidden. A key whose values collide under
that collation cannot be carried and is recorded as dropped.

Type map (``typemap.TARGET_TYPES["mysql"]`` refined here, as data in :data:`KEY_TEXT_MAX_CHARS`):

* BIGINT -> BIGINT, DOUBLE -> DOUBLE (8 bytes), BLOB -> LONGBLOB, DECIMAL -> DECIMAL(p,s),
  DATE -> DATE, TIMESTAMP -> DATETIME(6).
* VARCHAR -> LONGTEXT, except text columns that take part in a PRIMARY/FOREIGN KEY: MySQL
  cannot index TEXT without a prefix length, so those become ``VARCHAR(n)`` with ``n`` the
  longest value in the data (at least 1; characters, not bytes). Beyond
  :data:`KEY_TEXT_MAX_CHARS` (InnoDB's 3072-byte key limit / 4 bytes per utf8mb4 char) the
  column stays LONGTEXT and its keys are dropped and recorded. Both types compare with the
  same PAD SPACE collation, so results do not depend on the choice.

Identifiers: exactly the source's, always backquoted. Column names are always
case-insensitive in MySQL. Table names follow the server's ``lower_case_table_names``
(recorded in the manifest's ``server_settings``): with 0 they are case-sensitive and only the
source spelling resolves (Spider gold ran on 70.4% of dev questions, mostly failing on
``FROM Singer`` for table ``singer``); with 1 the server stores them in lower case and any
spelling resolves, as on an SQLite source (96.6%). Run MariaDB with
``lower_case_table_names=1`` (``.ci/run`` does); two tables whose names differ only in case
cannot coexist there and such a copy is refused.

Declared types (``typemap``): INTEGER -> INT, SMALLINT, DATE, TIMESTAMP -> DATETIME(6), BOOLEAN,
DECIMAL(p,s), VARCHAR(n) (LONGTEXT for the non-key ones of a table whose declared lengths would
pass :data:`ROW_VARCHAR_MAX_BYTES`).

Procedure: ``DROP DATABASE IF EXISTS`` / ``CREATE DATABASE``; tables without constraints;
batched multi-row ``INSERT`` (PyMySQL ``executemany``; floats sent as ``repr``, exact);
then, with ``FOREIGN_KEY_CHECKS=1`` so the server validates existing rows, PRIMARY KEY,
NOT NULL and FOREIGN KEY one by one; each one the server refuses (duplicates, NULLs,
orphans, type mismatch) is dropped alone and recorded with the server's message. DDL is not
transactional in MySQL: on any failure the database is dropped by ``replicate``.
Then ``GRANT SELECT ON db.*`` to the reader user (:func:`ensure_reader_user`).
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import mysql as my_engine
from polysql_ray.engines.servers import ServerSettings, replica_name
from polysql_ray.replication import typemap
from polysql_ray.replication.base import ReplicationError, TableChecksum, TableSpec
from polysql_ray.replication.certificate import checksum_cursor
from polysql_ray.replication.constraints import resolve_foreign_key, resolve_name
from polysql_ray.replication.postgres import content_fingerprint

#: Longest VARCHAR (characters) a key column may get: 3072-byte InnoDB key / 4 bytes.
KEY_TEXT_MAX_CHARS = 768

#: Bytes the declared VARCHAR(n) columns of one table may take (utf8mb4: 4 bytes a character)
#: before its non-key ones become LONGTEXT: InnoDB refuses rows wider than 65,535 bytes.
ROW_VARCHAR_MAX_BYTES = 60_000

#: Rows per multi-row INSERT.
INSERT_BATCH_ROWS = 2_000

#: MariaDB-only per-user backstop on statement time (seconds); the engine sets its own.
READER_MAX_STATEMENT_TIME_S = 300


def bq(name: str) -> str:
    """Backquote a MySQL identifier (inner backquotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


def ensure_reader_user(settings: ServerSettings, cur, flavour: str) -> str:
    """Create/refresh the reader user ``'<user>'@'<reader_host>'`` (admin cursor).

    ``reader_host`` comes from ``settings.extra`` (default ``%``). Password from the reader
    secret ('' when none). No global privileges (USAGE only); MariaDB also gets
    ``MAX_STATEMENT_TIME`` as a backstop. Returns the account string for GRANTs.
    """
    host = settings.extra.get("reader_host", "%")
    account = f"'{settings.user}'@'{host}'"
    pw = settings.reader_password() or ""
    fmt = account.replace("%", "%%")  # PyMySQL formats with %
    cur.execute(f"CREATE USER IF NOT EXISTS {fmt} IDENTIFIED BY %s", (pw,))
    cur.execute(f"ALTER USER {fmt} IDENTIFIED BY %s", (pw,))
    if flavour == "mariadb":
        cur.execute(f"ALTER USER {account} WITH MAX_STATEMENT_TIME {READER_MAX_STATEMENT_TIME_S}")
    return account


class MySQLWriter:
    """:class:`~polysql_ray.replication.base.TargetWriter` for MySQL/MariaDB (module doc).

    Args:
        settings: :class:`ServerSettings` or config dict; default ``engines.mysql.DEFAULTS``.
    """

    engine = "mysql"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **my_engine.DEFAULTS)
        self.settings = settings

    def __repr__(self) -> str:
        return f"MySQLWriter({self.settings.admin_user}@{self.settings.host}:{self.settings.port})"

    def _admin(self, database: str | None = None):
        return my_engine.connect_raw(self.settings, admin=True, database=database)

    def version(self) -> str:
        """``@@version`` (e.g. ``10.11.19-MariaDB-0+deb12u1``)."""
        with self._admin() as c, c.cursor() as cur:
            cur.execute("SELECT @@version")
            return "mysql " + cur.fetchone()[0]

    def location_for(self, dataset: str, db_id: str, replicas_dir: Path, tag: str = "",
                     schema: str = "") -> str:
        """Database name ``pq_<dataset>_<db_id>_<tag>`` (``servers.replica_name``)."""
        return replica_name(dataset, db_id, tag=tag)

    def server_settings(self) -> dict:
        """Server facts the copy depends on: ``lower_case_table_names`` (0: table names are
        case-sensitive, so only the source spelling resolves; 1: the server stores them in
        lower case and resolves any spelling, as the SQLite source does)."""
        with self._admin() as c, c.cursor() as cur:
            cur.execute("SELECT @@lower_case_table_names")
            return {"lower_case_table_names": int(cur.fetchone()[0])}

    # ------------------------------------------------------------------ write
    def _key_columns(self, t: TableSpec) -> set[str]:
        cols = set(t.primary_key)
        for fk in t.foreign_keys:
            cols.update(fk.columns)
        return cols

    def _referenced_columns(self, tables: list[TableSpec]) -> dict[str, set[str]]:
        by_name = {t.name: t for t in tables}
        out: dict[str, set[str]] = {}
        for t in tables:
            for fk in t.foreign_keys:
                p = resolve_name(fk.ref_table, by_name)
                if p:
                    out.setdefault(p, set()).update(fk.ref_columns or by_name[p].primary_key)
        return out

    def _max_chars(self, t: TableSpec, names: set[str], source, reader) -> dict[str, int]:
        idx = {c.name: i for i, c in enumerate(t.columns) if c.name in names}
        out = {n: 1 for n in idx}
        for batch in reader.batches(source, t):
            for n, i in idx.items():
                for v in batch.column(i).to_pylist():
                    if v is not None and len(v) > out[n]:
                        out[n] = len(v)
        return out

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase,
              reader) -> list[str]:
        """Build the copy (module doc); returns dropped-constraint sentences."""
        import pymysql

        dropped: list[str] = []
        db = bq(location)
        try:
            with self._admin() as conn, conn.cursor() as cur:
                flavour = my_engine.server_flavour(conn)
                cur.execute("SELECT @@lower_case_table_names")
                lctn = int(cur.fetchone()[0])
                if lctn:
                    low = [t.name.lower() for t in tables]
                    if len(set(low)) != len(low):
                        raise ReplicationError(
                            f"{location}: table names differ only in case and the server has "
                            f"lower_case_table_names={lctn}")
                # parallel replication tasks: serialize the account DDL across connections
                cur.execute("SELECT GET_LOCK('polysql_ray:reader_user', 60)")
                try:
                    account = ensure_reader_user(self.settings, cur, flavour)
                finally:
                    cur.execute("SELECT RELEASE_LOCK('polysql_ray:reader_user')")
                cur.execute(f"DROP DATABASE IF EXISTS {db}")
                cur.execute(f"CREATE DATABASE {db} CHARACTER SET utf8mb4")
                conn.select_db(location)
                referenced = self._referenced_columns(tables)
                too_long: set[tuple[str, str]] = set()
                for t in tables:
                    keyed = self._key_columns(t) | {resolve_name(c, [x.name for x in t.columns])
                                                    for c in referenced.get(t.name, ())}
                    text_keys = {c.name for c in t.columns
                                 if c.name in keyed and c.logical_type == "VARCHAR"}
                    sizes = self._max_chars(t, text_keys, source, reader) if text_keys else {}
                    cols = []
                    wide = sum(4 * (c.length or 0) for c in t.columns
                               if c.logical_type == "VARCHAR") > ROW_VARCHAR_MAX_BYTES
                    for c in t.columns:
                        c.target_type = typemap.target_type("mysql", c)
                        if wide and c.length and c.name not in sizes:
                            c.target_type = typemap.TARGET_TYPES["mysql"]["VARCHAR"]
                        if c.name in sizes and c.length and c.length <= KEY_TEXT_MAX_CHARS:
                            pass  # declared VARCHAR(n) holds every value and can be indexed
                        elif c.name in sizes:
                            if sizes[c.name] <= KEY_TEXT_MAX_CHARS:
                                c.target_type = f"VARCHAR({sizes[c.name]})"
                            else:
                                too_long.add((t.name, c.name))
                        cols.append(f"{bq(c.name)} {c.target_type}")
                    cur.execute(f"CREATE TABLE {bq(t.name)} ({', '.join(cols)}) ENGINE=InnoDB")
                    self._load(cur, t, source, reader)
                cur.execute("SET SESSION foreign_key_checks = 1")
                for t in tables:
                    self._constraints(cur, t, tables, too_long, dropped)
                cur.execute(f"GRANT SELECT ON {db}.* TO {account}")
        except pymysql.err.MySQLError as e:
            raise ReplicationError(f"mysql copy {location}: {e}") from e
        return dropped

    def _load(self, cur, t: TableSpec, source, reader) -> None:
        cols = ", ".join(bq(c.name) for c in t.columns)
        marks = ", ".join(["%s"] * len(t.columns))
        stmt = f"INSERT INTO {bq(t.name)} ({cols}) VALUES ({marks})"
        for batch in reader.batches(source, t):
            pycols = [c.to_pylist() for c in batch.columns]
            rows = list(zip(*pycols))
            for i in range(0, len(rows), INSERT_BATCH_ROWS):
                cur.executemany(stmt, rows[i:i + INSERT_BATCH_ROWS])

    def _try(self, cur, ddl: str, what: str, dropped: list[str]) -> bool:
        import pymysql

        try:
            cur.execute(ddl)
            return True
        except pymysql.err.MySQLError as e:
            dropped.append(f"{what}: {e.args[1] if len(e.args) > 1 else e} [{e.args[0]}]")
            return False

    def _constraints(self, cur, t: TableSpec, tables: list[TableSpec],
                     too_long: set[tuple[str, str]], dropped: list[str]) -> None:
        tq = bq(t.name)
        long_cols = {c for (tn, c) in too_long if tn == t.name}
        if t.primary_key:
            what = f"PRIMARY KEY {t.name}({', '.join(t.primary_key)})"
            if long_cols & set(t.primary_key):
                dropped.append(f"{what}: text longer than {KEY_TEXT_MAX_CHARS} characters "
                               f"cannot be indexed in MySQL")
            else:
                self._try(cur, f"ALTER TABLE {tq} ADD PRIMARY KEY "
                               f"({', '.join(bq(c) for c in t.primary_key)})", what, dropped)
        for c in t.columns:
            if c.not_null and c.name not in t.primary_key:
                self._try(cur, f"ALTER TABLE {tq} MODIFY {bq(c.name)} {c.target_type} NOT NULL",
                          f"NOT NULL {t.name}.{c.name}", dropped)
        by_name = {x.name: x for x in tables}
        for fk in t.foreign_keys:
            what, parent_name, pcols, ccols, problem = resolve_foreign_key(t, fk, by_name)
            if problem:
                dropped.append(f"{what}: {problem}")
                continue
            if long_cols & set(ccols) or {(parent_name, c) for c in pcols} & too_long:
                dropped.append(f"{what}: text longer than {KEY_TEXT_MAX_CHARS} characters "
                               f"cannot be indexed in MySQL")
                continue
            self._try(cur, f"ALTER TABLE {tq} ADD FOREIGN KEY ({', '.join(map(bq, ccols))}) "
                           f"REFERENCES {bq(parent_name)} ({', '.join(map(bq, pcols))})",
                      what, dropped)

    # ------------------------------------------------------------------ verify
    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B from PyMySQL's Python values of the copy."""
        out = {}
        with self._admin(location) as conn, conn.cursor() as cur:
            for t in tables:
                cur.execute(f"SELECT {', '.join(bq(c.name) for c in t.columns)} FROM {bq(t.name)}")
                out[t.name] = checksum_cursor(t, cur)
        return out

    def fingerprint(self, location: str) -> str:
        """``postgres.content_fingerprint`` of the database ("" when absent)."""
        return mysql_fingerprint(self.settings, location)

    def carry_schema(self, location: str, tables: list[TableSpec], schema: str, stored: str) -> str:
        """Make ``<schema>.<table>`` resolve: MySQL has no schemas, so an *alias database*
        named ``stored`` (the source's schema/database name under the server's table-name
        rule) holds one view per table over this copy (``SQL SECURITY DEFINER``, ``SELECT``
        granted to the reader). The alias is claimed by a database comment naming this copy;
        one held by anything else (another copy, another content, a user's database) is never
        touched, and the sentence says so (qualified names are then unavailable here); a
        claim whose copy no longer exists (a killed run) is stale and taken over.
        :meth:`drop` drops the aliases a copy claimed. Returns the manifest sentence."""
        import pymysql

        if stored.lower() == location.lower():
            return f"resolves: the replica database is {location!r}"
        claim = alias_claim(location)
        with self._admin() as conn, conn.cursor() as cur:
            for _ in range(2):
                try:
                    cur.execute(f"CREATE DATABASE {bq(stored)} CHARACTER SET utf8mb4 COMMENT %s", (claim,))
                except pymysql.err.MySQLError as e:
                    if e.args[0] != 1007:  # ER_DB_CREATE_EXISTS: see who holds it
                        raise
                cur.execute("SELECT schema_comment FROM information_schema.schemata "
                            "WHERE schema_name = %s", (stored,))
                row = cur.fetchone()
                owner = (row[0] or "")[len(alias_claim("")):] if row and (row[0] or "").startswith(
                    alias_claim("")) else None
                if owner is None or owner == location or self._exists(cur, owner):
                    break
                # a stale claim: the copy that made it is gone (a killed run); take it over
                cur.execute(f"DROP DATABASE IF EXISTS {bq(stored)}")
            if row is None or row[0] != claim:
                holder = (row[0] if row and row[0] else "a database that is not a polysql alias")
                return (f"unavailable: database {stored!r} on the server is held by {holder}; "
                        f"it is left alone, so {schema}.<table> does not resolve on this copy")
            for t in tables:
                cur.execute(f"CREATE OR REPLACE SQL SECURITY DEFINER VIEW {bq(stored)}.{bq(t.name)} "
                            f"AS SELECT * FROM {bq(location)}.{bq(t.name)}")
            host = self.settings.extra.get("reader_host", "%")
            cur.execute(f"GRANT SELECT ON {bq(stored)}.* TO '{self.settings.user}'@'{host}'")
        return (f"resolves: alias database {stored!r} of views over {location!r}, "
                f"claimed for this copy")

    @staticmethod
    def _exists(cur, database: str) -> bool:
        cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (database,))
        return cur.fetchone() is not None

    def drop(self, location: str) -> None:
        """``DROP DATABASE IF EXISTS``, with the alias databases this copy claimed."""
        with self._admin() as conn, conn.cursor() as cur:
            cur.execute("SELECT schema_name FROM information_schema.schemata "
                        "WHERE schema_comment = %s", (alias_claim(location),))
            for (alias,) in cur.fetchall():
                cur.execute(f"DROP DATABASE IF EXISTS {bq(alias)}")
            cur.execute(f"DROP DATABASE IF EXISTS {bq(location)}")


def alias_claim(location: str) -> str:
    """Comment of an alias database that the copy ``location`` claimed (``carry_schema``)."""
    return f"polysql alias of {location}"


def mysql_fingerprint(settings: ServerSettings, database: str) -> str:
    """Content fingerprint (schema + all rows) of a MySQL database, as admin; "" if absent."""
    with my_engine.connect_raw(settings, admin=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT table_name, column_name, column_type FROM information_schema.columns "
                    "WHERE table_schema = %s ORDER BY table_name, ordinal_position", (database,))
        cols = [tuple(r) for r in cur.fetchall()]

        def rows(t: str, cs: list[str]):
            cur.execute(f"SELECT {', '.join(map(bq, cs))} FROM {bq(database)}.{bq(t)}")
            return cur.fetchall()

        return content_fingerprint(cols, rows)
