"""DuckDB target writer: an exact copy in one ``.duckdb`` file.

Procedure (README "Replication"):

1. Load every table's Arrow batches from the reader into an in-memory *staging* catalog
   (``ATTACH ':memory:' AS polysql_staging``), no constraints: fast bulk load via Arrow.
2. Decide which constraints the data and DuckDB allow, with queries on the staging copy:
   PRIMARY KEY (no NULL, no duplicate key), NOT NULL, FOREIGN KEY (referenced table exists,
   referenced columns are its carried PK, column types equal, every non-NULL child key
   present in the parent, no cycle between tables). Each constraint that cannot be carried
   is dropped *alone* and recorded in the manifest with the reason.
3. Create the final tables in parent-before-child order with exactly the source identifiers,
   always double-quoted, never renamed, no added columns, then ``INSERT ... SELECT`` from
   staging. If DuckDB still refuses (e.g. a self-referencing FK, which DuckDB checks per
   statement), the offending FKs are dropped, recorded, and the table retried.
4. ``CHECKPOINT``, close, and move the file from ``<name>.tmp`` to its final path.

Location: ``<replicas_dir>/duckdb/<dataset>/<db_id>/<db_id>.duckdb``. Fingerprint: sha256 of
that file (DuckDB does not modify a file it opened read-only).
"""
from __future__ import annotations

import os
from pathlib import Path

import duckdb

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication import typemap
from polysql_ray.replication.base import (
    FileTargetWriter, ForeignKeySpec, ReplicationError, TableChecksum, TableSpec, remove_path,
)
from polysql_ray.replication.certificate import checksum_cursor
from polysql_ray.replication.constraints import carryable_not_null, carryable_primary_keys
from polysql_ray.replication.sqlite_reader import quote_ident as q

STAGING = "polysql_staging"


