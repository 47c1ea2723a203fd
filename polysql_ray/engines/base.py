"""The engine protocol: run one untrusted, read-only statement and return an Arrow table.

Every engine module (``sqlite.py``, ``duckdb.py``, ``postgres.py`` ...) is a small class whose
behaviour is mostly data (read-only settings, error-code table), in the style of sqlglot's
dialect classes. The contract (README "Untrusted SQL"):

* read-only at the engine level, exactly one SELECT/WITH statement,
* an engine-side timeout that really interrupts the engine,
* a row cap (``too_large`` past it),
* a typed :class:`ExecStatus` for every failure, never an exception escaping ``execute``.
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:  # pyarrow is imported where a table is written or read: the execution actor of
    import pyarrow as pa  # a child-process engine only passes results on and never loads it


class ExecStatus(str, enum.Enum):
    """Outcome of one execution. The values are stored verbatim in the results store."""

    OK = "ok"
    SYNTAX = "syntax"          # the dialect refuses the statement: parse error, unknown function,
                               # GROUP BY strictness (a "dialect syntax error")
    SCHEMA = "schema"          # unknown or ambiguous table / column (schema linking)
    RUNTIME = "runtime"        # parsed and bound, failed while running (type error, div by zero ...)
    TIMEOUT = "timeout"        # interrupted by the engine-side timeout
    REJECTED = "rejected"      # not exactly one read-only SELECT/WITH statement, or sandbox refusal
    TOO_LARGE = "too_large"    # more rows than the row cap
    UNAVAILABLE = "unavailable"  # database missing / server unreachable: not the SQL's fault
    EMPTY = "empty"            # no SQL to run (generator produced nothing)


#: Lowest ``limits.memory_mb`` accepted: the SQLite child peaks at about 150 MiB on Spider
#: (benchmarks/bench_realistic.py), 70 MiB of it before any statement.
MIN_MEMORY_MB = 256


@dataclass(frozen=True)
class Limits:
    """Per-query sandbox limits.

    Attributes:
        timeout_s: wall-clock seconds after which the engine interrupts the query.
        row_cap: maximum rows a result set may have; more gives ``too_large``.
        max_bytes: maximum size of a result set in bytes (Arrow buffers); more gives
            ``too_large`` (one huge value, e.g. ``repeat('x', 1e9)``, is as bad as many rows).
            Checked once the engine has returned the table, so it bounds what travels to
            scoring and the store, not the engine's own memory.
        max_sql_chars: longest SQL text accepted; longer is ``rejected`` unparsed.
        memory_mb: memory ceiling of the process running one statement, in MiB: an embedded
            engine runs in its execution actor's child process (``engines/child.py``), which is
            stopped past this resident set and the statement is ``too_large`` (the actor lives).

    Raises ValueError (naming ``limits.<field>``) for a non-positive or non-finite value, and
    for ``memory_mb`` below :data:`MIN_MEMORY_MB`.
    """

    timeout_s: float = 30.0
    row_cap: int = 100_000
    max_bytes: int = 128 * 1024 * 1024
    max_sql_chars: int = 100_000
    memory_mb: int = 3072

    def __post_init__(self) -> None:
        import math

        for name, lo in (("timeout_s", 0.0), ("row_cap", 1), ("max_bytes", 1), ("max_sql_chars", 1),
                         ("memory_mb", 1)):
            value = getattr(self, name)
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
                math.isfinite(value) and value >= lo and (value > 0 if name == "timeout_s" else True)
            if not ok:
                raise ValueError(f"limits.{name} must be a positive number (got {value!r}); "
                                 f"set limits.{name}=<{'seconds' if name == 'timeout_s' else 'count'}>")
        if self.memory_mb < MIN_MEMORY_MB:
            raise ValueError(f"limits.memory_mb must be at least {MIN_MEMORY_MB} (MiB; got {self.memory_mb!r}): "
                             f"an embedded engine's process holds 70-150 MiB before any statement, so a "
                             f"lower ceiling stops every statement, gold included")

    def fingerprint(self) -> str:
        """Identity of the limits (part of every results-store cell key: a different timeout
        can change a verdict). ``max_sql_chars`` counts only when not the default, so cells
        scored before it existed keep their keys; so does ``memory_mb``."""
        fp = f"t{self.timeout_s:g}-r{self.row_cap}-b{self.max_bytes}"
        fp = fp if self.max_sql_chars == 100_000 else f"{fp}-c{self.max_sql_chars}"
        return fp if self.memory_mb == 3072 else f"{fp}-m{self.memory_mb}"

    def refuse_length(self, sql: str | None) -> "ExecutionResult | None":
        """REJECTED when ``sql`` is longer than :attr:`max_sql_chars`, before any parser or
        engine sees it (a 1.4 MB statement can keep a parser busy for a minute), else None."""
        if sql is not None and len(sql) > self.max_sql_chars:
            return ExecutionResult.failure(
                ExecStatus.REJECTED, f"SQL of {len(sql)} characters exceeds "
                f"limits.max_sql_chars={self.max_sql_chars}")
        return None

    def enforce(self, result: "ExecutionResult") -> "ExecutionResult":
        """``result``, or ``too_large`` when its table exceeds :attr:`max_bytes`."""
        nbytes = result.nbytes
        if nbytes > self.max_bytes:
            return ExecutionResult.failure(
                ExecStatus.TOO_LARGE, f"result set of {nbytes} bytes exceeds "
                f"limits.max_bytes={self.max_bytes}", result.elapsed_s)
        return result


@dataclass
class ExecutionResult:
    """What one execution returned.

    Attributes:
        status: typed outcome.
        table: the result set as an Arrow table (columns positional, names as the engine
            returned them; duplicates allowed) when ``status`` is OK, else None.
        error: engine error message (first 2,000 characters) when not OK.
        elapsed_s: wall seconds spent inside the engine call.
    """

    status: ExecStatus
    table: pa.Table | None = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the statement ran and ``table`` holds its result set."""
        return self.status is ExecStatus.OK

    @property
    def nbytes(self) -> int:
        """Size of the result set's Arrow buffers in bytes (``pa.Table.nbytes``; 0 without a
        table): what :meth:`Limits.enforce` holds to ``max_bytes``."""
        return self.table.nbytes if self.table is not None else 0

    def __reduce__(self):
        # Ship the table as Arrow IPC: exact (types, duplicate column names, unions) and
        # independent of Ray's own Arrow reducer, which looks columns up by *name* and fails on
        # results such as ``SELECT T1.id, T2.id`` (two columns named ``id``).
        # The bytes travel as ``bytes``, not a pyarrow Buffer, so that unpickling needs no pyarrow.
        blob = None
        if self.table is not None:
            import pyarrow as pa

            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self.table.schema) as writer:
                writer.write_table(self.table)
            blob = sink.getvalue().to_pybytes()
        return _restore_result, (self.status.value, blob, self.error, self.elapsed_s, self.nbytes)

    def content_key(self) -> tuple | None:
        """What the comparison reads of this result, as a hashable key: ``(status, error,
        digest)``, the digest a 16-byte BLAKE2b of the Arrow IPC bytes the table arrived as
        (values, types and column names; never ``elapsed_s``), None without a table. None for
        the whole key when the table was built in this process (no bytes name it)."""
        return None if self.table is not None else (self.status, self.error, None)

    @classmethod
    def failure(cls, status: ExecStatus, error: str, elapsed_s: float = 0.0) -> "ExecutionResult":
        """A result without a table: ``status`` with the engine message cut to 2,000 characters."""
        return cls(status=status, table=None, error=(error or "")[:2000], elapsed_s=elapsed_s)


