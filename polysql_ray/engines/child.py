"""An embedded engine in a child process, under a hard deadline and a memory ceiling.

Embedded engines interrupt a statement themselves (SQLite's progress handler, DuckDB's
``interrupt()``, ClickHouse's ``max_execution_time``), but only at points the engine checks:
DuckDB's ``repeat('x', 1e9)`` builds its value in one call that never looks at the interrupt
(135 s at a 5 s limit), SQLite expands a CTE bomb while *preparing* (no progress handler then),
ClickHouse's recursive CTE runs its iterations outside the time check. A process can always be
stopped, so the execution actor runs its engine in a child process (:class:`ChildEngine`):

* the child (``python -m polysql_ray.engines.child``) builds the engine from its name and
  settings and takes a batch of statements at a time over a pipe (``multiprocessing.connection``),
  sending each statement's result as soon as it has it (:meth:`ChildEngine.execute_many`: one
  round trip per batch; :meth:`ChildEngine.execute` is a batch of one); results travel as
  :class:`~polysql_ray.engines.base.ExecutionResult` (Arrow IPC, exact);
* the parent waits for each statement at most ``timeout_s + kill_after(limits)`` (counted from
  when the child finished the one before it) (``min(timeout_s / 2, 30)``:
  half the limit is left for the kill itself and a loaded machine's scheduling, so the
  statement ends within 2x its limit) and kills the child when no answer came: ``timeout``,
  the statement's own;
* while waiting it reads the child's resident set (``/proc/<pid>/statm``) every
  :data:`POLL_S` seconds; past ``limits.memory_mb`` it kills the child: ``too_large``, the
  statement's own, never a dead actor;
* a child that dies by itself (a crash inside the engine, or a kill from outside: the OOM
  killer, an operator) is replaced and the statement runs again in the fresh child (replicas
  are re-opened there); only a statement whose child dies :data:`CHILD_DEATHS` times is
  ``runtime``, with the exit codes (one death proves nothing about the statement: the rule of
  the execution actors, whose death is retried by Ray).

The engine declaration (facts such as ``name``, ``dialect``, ``transient_unavailable``) is
read from the engine class, so the parent never imports the engine's driver.
"""
from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from typing import Any, Iterator

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits

#: Seconds between two looks at the child (answer, exit, resident set).
POLL_S = 0.02
#: Longest extra wait past ``timeout_s`` before the child is killed (seconds).
MAX_KILL_AFTER_S = 30.0
#: Seconds a fresh child may take to build its engine and say it is ready.
START_S = 120.0
#: Deaths of its child, each in a fresh one, after which a statement is ``runtime`` (its own).
CHILD_DEATHS = 2


class _ChildDied(Exception):
    """The child died by itself while it ran a statement (:meth:`ChildEngine._collect`)."""

    def __init__(self, code: int, elapsed: float) -> None:
        super().__init__(code)
        self.code, self.elapsed = code, elapsed


def kill_after(limits: Limits) -> float:
    """Seconds past ``limits.timeout_s`` after which the child is killed."""
    return min(limits.timeout_s / 2, MAX_KILL_AFTER_S)


