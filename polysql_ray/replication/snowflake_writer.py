"""Snowflake target writer: one schema ``PQ_<DATASET>_<DB_ID>`` per copy in ``database``.

As the admin role: ``CREATE DATABASE IF NOT EXISTS``, ``CREATE OR REPLACE SCHEMA``, one
``CREATE TABLE`` per table with the types of ``typemap.TARGET_TYPES["snowflake"]`` (NUMBER(38,0),
DOUBLE - 8 bytes in Snowflake -, VARCHAR, BINARY, NUMBER(p,s), BOOLEAN, DATE,
TIMESTAMP_NTZ) and the names the replication stage chose (``TableSpec.stored``, by ``engines.identifiers.replica_name_for``: (folded to upper
case where the source resolves names case-insensitively, so unquoted references in any case
resolve; always written quoted in DDL). NOT NULL is declared where the source declares it and
the data holds no NULL. PRIMARY/FOREIGN KEY are recorded as dropped (Snowflake does not
enforce them). Rows are inserted with the connector's bound multi-row INSERT. When ``role`` is
configured the reader role gets USAGE on database and schema and SELECT on its tables.

Fingerprint: ``replication.postgres.content_fingerprint`` over ``information_schema.columns``
and every row (recomputed at each reuse).
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import snowflake as sf
from polysql_ray.engines.servers import ServerSettings
from polysql_ray.replication import typemap
from polysql_ray.replication.base import ReplicationError, TableChecksum, TableSpec
from polysql_ray.replication.certificate import checksum_cursor
from polysql_ray.replication.postgres import content_fingerprint, qi

#: Rows per bound INSERT.
INSERT_BATCH = 2000


def stored_names(t: TableSpec) -> tuple[str, list[str]]:
    """(stored table name, stored column names) of ``t`` in a Snowflake replica, as the
    replication stage's naming step chose them (``engines.identifiers.replica_name_for``)."""
    return t.stored, [c.stored for c in t.columns]


class SnowflakeWriter:
    """:class:`~polysql_ray.replication.base.TargetWriter` for Snowflake."""

    engine = "snowflake"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **sf.DEFAULTS)
        self.settings = settings

    def _admin(self):
        con = sf.connect(self.settings, admin=True)
        con.cursor().execute(f"CREATE DATABASE IF NOT EXISTS {qi(self.settings.database)}")
        con.cursor().execute(f"USE DATABASE {qi(self.settings.database)}")
        return con

    def version(self) -> str:
        """``snowflake <CURRENT_VERSION()>`` (part of the reuse key)."""
        con = sf.connect(self.settings, admin=True)
        try:
            return "snowflake " + str(con.cursor().execute("SELECT CURRENT_VERSION()").fetchone()[0])
        finally:
            con.close()

    def location_for(self, dataset: str, db_id: str, replicas_dir: Path, tag: str = "",
                     schema: str = "") -> str:
        """Schema name ``PQ_<DATASET>_<DB_ID>_<TAG>``."""
        return sf.schema_name(dataset, db_id, tag)

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase, reader) -> list[str]:
        """Build the schema; returns dropped-constraint sentences."""
        import snowflake.connector.errors as sfe

        dropped: list[str] = []
        s = f"{qi(self.settings.database)}.{qi(location)}"
        con = self._admin()
        try:
            cur = con.cursor()
            cur.execute(f"CREATE OR REPLACE SCHEMA {s}")
            for t in tables:
                tname, cols = stored_names(t)
                nulls = self._null_columns(t, source, reader)
                parts = []
                for c, name in zip(t.columns, cols):
                    c.target_type = typemap.target_type(self.engine, c)
                    nn = c.not_null and c.name not in nulls
                    if c.not_null and not nn:
                        dropped.append(f"NOT NULL {t.name}.{c.name}: source holds NULLs")
                    parts.append(f"{qi(name)} {c.target_type}" + (" NOT NULL" if nn else ""))
                cur.execute(f"CREATE TABLE {s}.{qi(tname)} ({', '.join(parts)})")
                if t.primary_key:
                    dropped.append(f"PRIMARY KEY {t.name}({', '.join(t.primary_key)}): Snowflake does not enforce it")
                for fk in t.foreign_keys:
                    dropped.append(f"FOREIGN KEY {t.name}({', '.join(fk.columns)}) REFERENCES {fk.ref_table}: "
                                   f"Snowflake does not enforce it")
                self._load(cur, f"{s}.{qi(tname)}", len(cols), t, source, reader)
            role = self.settings.extra.get("role")
            if role:
                for g in (f"GRANT USAGE ON DATABASE {qi(self.settings.database)} TO ROLE {qi(role)}",
                          f"GRANT USAGE ON SCHEMA {s} TO ROLE {qi(role)}",
                          f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO ROLE {qi(role)}"):
                    cur.execute(g)
        except sfe.Error as e:
            raise ReplicationError(f"snowflake copy {location}: [{e.errno}] {e}") from e
        finally:
            con.close()
        return dropped

    def _null_columns(self, t: TableSpec, source, reader) -> set[str]:
        out = set()
        for batch in reader.batches(source, t):
            out |= {c.name for c, col in zip(t.columns, batch.columns) if col.null_count}
        return out

    def _load(self, cur, target: str, ncols: int, t: TableSpec, source, reader) -> None:
        sql = f"INSERT INTO {target} VALUES ({', '.join(['%s'] * ncols)})"
        for batch in reader.batches(source, t):
            rows = list(zip(*[c.to_pylist() for c in batch.columns]))
            for i in range(0, len(rows), INSERT_BATCH):
                cur.executemany(sql, rows[i:i + INSERT_BATCH])

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B from the connector's Python values of the copy."""
        out = {}
        con = self._admin()
        try:
            for t in tables:
                tname, cols = stored_names(t)
                cur = con.cursor()
                cur.execute(f"SELECT {', '.join(map(qi, cols))} FROM "
                            f"{qi(self.settings.database)}.{qi(location)}.{qi(tname)}")
                out[t.name] = checksum_cursor(t, cur, chunk=10_000)
        finally:
            con.close()
        return out

    def fingerprint(self, location: str) -> str:
        """Content fingerprint of the schema ("" when absent)."""
        con = self._admin()
        try:
            cur = con.cursor()
            cur.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = %s ORDER BY table_name, ordinal_position", (location,))
            cols = [tuple(r) for r in cur.fetchall()]

            def rows(t: str, cs: list[str]):
                c = con.cursor()
                c.execute(f"SELECT {', '.join(map(qi, cs))} FROM {qi(self.settings.database)}."
                          f"{qi(location)}.{qi(t)}")
                return c

            return content_fingerprint(cols, rows)
        finally:
            con.close()

    def drop(self, location: str) -> None:
        """``DROP SCHEMA IF EXISTS``."""
        con = self._admin()
        try:
            con.cursor().execute(f"DROP SCHEMA IF EXISTS {qi(self.settings.database)}.{qi(location)}")
        finally:
            con.close()
