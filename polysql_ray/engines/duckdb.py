"""DuckDB engine: read-only replica, no external access, one SELECT, real interrupt, row cap.

Sandbox (README "Untrusted SQL"; DuckDB docs "Securing DuckDB"), all engine-side:

* the copy is opened ``read_only=True`` with :data:`CONNECT_CONFIG` in the connect call:
  ``enable_external_access=false`` (no files: ``read_text``/``read_csv('/etc/passwd')``,
  ``COPY ... TO``, ``ATTACH``, ``INSTALL`` all fail with a PermissionException), no extension
  autoload/autoinstall/community extensions, one thread, a memory limit and a private temp
  directory with a size cap (``temp_directory``, ``max_temp_directory_size``: a spilling query
  fails with an out-of-memory error instead of filling the disk);
* after our own session settings (:data:`SESSION_SETTINGS`, progress bar off) we run
  ``SET lock_configuration=true`` before any untrusted SQL, so no statement can change a
  setting back (DuckDB refuses every later SET/RESET);
* ``con.extract_statements`` must return exactly one statement whose type is in
  :data:`ALLOWED_STATEMENT_TYPES` (SELECT): a multi-statement string never runs its DELETE;
  :mod:`~polysql_ray.engines.guard` filters first with clearer messages;
* no host paths: the replica file's path (``duckdb_databases()``, ``pragma_database_list``),
  the temp folder (``current_setting('temp_directory')``, ``duckdb_settings()``) and
  extension/secret folders are refused before the database is opened
  (``guard.duckdb_path_refusal``: the functions are derived from the installed DuckDB by a
  probe, ``guard.duckdb_path_functions``), and so are ``query()``/``query_table()``, which run
  SQL text no check has seen. DuckDB offers no setting that hides them;
* timeout: a ``threading.Timer`` calls ``con.interrupt()``, which really stops the query
  inside DuckDB (InterruptException -> TIMEOUT);
* row cap: results are streamed (``con.sql(q).to_arrow_reader(batch)``) and reading stops
  past ``row_cap`` rows -> TOO_LARGE, so a huge result is never materialised.

The result table is DuckDB's own Arrow output (native types: DECIMAL, DATE, ...; duplicate
column names kept, positional).
"""
from __future__ import annotations

import re
import threading

from typing import TYPE_CHECKING

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import (
    PORTABLE_CORE, PORTABLE_GUARDED, Semantics, StructuralFacts, StructuralIdentifiers,
)
from polysql_ray.engines.embedded import EmbeddedEngine, RowCapExceeded, Unusable
from polysql_ray.engines.identifiers import IdentifierRules

if TYPE_CHECKING:
    import duckdb

#: Passed to ``duckdb.connect`` (cannot be changed afterwards once the config is locked).
CONNECT_CONFIG: dict[str, object] = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
}

#: Per-connection settings run before locking (not settable as global connect options).
SESSION_SETTINGS: tuple[str, ...] = ("SET enable_progress_bar=false",)

#: Statement types accepted (``duckdb.StatementType`` names).
ALLOWED_STATEMENT_TYPES: frozenset[str] = frozenset({"SELECT"})

#: Refusals of the locked configuration (an InvalidInputException): (message regex, status).
REFUSAL_MESSAGES: tuple[tuple[str, ExecStatus], ...] = (
    (r"configuration has been locked|Permission Error", ExecStatus.REJECTED),
)

#: DuckDB exception class (name in the ``duckdb`` module) -> status; checked in order with
#: ``isinstance``; else RUNTIME. Names, not classes: this module is imported by every process that
#: reads the engine declarations (scoring workers, SQLite actors), and ``duckdb`` (~37 MiB RSS) is
#: imported only where a DuckDB connection is used.
ERROR_TABLE: tuple[tuple[str, ExecStatus], ...] = (
    ("InterruptException", ExecStatus.TIMEOUT),
    ("OutOfMemoryException", ExecStatus.TOO_LARGE),  # memory_limit / max_temp_directory_size
    ("PermissionException", ExecStatus.REJECTED),
    ("ParserException", ExecStatus.SYNTAX),
    ("CatalogException", ExecStatus.SCHEMA),
    ("BinderException", ExecStatus.SCHEMA),
    ("IOException", ExecStatus.UNAVAILABLE),
)

#: Rows per Arrow record batch while streaming a result.
BATCH_ROWS = 8192


