"""The one execute path of embedded engines (SQLite, DuckDB, ClickHouse through chdb).

:meth:`EmbeddedEngine.execute` is the whole sandboxed call; an engine supplies hooks only:

1. :meth:`~EmbeddedEngine.refuse` before touching the database: length cap, the statement
   guard (``engines/guard.py``), then :meth:`~EmbeddedEngine.missing` (UNAVAILABLE for a
   missing database, so the engine never creates one);
2. under the engine's lock, :meth:`~EmbeddedEngine.open` (a cached handle; any of
   :attr:`~EmbeddedEngine.open_errors` -> UNAVAILABLE), then :meth:`~EmbeddedEngine.check` (a
   refusal by the engine's own statement parser, or None);
3. :meth:`~EmbeddedEngine.run` returns the Arrow table, raising :class:`RowCapExceeded` past
   ``limits.row_cap`` rows (TOO_LARGE), :class:`Unusable` for a result that cannot be returned,
   or a driver error (:attr:`~EmbeddedEngine.driver_errors`) that :meth:`~EmbeddedEngine.classify`
   maps to a status through the engine's error table; a TIMEOUT message says after how long;
4. anything else is RUNTIME: nothing escapes ``execute``; ``elapsed_s`` counts from entry.

The byte cap (``Limits.enforce``) is applied by the callers on every engine's result.
"""
from __future__ import annotations

import os
import threading
import time

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import ConnectionBehaviour, EngineDeclaration


class RowCapExceeded(Exception):
    """Raised by :meth:`EmbeddedEngine.run` when the result has more than ``row_cap`` rows."""


class Unusable(Exception):
    """Raised by :meth:`EmbeddedEngine.run` for a result that cannot be returned.

    Args:
        status: the typed status to report.
        message: why.
    """

    def __init__(self, status: ExecStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class EmbeddedEngine(EngineDeclaration):
    """Base of in-process engines: the shared :meth:`execute` and its hooks (module docstring)."""

    embedded = True
    #: the execution actor runs this engine in a child process (``engines/child.py``: hard
    #: deadline, memory ceiling); ``engines.<name>.child_process=false`` runs it in the actor
    child_process = True
    takes_mapping = False
    transient_unavailable = False
    connection = ConnectionBehaviour("per-location")
    #: exceptions of :meth:`open` that mean "cannot open the database" (UNAVAILABLE)
    open_errors: tuple[type[BaseException], ...] = (Exception,)
    #: exceptions of :meth:`run` that :meth:`classify` maps to a status
    driver_errors: tuple[type[BaseException], ...] = ()

    #: product name and the Python distribution whose version is the engine's (:meth:`identity`)
    product: tuple[str, str] = ("", "")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def identity(self) -> dict:
        """The in-process engine's product and library version (``declaration.identity``)."""
        from importlib import metadata

        product, dist = self.product or (self.name, "")
        try:
            version = metadata.version(dist) if dist else ""
        except metadata.PackageNotFoundError:
            version = ""
        return {"product": product or self.name, "version": version, "standin": "", "settings": {}}

    # ------------------------------------------------------------------ hooks
    def refuse(self, sql: str, location: str, limits: Limits) -> ExecutionResult | None:
        """A typed result before the database is touched, else None (module docstring, 1)."""
        from polysql_ray.engines.guard import check_statement, runs_unrefused

        too_long = limits.refuse_length(sql)
        if too_long is not None:
            return too_long
        if runs_unrefused(sql, self.dialect):  # the guard's answer, without its tokenizer
            return self.missing(sql, location)
        verdict = check_statement(sql, self.dialect)
        if verdict.action == "empty":
            return ExecutionResult.failure(ExecStatus.EMPTY, verdict.message)
        if verdict.action == "reject":
            return ExecutionResult.failure(ExecStatus.REJECTED, verdict.message)
        return self.missing(sql, location)

    def missing(self, sql: str, location: str) -> ExecutionResult | None:
        """UNAVAILABLE when the database file ``location`` does not exist, else None; engines
        with other locations (folders) or sandbox text checks override it."""
        if not os.path.isfile(location):
            return ExecutionResult.failure(ExecStatus.UNAVAILABLE, f"database file not found: {location}")
        return None

    def open(self, location: str, limits: Limits):
        """The engine's (cached) handle on ``location``; raises one of :attr:`open_errors`."""
        raise NotImplementedError

    def check(self, handle, sql: str, limits: Limits) -> ExecutionResult | None:
        """A refusal by the engine's own statement checks before running, else None."""
        return None

    def run(self, handle, sql: str, limits: Limits) -> pa.Table:
        """Run ``sql`` on ``handle`` within ``limits``; the result as an Arrow table."""
        raise NotImplementedError

    def classify(self, exc: BaseException, handle) -> ExecStatus:
        """Status of a driver error (the engine's error table)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the one path
    def execute(self, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Run one untrusted statement read-only against ``location`` (module docstring).

        Returns a typed :class:`ExecutionResult`; never raises.
        """
        t0 = time.perf_counter()
        refusal = self.refuse(sql, location, limits)
        if refusal is not None:
            return refusal
        with self._lock:
            try:
                handle = self.open(location, limits)
            except self.open_errors as e:
                return ExecutionResult.failure(ExecStatus.UNAVAILABLE, f"cannot open {location}: {e}",
                                               time.perf_counter() - t0)
            try:
                early = self.check(handle, sql, limits)
                if early is not None:
                    early.elapsed_s = time.perf_counter() - t0
                    return early
                table = self.run(handle, sql, limits)
            except RowCapExceeded:
                return ExecutionResult.failure(ExecStatus.TOO_LARGE, f"more than {limits.row_cap} rows",
                                               time.perf_counter() - t0)
            except Unusable as e:
                return ExecutionResult.failure(e.status, str(e), time.perf_counter() - t0)
            except self.driver_errors as e:
                status = self.classify(e, handle)
                msg = str(e)
                if status is ExecStatus.TIMEOUT:
                    msg = f"interrupted after {limits.timeout_s}s: {msg}"
                return ExecutionResult.failure(status, msg, time.perf_counter() - t0)
            except Exception as e:  # result conversion etc.: never escape execute
                return ExecutionResult.failure(ExecStatus.RUNTIME, f"{type(e).__name__}: {e}",
                                               time.perf_counter() - t0)
        return ExecutionResult(ExecStatus.OK, table, None, time.perf_counter() - t0)
