"""ClickHouse target writer: a replica folder that any process loads into its own chdb server.

chdb allows one data path per process and a path is locked by the process that opened it, so a
replica cannot be one shared ClickHouse data folder. Its durable form (``location``) is a folder

* ``replica.json``: per table its exact source name, the ClickHouse column types
  (``typemap.TARGET_TYPES["clickhouse"]`` wrapped in ``Nullable(...)`` unless the source
  declares NOT NULL and holds no NULL), row count and data file; the table engine; a content id;
* ``<i>.arrow``: the reader's batches of table ``i`` (logical Arrow types), as Arrow IPC.

:func:`polysql_ray.engines.clickhouse.load_replica` turns it into one ClickHouse *database*
(``CREATE TABLE`` + ``INSERT ... SELECT FROM file(..., 'Arrow')``, ClickHouse doing every
conversion). The certificate is computed on that database, loaded in the replicating process
by the same function the execution actors use, read back as ClickHouse's Arrow output.

Keys: ClickHouse enforces no PRIMARY KEY uniqueness and no FOREIGN KEY; each is recorded as
dropped. Identifiers are kept exactly (ClickHouse resolves table and column names
case-sensitively, so a prediction spelling ``Singer`` for ``singer`` fails there, as it would
on a real ClickHouse). Fingerprint: sha256 of ``replica.json`` (which holds each file's sha256).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pyarrow as pa

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines import clickhouse as ch
from polysql_ray.replication import typemap
from polysql_ray.replication.base import (
    FileTargetWriter, ReplicationError, TableChecksum, TableSpec, file_sha256, remove_path,
)
from polysql_ray.replication.certificate import ChecksumAccumulator


def _naive_utc(v):
    return v if v is None or getattr(v, "tzinfo", None) is None else v.replace(tzinfo=None)


#: Logical type -> converter from ClickHouse's Arrow value back to the logical value
#: (session time zone is UTC, so DateTime64 values come back tz-aware UTC).
CONVERTERS = {"TIMESTAMP": _naive_utc}


class ClickHouseWriter(FileTargetWriter):
    """:class:`~polysql_ray.replication.base.TargetWriter` for ClickHouse (chdb) replicas."""

    engine = "clickhouse"
    suffix = ".clickhouse"
    temp_suffixes = (".tmp",)

    def version(self) -> str:
        """``chdb <version> / ClickHouse <engine version>`` (part of the reuse key)."""
        from polysql_ray.extras import require

        chdb = require("chdb", "the clickhouse engine")

        return f"chdb {chdb.__version__} / ClickHouse {chdb.engine_version}"

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase,
              reader) -> list[str]:
        """Write the replica folder (see module docstring); returns dropped-constraint sentences."""
        self.drop(location)
        tmp = Path(location + ".tmp")
        tmp.mkdir(parents=True)
        dropped: list[str] = []
        specs, files = [], {}
        try:
            for i, t in enumerate(tables):
                name = f"{i}.arrow"
                rows, nulls = self._write_table(tmp / name, t, source, reader)
                cols = []
                for c in t.columns:
                    base = typemap.target_type(self.engine, c)
                    nullable = not c.not_null or nulls[c.name] > 0
                    if c.not_null and nulls[c.name]:
                        dropped.append(f"NOT NULL {t.name}.{c.name}: source holds {nulls[c.name]} NULLs")
                    c.target_type = f"Nullable({base})" if nullable else base
                    cols.append((c.stored, c.target_type))
                if t.primary_key:
                    dropped.append(f"PRIMARY KEY {t.name}({', '.join(t.primary_key)}): ClickHouse "
                                   f"enforces no uniqueness (a MergeTree key only sorts)")
                for fk in t.foreign_keys:
                    dropped.append(f"FOREIGN KEY {t.name}({', '.join(fk.columns)}) REFERENCES "
                                   f"{fk.ref_table}({', '.join(fk.ref_columns)}): ClickHouse has no "
                                   f"foreign keys")
                specs.append({"name": t.stored, "file": name, "rows": rows, "columns": cols})
                files[name] = file_sha256(tmp / name)
            spec = {"format": 1, "table_engine": ch.TABLE_ENGINE, "tables": specs, "files": files,
                    "content_id": ch.content_id(files, specs, ch.TABLE_ENGINE)}
            (tmp / "replica.json").write_text(json.dumps(spec, indent=1, sort_keys=True))
            os.replace(tmp, location)
        except BaseException:
            remove_path(tmp)
            raise
        return dropped

    def _write_table(self, path: Path, t: TableSpec, source, reader) -> tuple[int, dict[str, int]]:
        schema = t.arrow_schema()
        rows, nulls = 0, {c.name: 0 for c in t.columns}
        with pa.ipc.new_file(str(path), schema) as out:
            for batch in reader.batches(source, t):
                out.write_batch(batch)
                rows += batch.num_rows
                for c, col in zip(t.columns, batch.columns):
                    nulls[c.name] += col.null_count
        return rows, nulls

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B: load the folder into ClickHouse and checksum what it returns."""
        try:
            spec = ch.read_replica_spec(location)
            db = ch.load_replica(location, spec)
        except Exception as e:
            raise ReplicationError(f"loading ClickHouse replica {location}: {e}") from e
        con = ch._loader()
        out = {}
        try:
            for t in tables:
                cols = ", ".join(ch.quote(c.stored) for c in t.columns)
                table = ch.arrow_result(con.query(
                    f"SELECT {cols} FROM {ch.quote(db)}.{ch.quote(t.stored)}", "Arrow").bytes())
                acc = ChecksumAccumulator(t)
                pycols = []
                for c, col in zip(t.columns, table.columns):
                    if c.logical_type == "BLOB" and not pa.types.is_binary(col.type):
                        col = col.cast(pa.binary())
                    conv = CONVERTERS.get(c.logical_type)
                    vals = col.to_pylist()
                    pycols.append([conv(v) for v in vals] if conv else vals)
                acc.add_rows(list(zip(*pycols)) if pycols else [()] * table.num_rows)
                out[t.name] = acc.result()
        except Exception as e:
            raise ReplicationError(f"checksumming ClickHouse replica {location}: {e}") from e
        finally:
            ch.drop_loaded(db)  # the replicating process keeps nothing; actors load their own
        return out

    def fingerprint(self, location: str) -> str:
        """sha256 of ``replica.json`` plus a re-hash of every data file ("" when absent or
        when a file no longer matches)."""
        try:
            spec = ch.read_replica_spec(location)
            for name, digest in spec["files"].items():
                if file_sha256(Path(location) / name) != digest:
                    return ""
        except (OSError, ValueError, KeyError):
            return ""
        return hashlib.sha256((Path(location) / "replica.json").read_bytes()).hexdigest()

    def column_types(self, location: str) -> dict[tuple[str, str], str]:
        """(table, column) -> ClickHouse type as the loaded database reports it (tests/tools)."""
        db = ch.load_replica(location)
        text = ch._loader().query(
            f"SELECT table, name, type FROM system.columns WHERE database = '{db}'", "TSV").bytes().decode()
        return {(t, c): ty for t, c, ty in (line.split("\t") for line in text.splitlines() if line)}
