"""The replication data model: what a reader reports and a manifest records.

:class:`TableSpec` / :class:`ColumnSpec` / :class:`ForeignKeySpec` describe a source table as the
source declares it (with the logical types of ``typemap.py``); :class:`TableChecksum` /
:class:`ColumnChecksum` are the engine-independent fingerprints of ``certificate.py``;
:class:`Manifest` is the JSON beside every copy. Plain dataclasses that the replication stage
(``base.py``), the certificate and the naming rules all share, so none of them imports another
to get them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class ForeignKeySpec:
    """One foreign key exactly as the source declares it.

    Attributes:
        columns: child column names (source spelling), in key order.
        ref_table: referenced table name as written in the source DDL (may not exist!).
        ref_columns: referenced column names; empty tuple means "the referenced PK" (SQLite
            allows ``REFERENCES t`` without columns).
        id: the source's constraint id (SQLite ``PRAGMA foreign_key_list`` id), for messages.
    """

    columns: tuple[str, ...]
    ref_table: str
    ref_columns: tuple[str, ...]
    id: int = 0


@dataclass
class ColumnSpec:
    """One column.

    Attributes:
        name: exact source identifier (case, spaces and all; never renamed).
        declared_type: the type text the source declares ("" when none, e.g. SQLite ``c``).
        logical_type: logical type chosen by the reader (see module docstring).
        not_null: source declares NOT NULL.
        storage_classes: value kinds really stored (SQLite ``typeof``: integer/real/text/blob),
            informational; empty for typed sources.
        widened: None, or a sentence saying why ``logical_type`` is wider than the declared
            type implies (e.g. text 'N/A' in an INTEGER column -> VARCHAR). Recorded in the
            manifest; values are never dropped or silently coerced.
        target_type: filled by the writer: the target engine's type text.
        precision, scale: for DECIMAL only.
        length: declared text length for VARCHAR(n) (None: unbounded).
        target_name: the name the replica stores (``engines.identifiers.replica_name_for``;
            None until naming ran, then equal to ``name`` unless the target folds case).
        fallback: None, or why the declared type was not kept (``replication.types:
            declared``): how many values did not conform, with ``fallback_examples``.
        fallback_count: number of stored values that did not conform to the declared type.
        fallback_examples: up to three such values, as ``repr`` text.
    """

    name: str
    declared_type: str
    logical_type: str
    not_null: bool = False
    storage_classes: tuple[str, ...] = ()
    widened: str | None = None
    target_type: str | None = None
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    target_name: str | None = None
    fallback: str | None = None
    fallback_count: int = 0
    fallback_examples: tuple[str, ...] = ()

    @property
    def stored(self) -> str:
        """The name in the replica (``target_name``, else the source ``name``)."""
        return self.target_name or self.name


@dataclass
class TableSpec:
    """One table of the source database.

    Attributes:
        name: exact source identifier.
        columns: in source order.
        primary_key: PK column names in key order (empty when none).
        foreign_keys: as declared by the source.
        row_count: rows in the source table (filled by the reader).
        target_name: the name the replica stores (see ``ColumnSpec.target_name``).
        schema: the schema the source holds the table in, as a query on the source may
            qualify it (``main`` for SQLite/DuckDB, the database name for MySQL, the schema
            for PostgreSQL); None when a reader does not say.
    """

    name: str
    columns: list[ColumnSpec]
    primary_key: tuple[str, ...] = ()
    foreign_keys: tuple[ForeignKeySpec, ...] = ()
    row_count: int = 0
    target_name: str | None = None
    schema: str | None = None

    @property
    def stored(self) -> str:
        """The name in the replica (``target_name``, else the source ``name``)."""
        return self.target_name or self.name

    def stored_column(self, name: str) -> str:
        """Replica name of this table's column ``name`` (exact, then case-insensitive match)."""
        for c in self.columns:
            if c.name == name:
                return c.stored
        for c in self.columns:
            if c.name.lower() == name.lower():
                return c.stored
        return name

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of the batches the reader yields (logical types -> Arrow types)."""
        from polysql_ray.replication.typemap import arrow_type

        return pa.schema([pa.field(c.name, arrow_type(c)) for c in self.columns])


@dataclass
class ColumnChecksum:
    """Engine-independent fingerprint of one column (see ``certificate.py``).

    Attributes:
        non_null: number of non-NULL values.
        hash_sum: sum mod 2**64 of the 64-bit BLAKE2b hashes of each value's canonical text,
            as a 16-digit hex string (order-independent).
    """

    non_null: int
    hash_sum: str


@dataclass
class TableChecksum:
    """Row count plus one :class:`ColumnChecksum` per column (in column order)."""

    rows: int
    columns: dict[str, ColumnChecksum]


@dataclass
class Manifest:
    """Everything that identifies a copy; JSON beside it (``manifest.json``).

    A copy is reused only when :meth:`reuse_key` matches the key a fresh copy would have
    *and* the copy's fingerprint still equals ``copy_fingerprint``.

    Attributes:
        dataset, db_id: the benchmark's identifiers.
        source_engine, source_location: where the data came from.
        source_hash: content hash of the source (sha256 of the SQLite file bytes).
        target_engine, target_version: e.g. ``duckdb``, ``2.0.1``.
        type_map_version: ``typemap.TYPE_MAP_VERSION`` when the copy was made.
        replication_version: :data:`~polysql_ray.replication.base.REPLICATION_VERSION`.
        tables: the table specs with the target types chosen.
        checksums: table name -> checksum of the verified copy (equal on both sides).
        dropped_constraints: sentences naming each PK/FK/NOT NULL the target could not take
            and why (source data violates it, target restriction ...).
        skipped_objects: views/indexes/triggers not copied, with the reason.
        copy_fingerprint: writer-specific fingerprint of the copy (sha256 of the file for
            embedded engines) to detect a copy changed after verification.
        seconds: wall seconds the replication took.
        types: ``declared`` (declared types kept where every value conforms) or ``storage``.
        location: where the copy lives (server database/schema name or file path).
        names: one sentence per table/column name the replica stores differently from the
            source, and why (every name, changed or not, is in ``tables``: ``name`` ->
            ``target_name``).
        server_settings: target-server facts the copy depends on (MySQL
            ``lower_case_table_names``).
        schema_names: source schema (MySQL: database) name -> how a reference qualified
            with it resolves on the replica, or ``unavailable: <why>`` (``naming.source_schema``).
    """

    dataset: str
    db_id: str
    source_engine: str
    source_location: str
    source_hash: str
    target_engine: str
    target_version: str
    type_map_version: str
    replication_version: str
    tables: list[TableSpec] = field(default_factory=list)
    checksums: dict[str, TableChecksum] = field(default_factory=dict)
    dropped_constraints: list[str] = field(default_factory=list)
    skipped_objects: list[str] = field(default_factory=list)
    copy_fingerprint: str = ""
    seconds: float = 0.0
    types: str = "declared"
    location: str = ""
    names: list[str] = field(default_factory=list)
    server_settings: dict = field(default_factory=dict)
    schema_names: dict = field(default_factory=dict)

    def reuse_key(self) -> tuple:
        """The fields that must match for a copy to be reused."""
        return (
            self.source_hash,
            self.target_engine,
            self.target_version,
            self.type_map_version,
            self.replication_version,
            self.types,
        )

    def content_tag(self, namespace: str = "") -> str:
        """Short hex tag of :meth:`reuse_key` (+ ``namespace``): server replicas are named with
        it, so copies with other content or of another run never share a name."""
        blob = json.dumps([list(self.reuse_key()), namespace]).encode()
        return hashlib.sha256(blob).hexdigest()[:10]

    def to_json(self) -> str:
        """Serialise (stable key order, indented)."""
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        """Inverse of :meth:`to_json`. Raises ``ValueError``/``KeyError`` on a bad file."""
        d = json.loads(text)
        tables = []
        for t in d.pop("tables"):
            cols = [ColumnSpec(**{**c, "storage_classes": tuple(c["storage_classes"]),
                                  "fallback_examples": tuple(c.get("fallback_examples", ()))})
                    for c in t.pop("columns")]
            fks = tuple(
                ForeignKeySpec(tuple(f["columns"]), f["ref_table"], tuple(f["ref_columns"]), f["id"])
                for f in t.pop("foreign_keys"))
            tables.append(TableSpec(columns=cols, foreign_keys=fks,
                                    primary_key=tuple(t.pop("primary_key")), **t))
        checks = {
            name: TableChecksum(rows=c["rows"], columns={k: ColumnChecksum(**v)
                                                         for k, v in c["columns"].items()})
            for name, c in d.pop("checksums").items()}
        return cls(tables=tables, checksums=checks, **d)