class _ArrivedResult(ExecutionResult):
    """A result that arrived as Arrow IPC bytes (from the engine child over its pipe, or from
    Ray): the bytes are decoded on the first read of ``table``, and shipped on unchanged while
    ``table`` is not replaced, so the execution actor, which only checks ``nbytes`` (the size the
    sender measured) and passes results on, never decodes or re-encodes one."""

    def __init__(self, status: ExecStatus, blob, error: str | None, elapsed_s: float, nbytes: int | None):
        # the base class's fields, set here (not through its __init__, whose ``table`` would
        # replace the bytes): a field added to ExecutionResult must be added here too
        self.status, self.error, self.elapsed_s = status, error, elapsed_s
        self._blob, self._table, self._nbytes = blob, None, nbytes

    @property
    def table(self):  # noqa: D401 - the dataclass field of the base class, decoded on first read
        if self._table is None and self._blob is not None:
            import pyarrow as pa

            self._table = pa.ipc.open_stream(self._blob).read_all()
        return self._table

    @table.setter
    def table(self, value) -> None:
        self._table, self._blob, self._nbytes = value, None, None

    @property
    def nbytes(self) -> int:
        if self._nbytes is None:
            self._nbytes = self.table.nbytes if self.table is not None else 0
        return self._nbytes

    def __eq__(self, other):
        if not isinstance(other, ExecutionResult):
            return NotImplemented
        return (self.status, self.table, self.error, self.elapsed_s) == \
            (other.status, other.table, other.error, other.elapsed_s)

    __hash__ = None

    def content_key(self) -> tuple | None:  # the bytes it arrived as, not decoded to be named
        if self._blob is not None:
            import hashlib

            return (self.status, self.error, hashlib.blake2b(self._blob, digest_size=16).digest())
        return None if self._table is not None else (self.status, self.error, None)

    def __reduce__(self):
        if self._blob is None:
            return super().__reduce__()
        return _restore_result, (self.status.value, self._blob, self.error, self.elapsed_s, self._nbytes)


def _restore_result(status: str, blob, error: str | None, elapsed_s: float,
                    nbytes: int | None = None) -> "ExecutionResult":
    if blob is None:
        return ExecutionResult(ExecStatus(status), None, error, elapsed_s)
    return _ArrivedResult(ExecStatus(status), blob, error, elapsed_s, nbytes)


@runtime_checkable
class Engine(Protocol):
    """A target (or source) engine.

    Attributes:
        name: engine name used in configs and the store (``sqlite``, ``duckdb`` ...).
        dialect: sqlglot dialect name of the SQL this engine accepts.
    """

    name: str
    dialect: str

    def execute(self, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Run one untrusted statement read-only against the database at ``location``.

        Never raises for bad SQL, timeouts or a missing database: those become typed results.
        """
        ...

    def close(self) -> None:
        """Release connections/handles."""
        ...


class Stopwatch:
    """Tiny helper: ``with Stopwatch() as sw: ...; sw.elapsed`` in seconds."""

    def __enter__(self) -> "Stopwatch":
        self._t0 = time.perf_counter()
        self.elapsed = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.elapsed = time.perf_counter() - self._t0