#: Binder/Catalog errors are only *schema* errors when a table or column is unknown; the rest
#: are the dialect refusing the statement (unknown function, GROUP BY strictness) or a type
#: rule. (message regex, status), first match wins; checked before :data:`ERROR_TABLE`.
BINDER_MESSAGES: tuple[tuple[str, ExecStatus], ...] = (
    (r"Referenced (table|column)|Table with name .* does not exist|not found in FROM clause"
     r"|Ambiguous reference|column .* not found|Values list .* does not have a column", ExecStatus.SCHEMA),
    (r"Function with name .* does not exist|No function matches|must appear in the GROUP BY"
     r"|aggregate function|GROUP BY", ExecStatus.SYNTAX),
    (r"Cannot compare|Cannot mix|Could not convert|Conversion Error|type", ExecStatus.RUNTIME),
)


def classify_error(exc: BaseException) -> ExecStatus:
    """Map a DuckDB exception to an :class:`ExecStatus`: binder/catalog messages via
    :data:`BINDER_MESSAGES`, then the class via :data:`ERROR_TABLE`, else RUNTIME."""
    import duckdb

    if isinstance(exc, (duckdb.BinderException, duckdb.CatalogException)):
        msg = str(exc)
        for pattern, status in BINDER_MESSAGES:
            if re.search(pattern, msg, flags=re.IGNORECASE):
                return status
    for pattern, status in REFUSAL_MESSAGES:
        if re.search(pattern, str(exc)):
            return status
    for name, status in ERROR_TABLE:
        if isinstance(exc, getattr(duckdb, name)):
            return status
    return ExecStatus.RUNTIME


