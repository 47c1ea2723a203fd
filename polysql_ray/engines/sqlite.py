"""SQLite engine: read-only, one statement, authorizer, progress-handler timeout, row cap.

Sandbox (README "Untrusted SQL"), all engine-side:

* opened with the URI ``file:<path>?mode=ro`` (the file cannot be written through this
  connection), autocommit, ``PRAGMA query_only=1``;
* an authorizer (``Connection.set_authorizer``, SQLite C API ``sqlite3_set_authorizer``) that
  allows only the actions in :data:`ALLOWED_ACTIONS` (SELECT, READ, FUNCTION, RECURSIVE) and
  denies the functions in :data:`DENIED_FUNCTIONS` (``load_extension``...): ATTACH, PRAGMA,
  DML/DDL, transactions are refused by SQLite itself ("not authorized" -> REJECTED);
* Python's ``execute`` runs exactly one statement (more -> ``ProgrammingError`` -> REJECTED);
  :mod:`~polysql_ray.engines.guard` filters first with clearer messages;
* a progress handler (every :attr:`SqliteEngine.progress_steps` VM instructions) returns
  non-zero after the deadline, which makes SQLite interrupt the statement -> TIMEOUT (a real
  engine interrupt: the query stops, in the execute and in the fetch);
* at most ``row_cap + 1`` rows are fetched; more than ``row_cap`` -> TOO_LARGE;
* memory and value size, engine-side (the progress handler never runs while SQLite *prepares* a
  statement, and one ``randomblob(1e9)`` call is a single VM instruction): ``SQLITE_LIMIT_LENGTH``
  (``Connection.setlimit``, SQLite C API ``sqlite3_limit``) is ``limits.max_bytes`` on every run,
  so a larger string or blob fails at once ("string or blob too big" -> TOO_LARGE), and
  ``PRAGMA hard_heap_limit`` (``sqlite3_hard_heap_limit64``; process-wide, set by our code
  before the authorizer) caps SQLite's heap at :attr:`SqliteEngine.heap_limit_mb`: a CTE bomb
  that expands exponentially at prepare time (20 doubling levels reached 2.6 GB) fails with
  SQLITE_NOMEM (``MemoryError`` -> TOO_LARGE) instead of growing until the machine swaps.
  Docs: https://www.sqlite.org/c3ref/limit.html, https://www.sqlite.org/pragma.html#pragma_hard_heap_limit

Result representation (coordinated with ``comparison/normalize``). SQLite result columns are
dynamically typed, so each column's Arrow type is chosen from its non-NULL Python values:

| values in the column                       | Arrow type                               |
|--------------------------------------------|------------------------------------------|
| none (all NULL or no rows)                 | ``null``                                 |
| int only                                   | ``int64``                                |
| float only                                 | ``float64``                              |
| int and float, every int abs <= 2**53      | ``float64`` (exact: ints representable)  |
| str only / bytes only                      | ``string`` / ``binary``                  |
| any other mix (e.g. int and str)           | dense union, children ``integer:int64``, ``real:float64``, ``text:string``, ``blob:binary`` (type codes 0..3); the field carries metadata ``polysql.sqlite_mixed=1`` |

``union.to_pylist()`` gives back the Python values with their own types (``[1, 'a', 2.5]``),
so the string '5' and the number 5 stay distinct (a comparison-policy decision).
"""
from __future__ import annotations

import math
import sqlite3
import time
from dataclasses import dataclass

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, Limits
from polysql_ray.engines.declaration import (
    PORTABLE_CORE, PORTABLE_GUARDED, Semantics, StructuralFacts, StructuralIdentifiers,
)
from polysql_ray.engines.embedded import EmbeddedEngine, RowCapExceeded, Unusable
from polysql_ray.engines.identifiers import IdentifierRules

#: Authorizer action codes allowed; everything else is denied.
ALLOWED_ACTIONS: frozenset[int] = frozenset({
    sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
})

#: SQL functions denied even inside a SELECT (lower-case names).
DENIED_FUNCTIONS: frozenset[str] = frozenset({"load_extension", "readfile", "writefile", "edit",
                                              "fts3_tokenizer"})