def resident_mb(pid: int) -> float:
    """Resident set of process ``pid`` in MiB (``/proc/<pid>/statm``), 0.0 when unreadable."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / (1024 * 1024)


class ChildEngine:
    """:class:`~polysql_ray.engines.base.Engine` running engine ``name`` in a child process.

    Args:
        name: engine name (``sqlite``, ``duckdb``, ``clickhouse``).
        settings: constructor settings of the engine (as for ``make_engine``).
        dialect: the engine's sqlglot dialect when the caller knows it (the execution actor,
            from its :class:`~polysql_ray.engines.registry.EngineSpec`): the engine's class is then
            looked up only when another declaration fact is asked for. None: looked up now
            (``KeyError`` for an unknown engine).

    Attributes:
        peak_rss_mb: largest resident set seen of the current child (MiB, for benchmarks).
        kills: children killed so far (deadline or memory ceiling).
    """

    def __init__(self, name: str, settings: dict | None = None, dialect: str | None = None) -> None:
        self.name = name
        self._engine_cls = None
        self.dialect = dialect if dialect is not None else self._cls.dialect
        self.settings = dict(settings or {})
        self._proc: subprocess.Popen | None = None
        self._dying: list[subprocess.Popen] = []  # killed children not yet reaped
        self.peak_rss_mb = 0.0
        self.kills = 0

    @property
    def _cls(self) -> type:
        """The engine's declared class, looked up on first need (given ``dialect``, the parent
        needs no declaration fact to run statements, and never imports the engine's module)."""
        if self._engine_cls is None:
            from polysql_ray.engines.registry import engine_class

            self._engine_cls = engine_class(self.name)
        return self._engine_cls

    def __getattr__(self, attr: str) -> Any:  # declaration facts (transient_unavailable ...)
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._cls, attr)

    # ------------------------------------------------------------------ the child
    def _start(self) -> None:
        from multiprocessing.connection import Connection

        up_r, up_w = os.pipe()      # child -> parent
        down_r, down_w = os.pipe()  # parent -> child
        env = dict(os.environ)  # the parent's import path, so the child finds polysql_ray as the
        # actor did (a Ray working_dir, a test's PYTHONPATH)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "polysql_ray.engines.child", str(down_r), str(up_w)],
            pass_fds=(down_r, up_w), stdin=subprocess.DEVNULL, env=env, close_fds=True)
        os.close(down_r)
        os.close(up_w)
        self._reader = Connection(up_r, writable=False)
        self._poller = select.poll()  # one poll object for the child's life (Connection.poll
        self._poller.register(up_r, select.POLLIN)  # builds a selector on every call)
        self._writer = Connection(down_w, readable=False)
        self._writer.send((self.name, self.settings))
        if not self._reader.poll(START_S):
            self._kill()
            raise RuntimeError(f"the {self.name} engine process did not start within {START_S:g}s")
        ready = self._reader.recv()
        if ready != "ready":
            self._kill()
            raise RuntimeError(f"the {self.name} engine process failed to start: {ready}")
        self.peak_rss_mb = 0.0

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        for c in (getattr(self, "_reader", None), getattr(self, "_writer", None)):
            if c is not None:
                try:
                    c.close()
                except OSError:
                    pass
        self._reader = self._writer = None
        if proc is not None and proc.poll() is None:
            proc.kill()  # not waited for: a large child takes a while to give its memory back
            self._dying.append(proc)
        self._dying = [p for p in self._dying if p.poll() is None]  # reap the ones that ended

    @property
    def pid(self) -> int | None:
        """Process id of the running child, or None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    # ------------------------------------------------------------------ Engine
    def execute(self, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Run in the child; TIMEOUT past ``timeout_s + kill_after``, TOO_LARGE past
        ``limits.memory_mb`` of resident memory, RUNTIME when the child died by itself
        :data:`CHILD_DEATHS` times running it (each time in a fresh child)."""
        for res in self.execute_many([(location, sql)], limits):
            return res
        raise AssertionError("execute_many answered nothing")  # pragma: no cover

    def execute_many(self, requests: list[tuple[str, str]], limits: Limits) -> Iterator[ExecutionResult]:
        """One result per ``(location, sql)`` of ``requests``, in order, as each completes.

        The requests travel to the child in one message and it sends one answer per statement
        as soon as it has it (one pipe round trip per batch, not per statement). Each statement
        is held to its own limits as :meth:`execute` holds it: its clock starts when the child
        finished the statement before it (the first one's when the batch was sent); past
        ``timeout_s + kill_after`` (TIMEOUT) or ``limits.memory_mb`` of resident memory
        (TOO_LARGE) the child is killed; a child that dies by itself is replaced and the
        statement runs again, RUNTIME once it died :data:`CHILD_DEATHS` times; either way the
        rest of the batch goes on in a fresh child. A resident set or a clock over its
        limit is only held against the statement when that statement's answer had not come by
        the time it was read (else the reading may be the next statement's: look again).
        Closing the iterator early stops the child (no stale answers for the next call).
        """
        i, n = 0, len(requests)
        deaths: list[int] = []  # exit codes of the children that died running statement i
        while i < n:
            t0 = time.monotonic()
            failed = self._send(requests[i:], limits, t0)
            if failed is not None:
                yield failed
                i, deaths = i + 1, []
                continue
            done = False
            try:
                for res in self._collect(n - i, limits, time.monotonic()):
                    i, deaths = i + 1, []
                    yield res
                done = True
            except _ChildDied as died:
                done = True  # the child is gone: nothing stale can be read
                deaths.append(died.code)
                if len(deaths) >= CHILD_DEATHS:
                    codes = ", ".join(f"exit {c}" for c in deaths)
                    i, deaths = i + 1, []
                    yield ExecutionResult.failure(
                        ExecStatus.RUNTIME, f"the {self.name} engine process died running this statement "
                        f"{CHILD_DEATHS} times, each in a fresh process ({codes})", died.elapsed)
            finally:
                if not done and self._proc is not None and i < n:
                    self._kill()  # abandoned mid-batch: its later answers must not be read as ours

    def _send(self, batch: list[tuple[str, str]], limits: Limits, t0: float) -> ExecutionResult | None:
        """Send ``batch`` to a running child (started or replaced as needed); a failure result
        for the first statement when no child takes it."""
        for attempt in range(2):  # a child that died between two batches is replaced once
            if self._proc is None or self._proc.poll() is not None:
                self._kill()
                try:
                    self._start()
                except (OSError, RuntimeError, EOFError) as e:
                    return ExecutionResult.failure(ExecStatus.UNAVAILABLE, str(e), time.monotonic() - t0)
            try:
                self._writer.send((limits, batch))
                return None
            except OSError:
                self._kill()
                if attempt:
                    return ExecutionResult.failure(ExecStatus.UNAVAILABLE, f"the {self.name} engine "
                                                   "process does not take requests", time.monotonic() - t0)
        return None  # pragma: no cover

    def _collect(self, n: int, limits: Limits, start: float) -> Iterator[ExecutionResult]:
        """Up to ``n`` answers of the running child; stops (child killed) after a failure, and
        raises :class:`_ChildDied` when the child died by itself."""
        hard = limits.timeout_s + kill_after(limits)
        ceiling = float(limits.memory_mb)
        pid = self._proc.pid
        eof = False
        while n:
            try:
                if self._poller.poll(POLL_S * 1000):
                    res, finished = self._reader.recv()
                    res.elapsed_s = time.monotonic() - start
                    start = finished  # the next statement's clock: the child went on from there
                    n -= 1
                    yield res
                    continue
            except (EOFError, OSError):
                eof = True
            code = self._proc.poll()
            if code is not None:
                self._kill()
                raise _ChildDied(code, time.monotonic() - start)
            rss = resident_mb(pid)
            self.peak_rss_mb = max(self.peak_rss_mb, rss)
            elapsed = time.monotonic() - start
            if rss > ceiling or elapsed > hard:
                try:
                    if not eof and self._poller.poll(0):
                        continue  # its answer came meanwhile: the reading may be the next one's
                except (EOFError, OSError):
                    eof = True
                self._kill()
                self.kills += 1
                if rss > ceiling:
                    yield ExecutionResult.failure(
                        ExecStatus.TOO_LARGE, f"the statement took {rss:.0f} MiB of memory, over "
                        f"limits.memory_mb={limits.memory_mb} (engine process stopped)", elapsed)
                else:
                    yield ExecutionResult.failure(
                        ExecStatus.TIMEOUT, f"interrupted after {limits.timeout_s}s: the engine did not "
                        f"stop at its own interrupt, its process was stopped after {elapsed:.1f}s", elapsed)
                return

    def close(self) -> None:
        """Stop the child (it closes its engine on the way out)."""
        if self._proc is not None and self._proc.poll() is None and self._writer is not None:
            try:
                self._writer.send(None)
                self._proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()
        for proc in self._dying:
            proc.wait()
        self._dying = []