class DuckDBEngine(EmbeddedEngine):
    """:class:`~polysql_ray.engines.base.Engine` for DuckDB replica files.

    Args:
        threads: DuckDB worker threads per connection (1: parallelism comes from actors).
        memory_limit: DuckDB ``memory_limit`` setting (e.g. ``"2GB"``).
        max_temp_size: DuckDB ``max_temp_directory_size`` of the engine's private temp folder.

    ``location`` is the path of a ``.duckdb`` file (e.g. ``Replica.location``). Connections
    are cached per location for the life of the instance; thread-safe via a lock.
    """

    name = "duckdb"
    dialect = "duckdb"
    settings = {"threads": 1, "memory_limit": "2GB"}
    product = ("DuckDB", "duckdb")
    # DuckDB "Rules for Case Sensitivity": case-insensitive, even when quoted
    identifiers = IdentifierRules(fold=None, tables_ci=True, columns_ci=True)
    semantics = Semantics(
        integer_division=False,  # "Numeric Functions": / is float division (// is integer division)
        nulls_asc="last", nulls_desc="last",  # "ORDER BY Clause": default_null_order 'nulls_last',
                                              # in both directions
        ci_equals=False,         # "Collations": binary comparison unless a collation is set
        ci_like=False,           # "Pattern Matching": LIKE is case-sensitive (ILIKE is not)
        empty_sum_null=True,     # "Aggregate Functions": sum over no rows is NULL
        string_number="cast",    # "Typecasting": the VARCHAR side is cast implicitly (error if it
                                 # does not convert)
    )
    structural = StructuralFacts(
        identifiers=StructuralIdentifiers(True, True, False, "ci"),
        portable_nodes=PORTABLE_CORE | PORTABLE_GUARDED, ordered_classes=frozenset({"num", "text"}),
        numeric_plus=True, keywords="duckdb.txt",
        double_literals=frozenset({"exponent"}))  # "Numeric Types": 1.5 is DECIMAL(2,1), 1e3 DOUBLE
    type_map = {"INTEGER": "INTEGER", "SMALLINT": "SMALLINT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE",
                "VARCHAR": "VARCHAR", "BLOB": "BLOB", "DECIMAL": "DECIMAL", "BOOLEAN": "BOOLEAN",
                "DATE": "DATE", "TIMESTAMP": "TIMESTAMP"}
    varchar_with_length = "VARCHAR"
    writer = "polysql_ray.replication.duckdb_writer:DuckDBWriter"
    reader = "polysql_ray.replication.duckdb_source:DuckDBReader"
    sandbox = {"read_only": True, **CONNECT_CONFIG, "lock_configuration": True,
               "statement_types": ALLOWED_STATEMENT_TYPES, "timeout": "con.interrupt()"}
    error_table = ERROR_TABLE
    denied_functions = frozenset()  # enable_external_access=false refuses file access itself
    prompt_rules = "duckdb.yaml"
    source_suffix = ".duckdb"

    @property
    def open_errors(self) -> tuple[type[BaseException], ...]:
        """``duckdb.Error`` (imported on first use, see :data:`ERROR_TABLE`)."""
        import duckdb

        return (duckdb.Error,)

    driver_errors = open_errors

    def __init__(self, threads: int = 1, memory_limit: str = "2GB", max_temp_size: str = "1GB"):
        from polysql_ray.engines.scratch import owned_temp_dir

        super().__init__()
        self.threads = threads
        self.memory_limit = memory_limit
        self.max_temp_size = max_temp_size
        # spill folder of this process: removed on close/exit, swept by the next engine if killed
        self._temp_dir = owned_temp_dir("duckdb")
        self._conns: dict[str, duckdb.DuckDBPyConnection] = {}
        # derived now (a child-process probe, seconds, once per process), not inside the first
        # statement's time: an engine child is built before it reports ready (engines/child.py)
        from polysql_ray.engines.guard import duckdb_path_functions

        duckdb_path_functions()

    def open(self, location: str, limits: Limits) -> duckdb.DuckDBPyConnection:
        """The cached read-only, locked-configuration connection to ``location``."""
        con = self._conns.get(location)
        if con is None:
            import duckdb

            con = duckdb.connect(location, read_only=True, config={
                **CONNECT_CONFIG, "threads": self.threads, "memory_limit": self.memory_limit,
                "temp_directory": self._temp_dir, "max_temp_directory_size": self.max_temp_size})
            for stmt in SESSION_SETTINGS:
                con.execute(stmt)
            con.execute("SET lock_configuration=true")
            self._conns[location] = con
        return con

    def missing(self, sql: str, location: str) -> ExecutionResult | None:
        """REJECTED for a statement that would read a host path or run SQL from text
        (``guard.duckdb_path_refusal``, derived from the installed DuckDB), else the base
        check (UNAVAILABLE for a missing database file)."""
        from polysql_ray.engines.guard import duckdb_path_refusal

        why = duckdb_path_refusal(sql, self.dialect)
        if why is not None:
            return ExecutionResult.failure(ExecStatus.REJECTED, why)
        return super().missing(sql, location)

    def check(self, con, sql: str, limits: Limits) -> ExecutionResult | None:
        """DuckDB's own parser: exactly one statement, of a type in :data:`ALLOWED_STATEMENT_TYPES`."""
        statements = con.extract_statements(sql)
        if len(statements) != 1:
            return ExecutionResult.failure(
                ExecStatus.REJECTED if statements else ExecStatus.EMPTY,
                f"{len(statements)} statements; exactly one SELECT statement is allowed")
        stype = statements[0].type.name
        if stype not in ALLOWED_STATEMENT_TYPES:
            return ExecutionResult.failure(ExecStatus.REJECTED, f"{stype} statement; only SELECT is allowed")
        return None

    def run(self, con, sql: str, limits: Limits) -> pa.Table:
        """Stream the result in record batches, stopping past ``row_cap`` rows; a timer calls
        ``con.interrupt()`` at the timeout."""
        timer = threading.Timer(limits.timeout_s, con.interrupt)
        timer.daemon = True
        timer.start()
        reader = None
        try:
            rel = con.sql(sql)
            if rel is None:  # not a query (cannot happen after the type check)
                raise Unusable(ExecStatus.REJECTED, "statement returned no result")
            reader = rel.to_arrow_reader(BATCH_ROWS)
            batches, rows = [], 0
            for batch in reader:
                rows += batch.num_rows
                if rows > limits.row_cap:
                    raise RowCapExceeded()
                batches.append(batch)
            return pa.Table.from_batches(batches, schema=reader.schema)
        finally:
            timer.cancel()
            if reader is not None:
                try:
                    reader.close()
                except Exception:
                    pass
            rel = None

    def classify(self, exc: BaseException, con) -> ExecStatus:
        """:func:`classify_error`."""
        return classify_error(exc)

    def close(self) -> None:
        """Close every cached connection."""
        with self._lock:
            for con in self._conns.values():
                con.close()
            self._conns.clear()
        from polysql_ray.engines.scratch import release

        release(self._temp_dir)
