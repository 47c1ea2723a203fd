"""Replication ("backend isomorphism"): copy a source database exactly into a target engine.

PolySQL (arXiv 2605.07796) runs gold SQL on the source database and predicted SQL on the
*same data* in the target engine, and the copy must *mean* what the source means: names resolve
as on the source (``engines.identifiers``, applied by ``naming.assign``: a PostgreSQL copy of
an SQLite source stores folded lower-case names), declared types are kept where every value
conforms (``typemap``, ``replication.types``), keys are carried, nothing is added, every copy
is verified (row counts, per-column checksums) and a copy is reused only when its manifest
matches. Sources install through ``sources.prepare`` (the replication stage's job).

The stage is split into small pieces behind protocols so that sources and targets combine
freely (sqlite->duckdb today; sqlite->postgres/mysql/clickhouse and mysql->* later):

* :class:`SourceReader` (one per *source* engine, e.g. ``sqlite_reader.SqliteReader``) reads the
  schema (:class:`TableSpec` / :class:`ColumnSpec`, with the source's declared types and the
  *logical* type chosen from the declared type and the values really stored) and streams the
  raw values as Arrow record batches typed by the logical types.
* :class:`TargetWriter` (one per *target* engine, e.g. ``duckdb_writer.DuckDBWriter``) maps logical
  types to target types (``typemap.TARGET_TYPES``), creates the tables with the exact
  identifiers (always quoted), loads the batches, carries keys where it can and records the
  constraints it had to drop.
* ``certificate.py`` computes engine-independent row counts and per-column checksums on both
  sides; the :class:`Manifest` (JSON beside the copy) records them with every choice made.

Readers and writers are looked up by engine name in :data:`READERS` / :data:`WRITERS`, two
plain tables of ``"module:Class"`` strings (imported lazily), so adding a target is one new
module plus one line here.

Logical types (the vocabulary between readers and writers; see ``typemap.py``):
``SMALLINT``/``INTEGER``/``BIGINT`` (16/32/64-bit signed int), ``DOUBLE`` (IEEE 8-byte
float), ``DECIMAL`` (exact decimal, ``ColumnSpec.precision``/``scale``), ``VARCHAR`` (UTF-8
text, ``ColumnSpec.length`` when declared), ``BLOB`` (bytes), ``BOOLEAN``, ``DATE``,
``TIMESTAMP``. A SQLite source in ``storage`` mode only produces BIGINT, DOUBLE, VARCHAR and
BLOB (its storage classes); ``declared`` mode keeps the others where the values conform.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol, runtime_checkable

import pyarrow as pa

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines.declaration import DeclaredTable
from polysql_ray.errors import ReplicationError  # noqa: F401 (re-exported)
from polysql_ray.replication.spec import (  # noqa: F401 (the data model, re-exported)
    ColumnChecksum, ColumnSpec, ForeignKeySpec, Manifest, TableChecksum, TableSpec,
)

#: Version of the replication procedure itself (reader/writer/certificate behaviour). Bump it
#: whenever a change could make a copy differ; a bump invalidates every existing copy.
REPLICATION_VERSION = "3"

#: Source engine name -> "module:Class" of its :class:`SourceReader` (declared by each
#: engine class as ``reader``; a read-through view of the declarations).
READERS: DeclaredTable = DeclaredTable(lambda cls: cls.reader)

#: Target engine name -> "module:Class" of its :class:`TargetWriter` (declared as ``writer``).
WRITERS: DeclaredTable = DeclaredTable(lambda cls: cls.writer)


@dataclass(frozen=True)
class Replica:
    """A verified copy of one source database in one target engine.

    Attributes:
        engine: target engine name (what ``engines.registry.make_engine`` takes).
        dataset, db_id: identifiers of the source database.
        location: what the target engine's ``Engine.execute`` takes as ``location`` (file
            path for embedded engines, database name for servers).
        manifest: the copy's manifest.
        manifest_path: where the manifest JSON lives.
        reused: True when an existing verified copy was reused.
    """

    engine: str
    dataset: str
    db_id: str
    location: str
    manifest: Manifest
    manifest_path: Path
    reused: bool = False


# --------------------------------------------------------------------------- protocols


@runtime_checkable
class SourceReader(Protocol):
    """Reads one source database: schema + raw values, no guessing from declared types.

    Attributes:
        engine: source engine name (``sqlite``).
    """

    engine: str

    def content_hash(self, source: SourceDatabase) -> str:
        """Hash identifying the source's content (sha256 hex of the file for SQLite)."""
        ...

    def read_schema(self, source: SourceDatabase, types: str = "declared"
                    ) -> tuple[list[TableSpec], list[str]]:
        """Tables (in source order, logical types chosen per ``types``) and skipped objects.

        Raises :class:`ReplicationError` when the source is missing or unreadable.
        """
        ...

    def batches(self, source: SourceDatabase, table: TableSpec,
                batch_rows: int = 65_536) -> Iterator[pa.RecordBatch]:
        """Stream the table's rows as record batches with schema ``table.arrow_schema()``.

        Values are the source's raw values converted losslessly to the logical type
        (integers exact; floats bit-exact; widened numbers rendered as their shortest
        round-trip text). Raises :class:`ReplicationError` on a value that cannot be carried.
        """
        ...

    def checksums(self, source: SourceDatabase, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side A: row count and per-column checksums of the *logical* values."""
        ...


@runtime_checkable
class TargetWriter(Protocol):
    """Creates and verifies a copy in one target engine.

    Attributes:
        engine: target engine name (``duckdb``).
    """

    engine: str

    def version(self) -> str:
        """Target engine version string (part of the reuse key)."""
        ...

    def location_for(self, dataset: str, db_id: str, replicas_dir: Path, tag: str = "",
                     schema: str = "") -> str:
        """Where the copy of (dataset, db_id) lives (a path, or a server database name that
        includes ``tag``, the copy's content/namespace tag); ``schema`` is the source's schema
        name (``naming.source_schema``), for targets whose location names it (PostgreSQL).

        A writer may also define ``carry_schema(location, tables, schema, replica_schema)
        -> str``: make references qualified with ``schema`` resolve on the copy where the
        location alone does not, returning the manifest sentence (``schema_names``); without
        it qualified names are recorded as unavailable unless the location carries them."""
        ...

    def write(self, location: str, tables: list[TableSpec], source: SourceDatabase,
              reader: SourceReader) -> list[str]:
        """Create the copy from scratch (dropping any previous one at ``location``).

        Fills ``ColumnSpec.target_type``; returns sentences naming dropped constraints.
        Raises :class:`ReplicationError` on failure (and leaves nothing behind).
        """
        ...

    def checksums(self, location: str, tables: list[TableSpec]) -> dict[str, TableChecksum]:
        """Certificate side B: the same figures computed on the copy."""
        ...

    def fingerprint(self, location: str) -> str:
        """Cheap fingerprint of the copy's current state ("" when the copy does not exist)."""
        ...

    def drop(self, location: str) -> None:
        """Delete the copy (no error when absent)."""
        ...


def _load(table: dict[str, str], engine: str, kind: str, settings: dict | None = None):
    try:
        spec = table[engine]
    except KeyError:
        raise ReplicationError(f"no {kind} for engine {engine!r}; known: {sorted(table)}") from None
    module, _, cls = spec.partition(":")
    klass = getattr(importlib.import_module(module), cls)
    return klass(settings) if settings else klass()


def get_reader(engine: str, settings: dict | None = None) -> SourceReader:
    """Instantiate the :class:`SourceReader` registered for source ``engine`` (server readers
    take the engine's connection settings mapping)."""
    return _load(READERS, engine, "source reader", settings)


def get_writer(engine: str, settings: dict | None = None) -> TargetWriter:
    """Instantiate the :class:`TargetWriter` registered for target ``engine`` (server writers
    take the engine's connection settings mapping, ``engines.<name>`` of the config)."""
    return _load(WRITERS, engine, "target writer", settings)


def read_catalog(source: SourceDatabase, settings: dict | None = None) -> list[TableSpec]:
    """The source's tables (exact names, declared types, keys) without reading its values:
    the reader's ``read_catalog`` when it has one (SQLite: no per-column scans), else its
    ``read_schema(types="storage")``. For the structural check and anything else that needs
    names and declared types only. Raises :class:`ReplicationError` like ``read_schema``."""
    reader = get_reader(source.engine, settings)
    catalog = getattr(reader, "read_catalog", None)
    if catalog is not None:
        return catalog(source)
    return reader.read_schema(source, types="storage")[0]


def manifest_path_for(target_engine: str, dataset: str, db_id: str, replicas_dir: Path) -> Path:
    """``<replicas_dir>/<target_engine>/<dataset>/<db_id>/manifest.json`` (for every target,
    servers included: the manifest always lives on disk)."""
    return Path(replicas_dir) / target_engine / dataset / db_id / "manifest.json"


# --------------------------------------------------------------------------- the stage


def replicate(source: SourceDatabase, target_engine: str, replicas_dir: Path | str,
              force: bool = False, settings: dict | None = None,
              source_settings: dict | None = None, types: str = "declared") -> Replica:
    """Make (or reuse) a verified copy of ``source`` in ``target_engine``.

    Reuse: the existing manifest's :meth:`Manifest.reuse_key` (source content hash, target
    engine + version, type map version, replication version, ``types``) must equal the fresh
    key, and the writer's fingerprint of the copy must equal the recorded one; otherwise the
    copy is rebuilt. A fresh copy is verified by ``certificate.verify`` (row counts and
    per-column checksums equal on both sides); on mismatch the copy is deleted and
    :class:`ReplicationError` raised.

    Server replicas are named ``pq_<dataset>_<db_id>_<tag>`` where the tag hashes the reuse key
    and ``replicas_dir`` (:meth:`Manifest.content_tag`): a run in another results folder, or
    with other content or type mode, builds its own copy and never drops or overwrites this
    one. When this folder's previous copy lived elsewhere (content changed), it is dropped.

    Args:
        source: the source database (``source.exists`` False -> ReplicationError).
        target_engine: engine name with a registered writer (``duckdb``).
        replicas_dir: root folder for copies and manifests.
        force: rebuild even if a matching copy exists.
        settings: connection settings of a server target (``engines.<target>`` config).
        source_settings: connection settings of a server source (MySQL for SpiderMan).
        types: ``declared`` (keep declared types whose values all conform) or ``storage``
            (storage classes only); see ``typemap``.

    Returns: the :class:`Replica` (``reused`` tells whether it was reused).
    """
    import time

    from polysql_ray.replication import certificate, naming, typemap

    t0 = time.perf_counter()
    if types not in typemap.TYPE_MODES:
        raise ReplicationError(f"replication.types must be one of {typemap.TYPE_MODES}, got {types!r}")
    if not source.exists or (source.engine in ("sqlite", "duckdb") and not os.path.exists(source.location)):
        raise ReplicationError(f"source database {source.dataset}/{source.db_id} is missing: {source.location}")
    reader = get_reader(source.engine, source_settings)
    writer = get_writer(target_engine, settings)
    replicas_dir = Path(replicas_dir)
    mpath = manifest_path_for(target_engine, source.dataset, source.db_id, replicas_dir)

    fresh = Manifest(
        dataset=source.dataset, db_id=source.db_id, source_engine=source.engine,
        source_location=str(source.location), source_hash=reader.content_hash(source),
        target_engine=target_engine, target_version=writer.version(),
        type_map_version=typemap.TYPE_MAP_VERSION, replication_version=REPLICATION_VERSION,
        types=types)
    tag = fresh.content_tag(str(replicas_dir.resolve()))
    server = getattr(writer, "server_settings", lambda: {})()
    schema = naming.source_schema(source, reader)
    stored_schema = naming.replica_schema(schema, source.engine, target_engine,
                                          server.get("lower_case_table_names"))
    location = writer.location_for(source.dataset, source.db_id, replicas_dir, tag=tag,
                                   schema=stored_schema)
    fresh.location = location

    old = None
    if mpath.exists():
        try:
            old = Manifest.from_json(mpath.read_text())
        except Exception:  # unreadable manifest: rebuild
            old = None
    if (not force and old is not None and old.reuse_key() == fresh.reuse_key()
            and (old.location or location) == location
            and old.copy_fingerprint and writer.fingerprint(location) == old.copy_fingerprint):
        if hasattr(writer, "ensure_reader"):  # the copy's reader (MySQL account, PostgreSQL hardening)
            writer.ensure_reader(location)
        return Replica(target_engine, source.dataset, source.db_id, location, old, mpath, True)

    mpath.parent.mkdir(parents=True, exist_ok=True)
    if mpath.exists():
        mpath.unlink()  # never leave a manifest that could vouch for a half-built copy
    if old is not None and old.location and old.location != location and _built_here(old, replicas_dir):
        writer.drop(old.location)  # this folder's own superseded copy
    tables, skipped = reader.read_schema(source, types=types)
    fresh.server_settings = server
    fresh.names = naming.assign(tables, source.engine, target_engine,
                                server.get("lower_case_table_names"))
    try:
        dropped = writer.write(location, tables, source, reader)
        checks = certificate.verify(source, tables, reader, writer, location)
        lctn = server.get("lower_case_table_names")
        fresh.schema_names = {
            q: _carry_schema(writer, location, qt, q, stored_schema if q == schema
                             else naming.replica_schema(q, source.engine, target_engine, lctn))
            for q, qt in naming.qualifiers(source, reader, tables).items()}
    except BaseException:
        writer.drop(location)
        raise
    fresh.tables = tables
    fresh.checksums = checks
    fresh.dropped_constraints = dropped
    fresh.skipped_objects = skipped
    fresh.copy_fingerprint = writer.fingerprint(location)
    fresh.seconds = round(time.perf_counter() - t0, 4)
    tmp = mpath.with_suffix(".json.tmp")
    tmp.write_text(fresh.to_json())
    os.replace(tmp, mpath)
    return Replica(target_engine, source.dataset, source.db_id, location, fresh, mpath, False)


def _built_here(old: Manifest, replicas_dir: Path) -> bool:
    """Whether ``old`` (a manifest found under ``replicas_dir``) names a copy this folder built:
    a file inside this folder (embedded targets), or a server database / schema / dataset whose
    name carries this folder's :meth:`Manifest.content_tag` (every server writer's
    ``location_for`` names copies with it). A manifest that came with a copied results folder
    (``cp -r``) names the other folder's copy, which is never dropped: at worst a copy is left
    behind (an orphan), never another run's loss."""
    rdir = Path(replicas_dir).resolve()
    if os.path.isabs(old.location):
        return Path(old.location).resolve().is_relative_to(rdir)
    return old.content_tag(str(rdir)) in old.location


def _carry_schema(writer: TargetWriter, location: str, tables: list[TableSpec], schema: str,
                  stored: str) -> str:
    """How references qualified with the source's ``schema`` resolve on the copy (the
    writer's ``carry_schema`` hook, else whether the location names that schema)."""
    hook = getattr(writer, "carry_schema", None)
    if hook is not None:
        return hook(location, tables, schema, stored)
    if location.endswith("/" + stored):
        return f"resolves: schema {stored!r} of the replica"
    return f"unavailable: {writer.engine} replicas do not carry the source's schema name"


def drop_replicas(replicas_dir: Path | str, settings: dict[str, dict] | None = None) -> list[str]:
    """Drop every copy this folder built whose manifest lives under ``replicas_dir`` (server
    schemas/databases included) and delete the manifests. A manifest copied in from another
    folder names that folder's copy (:func:`_built_here`): its manifest is deleted, its copy kept.

    Args:
        replicas_dir: the folder ``replicate`` was given.
        settings: ``{engine: connection settings}`` for server targets (defaults otherwise).

    Returns: the locations dropped.
    """
    dropped = []
    for mpath in sorted(Path(replicas_dir).glob("*/*/*/manifest.json")):
        try:
            m = Manifest.from_json(mpath.read_text())
        except Exception:  # noqa: BLE001 - an unreadable manifest vouches for nothing
            continue
        if m.location and _built_here(m, Path(replicas_dir)):
            get_writer(m.target_engine, (settings or {}).get(m.target_engine)).drop(m.location)
            dropped.append(m.location)
        mpath.unlink()
    return dropped


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """sha256 hex digest of a file's bytes (used as content hash / fingerprint)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def remove_path(path: str | os.PathLike) -> None:
    """Delete a file or folder if present (plus a DuckDB ``.wal`` beside it)."""
    p = Path(path)
    for q in (p, Path(str(p) + ".wal")):
        if q.is_dir():
            shutil.rmtree(q, ignore_errors=True)
        elif q.exists():
            q.unlink()


class FileTargetWriter:
    """Shared file handling of the embedded-engine writers (DuckDB, SQLite): where a copy lives,
    its fingerprint (sha256 of the file) and how it is deleted. Subclasses set ``engine``,
    ``suffix`` and ``temp_suffixes`` (half-built files :meth:`drop` also removes)."""

    engine = ""
    suffix = ""
    temp_suffixes: tuple[str, ...] = (".tmp",)

    def location_for(self, dataset: str, db_id: str, replicas_dir: Path, tag: str = "",
                     schema: str = "") -> str:
        """``<replicas_dir>/<engine>/<dataset>/<db_id>/<db_id><suffix>`` (absolute; the folder
        already belongs to one run, so ``tag`` is not needed; ``schema`` is carried by
        ``carry_schema``)."""
        return str((Path(replicas_dir) / self.engine / dataset / db_id / f"{db_id}{self.suffix}").resolve())

    def fingerprint(self, location: str) -> str:
        """sha256 of the copy file; "" when absent."""
        return file_sha256(location) if os.path.exists(location) else ""

    def drop(self, location: str) -> None:
        """Delete the copy and any half-built temp file."""
        for p in (location, *(location + s for s in self.temp_suffixes)):
            remove_path(p)