class DuckDBWriter(FileTargetWriter):
    """:class:`~polysql_ray.replication.base.TargetWriter` for DuckDB files."""

    engine = "duckdb"
    suffix = ".duckdb"
    temp_suffixes = (".tmp",)

    def version(self) -> str:
        """The duckdb library version (the storage format follows it)."""
        return duckdb.__version__

    def carry_schema(self, location: str, tables: list[TableSpec], schema: str, stored: str) -> str:
        """Tables live in schema ``main`` of the catalog named after the file (``<db_id>``);
        a source schema of another name (a MySQL database, a PostgreSQL schema) gets a schema
        of that name holding one view per table over ``main``, so ``<schema>.<table>``
        resolves as on the source (a name equal to the catalog's resolves already). Returns
        the manifest sentence."""
        if stored == "main":
            return "resolves: schema 'main' of the replica"
        catalog = Path(location).stem  # DuckDB names an opened file's catalog after its stem
        if stored.lower() == catalog.lower():
            return f"resolves: the replica file's catalog is {catalog!r}"
        con = duckdb.connect(location, config={"autoload_known_extensions": False,
                                               "autoinstall_known_extensions": False})
        try:
            con.execute(f"CREATE SCHEMA {q(catalog)}.{q(stored)}")
            for t in tables:
                con.execute(f"CREATE VIEW {q(catalog)}.{q(stored)}.{q(t.name)} AS "
                            f"SELECT * FROM {q(catalog)}.main.{q(t.name)}")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        return f"resolves: schema {stored!r} of views over schema 'main'"

    # ------------------------------------------------------------------ write

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase,
              reader) -> list[str]:
        """Build the copy (see module docstring). Returns the dropped-constraint sentences."""
        self.drop(location)
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        tmp = location + ".tmp"
        for t in tables:
            for c in t.columns:
                c.target_type = typemap.target_type(self.engine, c)
        dropped: list[str] = []
        con = duckdb.connect(tmp, config={"autoload_known_extensions": False,
                                          "autoinstall_known_extensions": False})
        try:
            con.execute(f"ATTACH ':memory:' AS {STAGING}")
            for t in tables:
                self._stage(con, t, source, reader)
            staged = lambda name: f"{STAGING}.{q(name)}"  # noqa: E731
            count = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
            pks = carryable_primary_keys(tables, staged, count, dropped)
            not_null = carryable_not_null(tables, staged, count, dropped)
            fks = self._carryable_fks(con, tables, pks, dropped)
            for t in self._order(tables, fks):
                self._create_and_fill(con, t, pks, not_null, fks, dropped)
            con.execute(f"DETACH {STAGING}")
            con.execute("CHECKPOINT")
        except duckdb.Error as e:
            con.close()
            self.drop(location)
            raise ReplicationError(f"DuckDB copy of {source.dataset}/{source.db_id} failed: {e}") from e
        except BaseException:
            con.close()
            self.drop(location)
            raise
        con.close()
        remove_path(tmp + ".wal")
        os.replace(tmp, location)
        return dropped

    def _stage(self, con, t: TableSpec, source, reader) -> None:
        cols = ", ".join(f"{q(c.name)} {c.target_type}" for c in t.columns)
        con.execute(f"CREATE TABLE {STAGING}.{q(t.name)} ({cols})")
        for batch in reader.batches(source, t):
            con.register("polysql_batch", batch)
            con.execute(f"INSERT INTO {STAGING}.{q(t.name)} SELECT * FROM polysql_batch")
            con.unregister("polysql_batch")

    def _carryable_fks(self, con, tables, pks, dropped) -> dict[str, list[tuple[ForeignKeySpec, str, tuple]]]:
        """table -> [(fk, resolved parent name, resolved parent columns)]."""
        by_fold = {t.name.casefold(): t for t in tables}
        out: dict[str, list] = {t.name: [] for t in tables}
        for t in tables:
            cols = {c.name.casefold(): c for c in t.columns}
            for fk in t.foreign_keys:
                what = (f"FOREIGN KEY {t.name}({', '.join(fk.columns)}) REFERENCES "
                        f"{fk.ref_table}({', '.join(fk.ref_columns)})")
                parent = by_fold.get(fk.ref_table.casefold())
                if parent is None:
                    dropped.append(f"{what}: referenced table does not exist")
                    continue
                pcols = {c.name.casefold(): c for c in parent.columns}
                ref = fk.ref_columns or pks.get(parent.name, ())
                if any(c.casefold() not in cols for c in fk.columns) or \
                        any(c.casefold() not in pcols for c in ref) or len(ref) != len(fk.columns):
                    dropped.append(f"{what}: a referenced or referencing column does not exist")
                    continue
                ref = tuple(pcols[c.casefold()].name for c in ref)
                child_cols = tuple(cols[c.casefold()].name for c in fk.columns)
                ppk = pks.get(parent.name)
                if ppk is None or {c.casefold() for c in ppk} != {c.casefold() for c in ref} \
                        or len(ppk) != len(ref):
                    dropped.append(f"{what}: referenced columns are not the parent's carried "
                                   f"primary key (DuckDB requires a PRIMARY KEY/UNIQUE target)")
                    continue
                ctypes = [cols[c.casefold()].target_type for c in fk.columns]
                ptypes = [pcols[c.casefold()].target_type for c in ref]
                if ctypes != ptypes:
                    dropped.append(f"{what}: column types differ in the copy ({ctypes} vs {ptypes})")
                    continue
                cond = " AND ".join(f"p.{q(pc)} = c.{q(cc)}" for pc, cc in zip(ref, child_cols))
                nonnull = " AND ".join(f"c.{q(cc)} IS NOT NULL" for cc in child_cols)
                orphans = con.execute(
                    f"SELECT count(*) FROM {STAGING}.{q(t.name)} c WHERE {nonnull} AND NOT EXISTS "
                    f"(SELECT 1 FROM {STAGING}.{q(parent.name)} p WHERE {cond})").fetchone()[0]
                if orphans:
                    dropped.append(f"{what}: source data violates it ({orphans} child rows "
                                   f"without a parent row)")
                    continue
                out[t.name].append((fk, parent.name, ref, child_cols))
        return out

    def _order(self, tables, fks) -> list[TableSpec]:
        """Parents before children (source order otherwise); FKs on a cycle are dropped by
        the caller's retry (DuckDB cannot create them)."""
        done, order, by_name = set(), [], {t.name: t for t in tables}
        pending = list(tables)
        while pending:
            progress = False
            for t in list(pending):
                parents = {p for _, p, _, _ in fks[t.name] if p != t.name}
                if parents <= done:
                    order.append(t)
                    done.add(t.name)
                    pending.remove(t)
                    progress = True
            if not progress:  # cycle: break it by creating the first pending table anyway
                t = pending.pop(0)
                order.append(t)
                done.add(t.name)
        return [by_name[t.name] for t in order]

    def _create_and_fill(self, con, t, pks, not_null, fks, dropped) -> None:
        def ddl(fk_list):
            parts = [f"{q(c.name)} {c.target_type}" + (" NOT NULL" if c.name in not_null[t.name] else "")
                     for c in t.columns]
            if t.name in pks:
                parts.append(f"PRIMARY KEY ({', '.join(q(c) for c in pks[t.name])})")
            for fk, parent, ref, child_cols in fk_list:
                parts.append(f"FOREIGN KEY ({', '.join(q(c) for c in child_cols)}) REFERENCES "
                             f"{q(parent)} ({', '.join(q(c) for c in ref)})")
            return f"CREATE TABLE {q(t.name)} ({', '.join(parts)})"

        candidates = list(fks[t.name])
        attempts = [candidates,
                    [f for f in candidates if f[1] != t.name],  # without self-references
                    []]
        last_error = None
        for fk_list in attempts:
            try:
                con.execute("BEGIN")
                con.execute(ddl(fk_list))
                con.execute(f"INSERT INTO {q(t.name)} SELECT * FROM {STAGING}.{q(t.name)}")
                con.execute("COMMIT")
            except duckdb.Error as e:
                con.execute("ROLLBACK")
                last_error = e
                continue
            for fk, parent, ref, child_cols in candidates:
                if (fk, parent, ref, child_cols) not in fk_list:
                    dropped.append(
                        f"FOREIGN KEY {t.name}({', '.join(child_cols)}) REFERENCES {parent}"
                        f"({', '.join(ref)}): DuckDB refused it ({str(last_error).splitlines()[0]})")
            return
        raise ReplicationError(f"cannot create table {t.name!r} in DuckDB: {last_error}")

    # ------------------------------------------------------------------ verify

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B: read the copy back (read-only) and checksum Python values."""
        con = duckdb.connect(location, read_only=True)
        try:
            out = {}
            for t in tables:
                cols = ", ".join(q(c.name) for c in t.columns)
                out[t.name] = checksum_cursor(t, con.execute(f"SELECT {cols} FROM {q(t.name)}"))
            return out
        except duckdb.Error as e:
            raise ReplicationError(f"checksumming DuckDB copy {location}: {e}") from e
        finally:
            con.close()

    def column_types(self, location: str) -> dict[tuple[str, str], str]:
        """(table, column) -> DuckDB type as the copy reports it (for tests/tools)."""
        con = duckdb.connect(location, read_only=True)
        try:
            return {(t, c): ty for t, c, ty in con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns "
                "WHERE table_schema = 'main'").fetchall()}
        finally:
            con.close()
