"""Replication certificate: engine-independent row counts and per-column checksums.

A copy is accepted only if, for every table, the row count and, for every column, the
number of non-NULL values and an order-independent hash of the values are equal on the
source and on the copy (README "Replication": "verify every copy").

Canonical value text (:func:`canonical_text`), by the column's *logical* type, from the
Python value each side's driver returns (so no engine's own text rendering is involved):

* BIGINT: ``str(int(v))``;  DOUBLE: ``repr(float(v))`` (shortest round-trip, bit-exact);
* VARCHAR: the string itself; numbers (source side of a widened column) as their
  shortest round-trip text, the same text the reader loads;
* BLOB: ``x'<lower hex>'`` of the bytes (text as its UTF-8 bytes);
* INTEGER/SMALLINT as BIGINT; DECIMAL: ``str(Decimal(v).normalize())`` (a stored float via
  its ``repr``); BOOLEAN: ``true``/``false``; DATE/TIMESTAMP: ISO-8601 via ``isoformat(" ")``,
  and a source's stored text as is, so a date that would not round-trip to the same text
  fails the certificate.

Column hash = sum mod 2**64 of the 8-byte BLAKE2b digest of each canonical text (as a
little-endian integer); NULLs are counted out (``non_null``), not hashed.
"""
from __future__ import annotations

import datetime as dt
import hashlib
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from polysql_ray.errors import ReplicationError
from polysql_ray.replication.spec import ColumnChecksum, Manifest, TableChecksum, TableSpec

_MASK = (1 << 64) - 1


def _num_text(v) -> str:
    return repr(v) if isinstance(v, float) else str(v)


def canonical_text(value, logical_type: str) -> str:
    """Canonical text of one non-NULL value of a column of ``logical_type`` (see module doc)."""
    if logical_type in ("BIGINT", "INTEGER", "SMALLINT"):
        return str(int(value))
    if logical_type == "DOUBLE":
        return repr(float(value))
    if logical_type == "VARCHAR":
        return value if isinstance(value, str) else _num_text(value)
    if logical_type == "BLOB":
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif not isinstance(value, (bytes, bytearray, memoryview)):
            value = _num_text(value).encode("utf-8")
        return "x'" + bytes(value).hex() + "'"
    if logical_type == "DECIMAL":
        if isinstance(value, float):  # a source's stored float: its shortest decimal text
            value = repr(value)
        return str(Decimal(value).normalize())
    if logical_type == "BOOLEAN":
        return "true" if value else "false"
    if logical_type in ("DATE", "TIMESTAMP"):
        if isinstance(value, str):  # a source's stored ISO text (conformance-checked)
            return value
        if isinstance(value, dt.datetime):
            return value.isoformat(sep=" ")
        return value.isoformat()
    raise ReplicationError(f"no canonical text for logical type {logical_type}")


def value_hash(text: str) -> int:
    """64-bit BLAKE2b of a canonical text, as an unsigned integer."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


class ChecksumAccumulator:
    """Accumulates a :class:`TableChecksum` from rows or record batches of one table.

    Feed either ``add_rows`` (sequences of Python values in column order) or ``add_batch``
    (Arrow record batches); call ``result()`` at the end.
    """

    def __init__(self, table: TableSpec):
        self.table = table
        self.rows = 0
        self.non_null = [0] * len(table.columns)
        self.sums = [0] * len(table.columns)

    def add_rows(self, rows) -> None:
        """Add Python rows (tuples in column order)."""
        for i, col in enumerate(self.table.columns):
            lt = col.logical_type
            nn, s = 0, 0
            for r in rows:
                v = r[i]
                if v is not None:
                    nn += 1
                    s += value_hash(canonical_text(v, lt))
            self.non_null[i] += nn
            self.sums[i] = (self.sums[i] + s) & _MASK
        self.rows += len(rows)

    def add_batch(self, batch: pa.RecordBatch) -> None:
        """Add an Arrow record batch whose columns are in table column order."""
        cols = [c.to_pylist() for c in batch.columns]
        self.add_rows(list(zip(*cols)) if cols else [()] * batch.num_rows)

    def result(self) -> TableChecksum:
        """The accumulated checksum."""
        return TableChecksum(rows=self.rows, columns={
            c.name: ColumnChecksum(non_null=self.non_null[i], hash_sum=f"{self.sums[i]:016x}")
            for i, c in enumerate(self.table.columns)})


def checksum_cursor(table: TableSpec, cursor, converters=None, chunk: int = 65_536) -> TableChecksum:
    """Checksum every row of an executed DB-API ``cursor`` (``SELECT`` of ``table``'s columns in
    source order), fetched ``chunk`` rows at a time so a large table never sits in memory.

    Args:
        table: the table spec (column logical types drive the canonical text).
        cursor: a cursor whose query has been executed; only ``fetchmany`` is used.
        converters: optional per-column callables applied to each value first (a driver's
            storage representation back to the logical value).
    """
    acc = ChecksumAccumulator(table)
    while rows := cursor.fetchmany(chunk):
        if converters is not None:
            rows = [tuple(f(v) for f, v in zip(converters, r)) for r in rows]
        acc.add_rows(rows)
    return acc.result()


def diff(a: dict[str, TableChecksum], b: dict[str, TableChecksum]) -> list[str]:
    """Sentences naming every table/column whose checksum differs (empty list: equal)."""
    out = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            out.append(f"table {name!r} present on one side only")
            continue
        ta, tb = a[name], b[name]
        if ta.rows != tb.rows:
            out.append(f"table {name!r}: {ta.rows} source rows vs {tb.rows} copy rows")
        for col in ta.columns:
            ca, cb = ta.columns[col], tb.columns.get(col)
            if cb is None or ca != cb:
                out.append(f"column {name!r}.{col!r}: source {ca} vs copy {cb}")
    return out


def verify(source, tables: list[TableSpec], reader, writer, location: str) -> dict[str, TableChecksum]:
    """Compute both sides' checksums and compare them.

    Returns the (equal) checksums. Raises :class:`ReplicationError` listing every mismatch;
    the caller (``base.replicate``) then deletes the copy.
    """
    a = reader.checksums(source, tables)
    b = writer.checksums(location, tables)
    problems = diff(a, b)
    if problems:
        raise ReplicationError(
            f"copy of {source.dataset}/{source.db_id} in {writer.engine} failed verification: "
            + "; ".join(problems[:20]))
    return a


def read_manifest(path: Path | str):
    """Load a manifest JSON (convenience for tools and tests)."""
    return Manifest.from_json(Path(path).read_text())