#: (lower-case message substring, status), first match wins; no match -> RUNTIME.
ERROR_TABLE: tuple[tuple[str, ExecStatus], ...] = (
    ("not authorized", ExecStatus.REJECTED),
    ("prohibited", ExecStatus.REJECTED),          # authorizer SQLITE_DENY on a column read
    ("authorization denied", ExecStatus.REJECTED),
    ("readonly database", ExecStatus.REJECTED),
    ("one statement at a time", ExecStatus.REJECTED),
    ("unable to open database", ExecStatus.UNAVAILABLE),
    ("syntax error", ExecStatus.SYNTAX),
    ("incomplete input", ExecStatus.SYNTAX),
    ("unrecognized token", ExecStatus.SYNTAX),
    ("no such table", ExecStatus.SCHEMA),
    ("no such column", ExecStatus.SCHEMA),
    ("no such function", ExecStatus.SYNTAX),
    ("ambiguous column name", ExecStatus.SCHEMA),
    ("string or blob too big", ExecStatus.TOO_LARGE),   # SQLITE_TOOBIG (SQLITE_LIMIT_LENGTH)
    ("out of memory", ExecStatus.TOO_LARGE),            # SQLITE_NOMEM (hard heap limit)
)

#: Children of the dense union used for mixed columns: (python type, field name, arrow type).
MIXED_CHILDREN: tuple[tuple[type, str, pa.DataType], ...] = (
    (int, "integer", pa.int64()),
    (float, "real", pa.float64()),
    (str, "text", pa.string()),
    (bytes, "blob", pa.binary()),
)

_MAX_EXACT = 2 ** 53


def classify_error(message: str) -> ExecStatus:
    """Map an SQLite error message to an :class:`ExecStatus` via :data:`ERROR_TABLE`."""
    m = message.lower()
    for needle, status in ERROR_TABLE:
        if needle in m:
            return status
    return ExecStatus.RUNTIME


def column_to_arrow(values: list) -> tuple[pa.Array, dict | None]:
    """One result column of Python values -> (Arrow array, field metadata or None).

    See the module docstring's table. Raises nothing for SQLite values (int/float/str/bytes/None).
    """
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pa.nulls(len(values)), None
    if len(kinds) == 1:
        k = next(iter(kinds))
        return pa.array(values, type={int: pa.int64(), float: pa.float64(),
                                      str: pa.string(), bytes: pa.binary()}[k]), None
    if kinds == {int, float} and all(abs(v) <= _MAX_EXACT for v in values if type(v) is int):
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64()), None
    codes, offsets, children = [], [], [[] for _ in MIXED_CHILDREN]
    index = {t: i for i, (t, _, _) in enumerate(MIXED_CHILDREN)}
    for v in values:
        i = 0 if v is None else index[type(v)]  # NULL: a null int64 child slot
        codes.append(i)
        offsets.append(len(children[i]))
        children[i].append(v)
    arr = pa.UnionArray.from_dense(
        pa.array(codes, type=pa.int8()), pa.array(offsets, type=pa.int32()),
        [pa.array(c, type=t) for c, (_, _, t) in zip(children, MIXED_CHILDREN)],
        [n for _, n, _ in MIXED_CHILDREN])
    return arr, {"polysql.sqlite_mixed": "1"}


def rows_to_table(names: list[str], rows: list[tuple]) -> pa.Table:
    """Result rows (tuples) + column names -> Arrow table (duplicate names kept, positional)."""
    cols = list(zip(*rows)) if rows else [() for _ in names]
    fields, arrays = [], []
    for name, col in zip(names, cols):
        arr, meta = column_to_arrow(list(col))
        arrays.append(arr)
        fields.append(pa.field(name, arr.type, metadata=meta))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


@dataclass
class _Conn:
    con: sqlite3.Connection
    deadline: float = math.inf
    timed_out: bool = False