def _serve(down_fd: int, up_fd: int) -> None:
    """The child's loop: build the engine, then take ``(limits, [(location, sql), ...])``
    batches and send ``(result, time.monotonic() when it was done)`` per statement, in order."""
    from multiprocessing.connection import Connection

    from polysql_ray.engines.registry import make_engine
    from polysql_ray.lazy import arrow_without_pandas

    import threading

    arrow_without_pandas()  # this process is ours: pyarrow's look for pandas costs 41 MiB here

    parent = os.getppid()

    def orphaned() -> None:  # a killed actor must not leave its runaway statement running
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=orphaned, name="polysql-orphan-check", daemon=True).start()
    reader, writer = Connection(down_fd, writable=False), Connection(up_fd, readable=False)
    name, settings = reader.recv()
    try:
        engine = make_engine(name, **settings)
    except Exception as e:  # reported to the parent as one line
        writer.send(f"{type(e).__name__}: {e}")
        return
    writer.send("ready")
    try:
        while True:
            try:
                req = reader.recv()
            except EOFError:
                return
            if req is None:
                return
            limits, batch = req
            for location, sql in batch:
                try:
                    res = engine.execute(location, sql, limits)
                except MemoryError as e:
                    res = ExecutionResult.failure(ExecStatus.TOO_LARGE, f"out of memory: {e}")
                except Exception as e:  # never let the loop die on one statement
                    res = ExecutionResult.failure(ExecStatus.RUNTIME, f"engine raised {type(e).__name__}: {e}")
                writer.send((res, time.monotonic()))
    finally:
        try:
            engine.close()
        except Exception:
            pass


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))