class SqliteEngine(EmbeddedEngine):
    """:class:`~polysql_ray.engines.base.Engine` for SQLite files (gold SQL on Spider/BIRD).

    Args:
        progress_steps: VM instructions between deadline checks (smaller = more precise
            timeouts, slightly slower queries).
        heap_limit_mb: SQLite's hard heap limit in MiB (``PRAGMA hard_heap_limit``; process-wide:
            the execution actor's SQLite memory ceiling); past it a statement is TOO_LARGE.

    ``location`` is the absolute path of the ``.sqlite`` file. Connections are cached per
    location for the life of the instance (actors reuse them); thread-safe via a lock.
    """

    name = "sqlite"
    dialect = "sqlite"
    settings = {"progress_steps": 1000, "heap_limit_mb": 256}
    # SQLite "SQL As Understood By SQLite": names resolve case-insensitively, quoted or not
    identifiers = IdentifierRules(fold=None, tables_ci=True, columns_ci=True)
    semantics = Semantics(
        integer_division=True,   # "SQL As Understood By SQLite: Expressions": int / int is an integer
        nulls_asc="first", nulls_desc="last",  # "The SELECT statement" (ORDER BY): NULLs are smaller
                                               # than any other value
        ci_equals=False,         # "Datatypes In SQLite" 7: default collation BINARY (memcmp)
        ci_like=True,            # "Expressions: The LIKE operator": case-insensitive for ASCII by default
        empty_sum_null=True,     # "Built-in Aggregate Functions": sum() of no non-NULL rows is NULL
                                 # (total() is 0.0)
        string_number="affinity",  # "Datatypes In SQLite" 4.2: affinity is applied before comparing
    )
    structural = StructuralFacts(
        identifiers=StructuralIdentifiers(True, True, True, "ci"),
        portable_nodes=PORTABLE_CORE | PORTABLE_GUARDED, ordered_classes=frozenset({"num", "text"}),
        numeric_plus=True, left_collation=True, keywords="sqlite.txt",
        double_literals=frozenset({"decimal", "exponent", "big_integer"}))  # lang_expr.html "Literal Values"
    type_map = None  # the writer keeps SQLite's own declared types (replication/sqlite_writer.py)
    varchar_with_length = None
    writer = "polysql_ray.replication.sqlite_writer:SqliteWriter"
    reader = "polysql_ray.replication.sqlite_reader:SqliteReader"
    sandbox = {"uri": "file:<path>?mode=ro", "pragma": "query_only=1", "authorizer_allows": ALLOWED_ACTIONS,
               "timeout": "progress handler interrupt", "SQLITE_LIMIT_LENGTH": "limits.max_bytes",
               "hard_heap_limit": "heap_limit_mb"}
    error_table = ERROR_TABLE
    denied_functions = DENIED_FUNCTIONS
    prompt_rules = "sqlite.yaml"
    source_suffix = ".sqlite"
    open_errors = (sqlite3.Error,)
    driver_errors = (sqlite3.Error, sqlite3.Warning, MemoryError)

    def identity(self) -> dict:
        """SQLite library version (``sqlite3.sqlite_version``: the C library, not the module)."""
        return {"product": "SQLite", "version": sqlite3.sqlite_version, "standin": "", "settings": {}}

    def __init__(self, progress_steps: int = 1000, heap_limit_mb: int = 256):
        super().__init__()
        self.progress_steps = progress_steps
        self.heap_limit_mb = int(heap_limit_mb)
        self._conns: dict[str, _Conn] = {}

    def _authorizer(self, action, arg1, arg2, dbname, source):
        if action not in ALLOWED_ACTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def open(self, location: str, limits: Limits) -> _Conn:
        """The cached read-only connection to ``location`` (authorizer, progress handler)."""
        c = self._conns.get(location)
        if c is not None:
            return c
        con = sqlite3.connect(f"file:{location}?mode=ro", uri=True, isolation_level=None,
                              check_same_thread=False)
        con.execute("PRAGMA query_only=1")
        if self.heap_limit_mb > 0:  # never raise an existing lower limit of this process
            current = con.execute("PRAGMA hard_heap_limit").fetchone()[0]
            wanted = self.heap_limit_mb * 1024 * 1024
            if not current or current > wanted:
                con.execute(f"PRAGMA hard_heap_limit={wanted}")
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()  # fail now if not a DB
        state = _Conn(con)

        def progress() -> int:
            if time.monotonic() > state.deadline:
                state.timed_out = True
                return 1
            return 0

        con.set_progress_handler(progress, self.progress_steps)
        con.set_authorizer(self._authorizer)
        self._conns[location] = state
        return state

    def run(self, state: _Conn, sql: str, limits: Limits) -> pa.Table:
        """Fetch at most ``row_cap + 1`` rows under the progress-handler deadline."""
        state.timed_out = False
        state.con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(1, min(int(limits.max_bytes), 1_000_000_000)))
        state.deadline = time.monotonic() + limits.timeout_s
        try:
            cur = state.con.execute(sql)
            rows = cur.fetchmany(limits.row_cap + 1) if cur.description else []
            names = [d[0] for d in cur.description or ()]
            cur.close()
        finally:
            state.deadline = math.inf
        if len(rows) > limits.row_cap:
            raise RowCapExceeded()
        try:
            return rows_to_table(names, rows)
        except (pa.ArrowException, OverflowError) as e:
            raise Unusable(ExecStatus.RUNTIME, f"result not representable: {e}") from e

    def classify(self, exc: BaseException, state: _Conn) -> ExecStatus:
        """TIMEOUT when the progress handler interrupted, TOO_LARGE past the heap limit
        (``MemoryError``: SQLITE_NOMEM), else :func:`classify_error`."""
        if state.timed_out:
            return ExecStatus.TIMEOUT
        if isinstance(exc, MemoryError):
            return ExecStatus.TOO_LARGE
        return classify_error(str(exc))

    def close(self) -> None:
        """Close every cached connection."""
        with self._lock:
            for c in self._conns.values():
                c.con.close()
            self._conns.clear()
