"""Shared plumbing for server engines (PostgreSQL, MySQL/MariaDB): settings, secrets, pools.

Three pieces, used by :mod:`polysql_ray.engines.postgres`, :mod:`polysql_ray.engines.mysql`
and the server replication loaders:

* :class:`ServerSettings` - connection settings read from a plain dict (a Hydra
  ``conf/engine/<name>.yaml`` node). Passwords are *never* held in the settings: only the name
  of an environment variable or the path of a secret file, resolved at connect time by
  :func:`resolve_secret`. ``repr``/:meth:`ServerSettings.public_dict` therefore cannot leak them
  into logs or manifests.
* :class:`ConnectionPool` - a bounded, thread-safe pool of reusable connections with counters
  (opened / reused / discarded) that the benchmark reports. A connection that the caller marks
  broken is closed and replaced by a fresh one on the next ``acquire``.

  Why our own pool and not ``psycopg_pool`` (issue 25, "libraries where they serve"; psycopg
  docs, "psycopg_pool - Connection pool implementations"): a ``psycopg_pool.ConnectionPool``
  serves one ``conninfo``, i.e. one database, while a PostgreSQL replica is one *database* per
  copy and one engine serves all of them (a Spider sweep: 166 databases). One psycopg pool per
  database cannot keep the bound this pool keeps (``size`` connections per engine across every
  database, the oldest idle connection of another database closed first): 20 databases x
  ``pool_size`` would open 80 connections per actor against the server's ``max_connections``.
  Building that bound around many psycopg pools would be this class again plus one background
  scheduler thread per pool (``psycopg_pool`` refills ``min_size`` connections and checks
  ``max_idle``/``max_lifetime`` in worker threads) in every Ray actor. The same class serves
  MySQL/MariaDB (pymysql) and Snowflake, where ``psycopg_pool`` does not apply, and its
  counters are what the benchmark and tests read. The per-statement sandbox (``BEGIN READ
  ONLY``, ``SET LOCAL statement_timeout``, the per-copy reader role, ``ROLLBACK`` +
  ``DISCARD ALL`` after each statement) lives in the engines, not in the pool, so it would
  not change with either pool.
* :func:`replica_name` - the one naming rule for replicated databases: ``pq_<dataset>_<db_id>``
  (a MySQL database, a PostgreSQL schema).

Policy reference: README "Untrusted SQL" (least-privilege role, engine-side limits).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

from polysql_ray.engines.declaration import EngineDeclaration

C = TypeVar("C")

#: Prefix of every replicated database/schema; the reader role is granted exactly these.
REPLICA_PREFIX = "pq_"

_SAFE_NAME = re.compile(r"[^0-9A-Za-z_]")


def replica_name(dataset: str, db_id: str, prefix: str = REPLICA_PREFIX, tag: str = "") -> str:
    """Name of the replica of ``(dataset, db_id)`` on a server engine.

    Returns ``pq_<dataset>_<db_id>[_<tag>]`` in lower case with characters outside
    ``[0-9a-z_]`` replaced by ``_`` (lower case: a MariaDB with ``lower_case_table_names=1``
    stores database names in lower case, PostgreSQL folds unquoted names; ``tag`` is the copy's
    content/namespace tag, so two runs or two contents never share a name). At most 63
    characters (PostgreSQL NAMEDATALEN-1; MySQL allows 64): a longer dataset/db_id part is cut
    and a hash of the full name keeps it unique.
    """
    base = prefix + _SAFE_NAME.sub("_", dataset) + "_" + _SAFE_NAME.sub("_", db_id)
    base = base.lower()
    suffix = f"_{tag.lower()}" if tag else ""
    if len(base) + len(suffix) > 63:
        if not tag:
            raise ValueError(f"replica name too long for a server identifier: {base!r}")
        h = hashlib.sha256(base.encode()).hexdigest()[:6]
        base = base[:63 - len(suffix) - 7] + "_" + h
    return base + suffix


def resolve_secret(env: str | None = None, file: str | None = None) -> str | None:
    """Resolve a password from an environment variable or a secret file, never from config.

    Args:
        env: name of an environment variable holding the password (checked first).
        file: path of a file whose content (trailing newline stripped) is the password.

    Returns:
        The password, or None when neither source is configured/present (servers with trust
        auth or an empty root password, as on the development machine).

    Raises:
        FileNotFoundError: ``file`` is configured but does not exist.
    """
    if env and os.environ.get(env) is not None:
        return os.environ[env]
    if file:
        return Path(file).expanduser().read_text().rstrip("\r\n")
    return None


@dataclass(frozen=True)
class ServerSettings:
    """Connection settings of one database server (no secrets inside).

    Attributes:
        host, port: server address.
        user: least-privilege reader role that runs gold and predicted SQL.
        admin_user: role used only by replication (create databases, load, GRANT).
        password_env / password_file: where the *reader* password comes from.
        admin_password_env / admin_password_file: where the *admin* password comes from.
        database: PostgreSQL only: the database of a source given as a bare schema name
            (replicas are one database each).
        pool_size: maximum open connections per engine instance (per process/actor).
        connect_timeout_s: seconds to wait for a TCP connection.
        sql_mode: MySQL only: ``None`` keeps the server default (documented in mysql.py).
        extra: engine-specific options (kept out of the fingerprint of replicas).
    """

    host: str = "127.0.0.1"
    port: int = 5432
    user: str = "polysql_reader"
    admin_user: str = "postgres"
    password_env: str | None = None
    password_file: str | None = None
    admin_password_env: str | None = None
    admin_password_file: str | None = None
    database: str = "polysql"
    pool_size: int = 4
    connect_timeout_s: float = 5.0
    sql_mode: str | None = None
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, cfg: dict[str, Any] | None, **defaults: Any) -> "ServerSettings":
        """Build from a config dict; unknown keys go to ``extra``.

        Raises ValueError when the dict contains a literal ``password``/``admin_password``
        key: secrets must come from ``*_env`` or ``*_file``.
        """
        cfg = dict(cfg or {})
        for bad in ("password", "admin_password"):
            if bad in cfg:
                raise ValueError(
                    f"'{bad}' must not appear in engine config; use {bad}_env or {bad}_file")
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs = {**defaults, **{k: v for k, v in cfg.items() if k in known}}
        extra = {k: v for k, v in cfg.items() if k not in known and k not in ("name", "_target_")}
        return cls(**kwargs, extra=extra)

    def reader_password(self) -> str | None:
        """The reader role's password (env var, then file), or None."""
        return resolve_secret(self.password_env, self.password_file)

    def admin_password(self) -> str | None:
        """The admin role's password (env var, then file), or None."""
        return resolve_secret(self.admin_password_env, self.admin_password_file)

    def public_dict(self) -> dict[str, Any]:
        """Settings safe to log or store in a manifest (only secret *locations*, no secrets)."""
        return asdict(self)


class PoolStats:
    """Counters of a :class:`ConnectionPool` (all plain ints, read without locking)."""

    def __init__(self) -> None:
        self.opened = 0
        self.reused = 0
        self.discarded = 0
        self.acquired = 0

    def as_dict(self) -> dict[str, int]:
        """``{"opened", "reused", "discarded", "acquired"}`` counts."""
        return dict(opened=self.opened, reused=self.reused, discarded=self.discarded,
                    acquired=self.acquired)


class ConnectionPool(Generic[C]):
    """Bounded, thread-safe pool of reusable connections.

    At most ``size`` connections exist at once; ``acquire`` blocks (up to ``wait_s``) when all
    are in use. Idle connections are reused LIFO. The caller marks a connection broken by
    raising out of the ``with`` block an exception for which ``is_broken(exc, conn)`` is true,
    or by calling :meth:`Lease.discard`; broken connections are closed and not returned.

    Keyed use (PostgreSQL: one database per replica, a connection serves one database):
    ``acquire(key)`` lends an idle connection opened for ``key``, else opens one with
    ``connect(key)``, closing the oldest idle connection of another key when ``size``
    connections are already open; the bound on open connections holds across keys.

    Args:
        connect: factory opening a new connection (may raise): no argument, or the key when
            :meth:`acquire` is given one.
        close: closes one connection (errors ignored).
        size: maximum simultaneous connections (>= 1).
        wait_s: seconds ``acquire`` waits for a free slot before raising TimeoutError.
    """

    def __init__(self, connect: Callable[[], C], close: Callable[[C], None], size: int = 4,
                 wait_s: float = 60.0) -> None:
        if size < 1:
            raise ValueError("pool size must be >= 1")
        self._connect = connect
        self._close = close
        self._idle: list[tuple[Any, C]] = []  # (key, connection), oldest first
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._lent = 0
        self.size = size
        self.wait_s = wait_s
        self.stats = PoolStats()

    @contextlib.contextmanager
    def acquire(self, key: Any = None) -> Iterator["Lease[C]"]:
        """Lend one connection: ``with pool.acquire() as lease: lease.conn ...``; with ``key``,
        one opened for that key (class docstring).

        Raises TimeoutError when no slot frees up within ``wait_s``; connection errors of the
        factory propagate (the slot is released).
        """
        if not self._slots.acquire(timeout=self.wait_s):
            raise TimeoutError(f"no free connection within {self.wait_s}s (pool size {self.size})")
        lease: Lease[C] | None = None
        try:
            conn, evicted = None, None
            with self._lock:
                for i in range(len(self._idle) - 1, -1, -1):
                    if self._idle[i][0] == key:
                        conn = self._idle.pop(i)[1]
                        break
                if conn is None and self._idle and len(self._idle) + self._lent >= self.size:
                    evicted = self._idle.pop(0)[1]  # oldest idle connection of another key
                self._lent += 1
            if evicted is not None:
                self.stats.discarded += 1
                with contextlib.suppress(Exception):
                    self._close(evicted)
            if conn is None:
                conn = self._connect() if key is None else self._connect(key)
                self.stats.opened += 1
            else:
                self.stats.reused += 1
            self.stats.acquired += 1
            lease = Lease(conn)
            yield lease
        except BaseException:
            if lease is not None:
                lease.broken = True
            raise
        finally:
            if lease is not None:
                if lease.broken:
                    self.stats.discarded += 1
                    with contextlib.suppress(Exception):
                        self._close(lease.conn)
                else:
                    with self._lock:
                        self._idle.append((key, lease.conn))
            with self._lock:
                self._lent -= 1
            self._slots.release()

    def close(self) -> None:
        """Close all idle connections (connections currently lent are closed on return)."""
        with self._lock:
            idle, self._idle = [c for _, c in self._idle], []
        for conn in idle:
            with contextlib.suppress(Exception):
                self._close(conn)

    def __repr__(self) -> str:
        return f"ConnectionPool(size={self.size}, stats={self.stats.as_dict()})"


class Lease(Generic[C]):
    """One borrowed connection; set ``broken`` (or call :meth:`discard`) to drop it."""

    def __init__(self, conn: C) -> None:
        self.conn = conn
        self.broken = False

    def discard(self) -> None:
        """Close this connection instead of returning it to the pool."""
        self.broken = True


def classify(code: Any, exact: dict, prefixes: dict | None = None, default: Any = None) -> Any:
    """Look an engine error code up in an error table (behaviour as data).

    Args:
        code: SQLSTATE string (PostgreSQL) or error number (MySQL); may be None.
        exact: code -> value.
        prefixes: code-prefix -> value, tried longest prefix first (SQLSTATE classes).
        default: value when nothing matches.
    """
    if code in exact:
        return exact[code]
    if prefixes and isinstance(code, str):
        for p in sorted(prefixes, key=len, reverse=True):
            if code.startswith(p):
                return prefixes[p]
    return default


def rows_to_arrow(names: list[str], rows: list[tuple], fallback_types: list | None = None):
    """Build an Arrow table from DB-API rows, keeping the driver's Python types.

    Types are inferred by Arrow from the values (``Decimal`` -> decimal128, ``date`` ->
    date32, ``datetime`` -> timestamp, ``bytes`` -> binary ...). A column with no non-NULL
    value takes ``fallback_types[i]`` (from the cursor description) when given, else null.
    Integers beyond int64 (MySQL ``BIGINT UNSIGNED`` up to 2**64 - 1, a PostgreSQL ``numeric``
    that is whole) stay numbers: ``uint64`` when none is negative, else ``decimal256(76, 0)``
    (:func:`_wide_integer_types`); decimals up to 76 digits are Arrow's own ``decimal256``. A
    column Arrow still cannot hold (mixed Python types, integers beyond 76 digits) becomes
    strings via ``str`` - recorded nowhere else, so keep it rare. Duplicate column names are kept.

    Args:
        names: column names in result order (duplicates allowed).
        rows: list of tuples, each ``len(names)`` long.
        fallback_types: optional Arrow types per column.
    """
    import pyarrow as pa

    arrays = []
    for i in range(len(names)):
        col = [r[i] for r in rows]
        fb = fallback_types[i] if fallback_types else None
        if all(v is None for v in col):
            arrays.append(pa.array(col, type=fb or pa.null()))
            continue
        try:
            arrays.append(pa.array(col))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            wide = _wide_integers(col)
            arrays.append(wide if wide is not None else
                          pa.array([None if v is None else str(v) for v in col], type=pa.string()))
    return pa.Table.from_arrays(arrays, names=list(names))


def _wide_integer_types():
    import pyarrow as pa

    #: (lowest, highest, Arrow type) tried in order for integers Arrow's int64 cannot hold.
    return ((0, 2**64 - 1, pa.uint64()), (-(10**76) + 1, 10**76 - 1, pa.decimal256(76, 0)))


def _wide_integers(col: list):
    """An exact Arrow array of a column of Python ints (and None) beyond int64, or None when
    the column holds anything else or an integer beyond 76 digits (:func:`rows_to_arrow`)."""
    import decimal

    import pyarrow as pa

    values = [v for v in col if v is not None]
    if not values or not all(type(v) is int for v in values):
        return None
    lo, hi = min(values), max(values)
    for low, high, typ in _wide_integer_types():
        if low <= lo and hi <= high:
            if pa.types.is_decimal(typ):
                return pa.array([None if v is None else decimal.Decimal(v) for v in col], type=typ)
            return pa.array(col, type=typ)
    return None


def denied_function(sql: str, dialect: str, denied: frozenset[str]) -> str | None:
    """Name of the first function in ``denied`` that ``sql`` calls, else None.

    Parses with sqlglot in ``dialect``; unparseable SQL returns None (the server then
    reports the syntax error itself). Names compare lower-cased; both sqlglot's known
    functions (``exp.Func.sql_name()``) and anonymous calls are checked.
    """
    import sqlglot
    from sqlglot import exp

    try:
        trees = sqlglot.parse(sql, read=dialect)
    except Exception:
        return None
    for tree in trees:
        if tree is None:
            continue
        for node in tree.find_all(exp.Func):
            name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
            if name and name.lower() in denied:
                return name.lower()
    return None


def precheck(sql: str | None, dialect: str, denied: frozenset[str], limits=None,
             send_unmodified: bool = False, denied_text: tuple[str, ...] = ()):
    """Client-side checks before an untrusted statement reaches a server.

    0. Length: longer than ``limits.max_sql_chars`` -> REJECTED unparsed.
    1. The shared statement guard (``engines/guard.check_statement``): exactly one
       SELECT/WITH statement (``reject`` -> REJECTED, ``empty`` -> EMPTY; ``defer`` lets the
       server judge, which still runs it read-only as the reader role).
    2. ``denied_text``: words refused anywhere in the ASCII-folded, lower-cased text
       (:func:`ascii_fold`), for objects no privilege can hide.
    3. The engine's denied functions (file/program/session access), as defence in depth:
       privileges of the reader role refuse them too, except MySQL ``LOAD_FILE`` which
       returns NULL instead of failing without the FILE privilege.

    Returns ``(None, sql_to_send)`` when the statement may run - ``sql`` itself when
    ``send_unmodified``, else the single statement cut out of surrounding ``;`` and trailing
    comments (a PostgreSQL server-side cursor refuses a trailing ``;``) - else
    ``((ExecStatus, message), None)``.
    """
    from polysql_ray.engines.base import ExecStatus
    from polysql_ray.engines.guard import check_statement

    too_long = limits.refuse_length(sql) if limits is not None else None
    if too_long is not None:
        return (too_long.status, too_long.error), None
    verdict = check_statement(sql, dialect)
    if verdict.action == "empty":
        return (ExecStatus.EMPTY, verdict.message or "no SQL to run"), None
    if verdict.action == "reject":
        return (ExecStatus.REJECTED, verdict.message), None
    if denied_text:
        folded = ascii_fold(sql)
        for word in denied_text:
            if word in folded:
                return (ExecStatus.REJECTED, f"{word!r} is not allowed in the sandbox"), None
    name = denied_function(sql, dialect, denied)
    if name is not None:
        return (ExecStatus.REJECTED, f"function {name}() is not allowed in the sandbox"), None
    if send_unmodified or verdict.action != "pass":
        return None, sql
    return None, single_statement_text(sql, dialect)


#: Deepest parenthesis nesting a warehouse engine sends (ClickHouse's own ``max_parser_depth``
#: is 1000; fakesnow and bqemulator parse in their request loop and stop answering on ~3000).
MAX_NESTING = 256


def warehouse_refusal(sql: str, dialect: str):
    """``(ExecStatus, message)`` for a statement a warehouse engine refuses before sending, else
    None: SYNTAX when the dialect's sqlglot tokenizer cannot read it (an unterminated string or
    comment: the server would answer a syntax error), REJECTED when parentheses nest deeper than
    :data:`MAX_NESTING`. Both protect the DuckDB-backed stand-ins too, which answer the first
    with HTTP 500 or not at all and stop serving on the second."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    from polysql_ray.engines.base import ExecStatus

    try:
        toks = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception as e:
        return ExecStatus.SYNTAX, f"the {dialect} tokenizer cannot read the statement ({type(e).__name__})"
    depth = deepest = 0
    for tok in toks:
        depth += (tok.token_type == TokenType.L_PAREN) - (tok.token_type == TokenType.R_PAREN)
        deepest = max(deepest, depth)
    if deepest > MAX_NESTING:
        return ExecStatus.REJECTED, f"parentheses nest {deepest} deep (limit {MAX_NESTING})"
    return None


def ascii_fold(text: str) -> str:
    """Lower-case ASCII skeleton of ``text`` (NFKD, marks and non-ASCII dropped, dotless i and
    long s mapped), so ``PROCESSLİST`` or full-width letters match ``processlist`` as a
    case- and accent-insensitive server collation would."""
    import unicodedata

    text = text.replace("\u0131", "i").replace("\u017f", "s")
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()


def single_statement_text(sql: str, dialect: str) -> str:
    """The text of the one non-empty statement in ``sql`` (guard already passed): from its
    first token to its last, dropping ``;`` separators and trailing comments."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    try:
        toks = [t for t in Dialect.get_or_raise(dialect).tokenize(sql)
                if t.token_type != TokenType.SEMICOLON]
    except Exception:
        return sql
    if not toks:
        return sql
    return sql[toks[0].start: toks[-1].end + 1]


class LiveStopwatch:
    """``with LiveStopwatch() as sw: ... sw.now()`` - seconds since entry, readable inside the
    block (``engines.base.Stopwatch`` only sets ``elapsed`` on exit)."""

    def __enter__(self) -> "LiveStopwatch":
        import time

        self._t0 = time.perf_counter()
        self.elapsed = 0.0
        return self

    def now(self) -> float:
        """Seconds since ``__enter__``."""
        import time

        return time.perf_counter() - self._t0

    def __exit__(self, *exc) -> None:
        self.elapsed = self.now()


#: Seconds a health probe (a trivial statement on a fresh connection) may take.
HEALTH_PROBE_S = 10.0
#: Seconds one outage may hold the next statement while the engine probes for health.
HEALTH_WAIT_S = 120.0
#: Backoff between two health probes while waiting: first wait, cap (seconds).
HEALTH_BACKOFF_S = (0.25, 4.0)


class ServerEngine(EngineDeclaration):
    """The one execute path of server engines (PostgreSQL, MySQL/MariaDB, Snowflake, BigQuery).

    :meth:`execute` is the whole call; an engine supplies hooks only:

    1. :func:`precheck` with the engine's :attr:`denied_functions`, :attr:`denied_text` and
       :attr:`send_unmodified` (length cap, statement guard, denied calls);
    2. :meth:`acquire` lends a connection (a :class:`Lease`) for ``limits``; the errors of
       :meth:`driver_errors` ``[1]`` while connecting, and a pool that stays full
       (``TimeoutError``), are UNAVAILABLE;
    3. :meth:`run` executes the statement on the lease and returns a typed
       :class:`~polysql_ray.engines.base.ExecutionResult` (its own row cap and timeout);
       a driver error (``driver_errors()[0]``) on a connection that :meth:`lost` is dropped
       and the statement retried on a fresh one, ``connection.lost_connection_retries``
       times; any other driver error becomes :meth:`failure` (the engine's error table);
       anything else is RUNTIME and the connection is dropped;
    4. :meth:`after` runs after every statement (session reset); ``queries`` counts the
       statements that reached the server.
    5. health (innocent predictions never pay for a neighbour's runaway or a hung server):
       after a ``timeout``, :meth:`probe` runs a trivial statement on a *fresh* connection
       within ``health_probe_s`` (setting, default :data:`HEALTH_PROBE_S`), and after an
       ``unavailable`` too (a hung server may first fail a session command). A server that
       does not answer makes the timeout ``unavailable`` (rescored by the next run, never the
       model's failure) and the engine *suspect*: the next statement runs only once a probe
       succeeds, probing with backoff for at most ``health_wait_s`` (default
       :data:`HEALTH_WAIT_S`) per outage; a statement that finds the server still unhealthy
       is ``unavailable`` without being sent. :attr:`probes` counts probes, ``health``
       (``"healthy"``/``"suspect"``) is the state. The runaway itself was cancelled on the
       server by the engine's ``run`` where the server can (job cancel, abort request,
       ``pg_cancel`` request, ``KILL QUERY``) and its connection discarded.

    Mixed into a :class:`~polysql_ray.engines.declaration.EngineDeclaration` subclass.
    """

    embedded = False
    takes_mapping = True
    transient_unavailable = True
    #: words refused anywhere in the ASCII-folded text (see :func:`precheck`)
    denied_text: tuple[str, ...] = ()
    #: send the statement as written (MySQL: comments are executed), else cut to one statement
    send_unmodified = False
    #: refuse before sending what the dialect's tokenizer cannot read or nests too deep
    #: (:func:`warehouse_refusal`; warehouses and their stand-ins stall on such text)
    tokenizer_guard = False
    #: prefix of the UNAVAILABLE message when no connection could be made
    unreachable = "connection lost"
    queries = 0
    probes = 0
    #: None (healthy) or ``time.monotonic()`` when the current outage was first seen
    _unhealthy_since: float | None = None

    @property
    def health(self) -> str:
        """``healthy``, or ``suspect`` after a timeout the server could not prove harmless."""
        return "healthy" if self._unhealthy_since is None else "suspect"

    # ------------------------------------------------------------------ hooks
    def driver_errors(self) -> tuple[tuple, tuple]:
        """``(statement errors, connect errors)``: exception classes of the driver (imported
        lazily: drivers stay optional)."""
        raise NotImplementedError

    def acquire(self, limits, location: str = ""):
        """Context manager lending a :class:`Lease` on a connection fit for ``limits`` and the
        replica ``location`` (PostgreSQL connects to the location's database)."""
        raise NotImplementedError

    def run(self, lease: "Lease", location: str, sql: str, limits):
        """Run ``sql`` in ``location`` on ``lease.conn``; a typed ExecutionResult."""
        raise NotImplementedError

    def lost(self, exc: BaseException, lease: "Lease") -> bool:
        """True when ``exc`` means the connection is dead (retry on a fresh one)."""
        return False

    def failure(self, exc: BaseException, lease: "Lease", limits, elapsed_s: float):
        """The typed failure of a statement error ``exc`` (the engine's error table)."""
        raise NotImplementedError

    def after(self, lease: "Lease") -> None:
        """Runs after every statement on its lease (e.g. reset the session)."""

    def scope_refusal(self, sql: str, location: str):
        """``(ExecStatus, message)`` for a statement refused client-side before it reaches the
        server because it reaches beyond the copy ``location`` (another copy, a catalog, a
        host file on a stand-in), else None. Default: nothing (the server's privileges decide).
        """
        return None

    def ping(self) -> None:
        """Open a fresh connection (never a pooled one), run a trivial statement, close it;
        raises when the server does not answer. Engines without it are never probed."""
        raise NotImplementedError

    # ------------------------------------------------------------------ health
    def _setting(self, key: str, default: float) -> float:
        s = self.settings
        extra = s.get(key) if isinstance(s, dict) else getattr(s, "extra", {}).get(key)
        return float(default if extra is None else extra)

    def probe(self) -> str | None:
        """None when :meth:`ping` succeeds within ``health_probe_s``, else why not."""
        from polysql_ray.engines.watchdog import DeadlineExceeded, call_with_deadline

        if type(self).ping is ServerEngine.ping:
            return None
        self.probes += 1
        try:
            call_with_deadline(self.ping, self._setting("health_probe_s", HEALTH_PROBE_S))
        except DeadlineExceeded as e:
            return f"health probe: {e}"
        except Exception as e:
            return f"health probe failed: {type(e).__name__}: {str(e)[:300]}"
        return None

    def _await_health(self) -> str | None:
        """Probe with backoff until healthy or this outage's ``health_wait_s`` is spent;
        None when healthy (the outage ends), else the last reason."""
        import time

        delay = HEALTH_BACKOFF_S[0]
        while True:
            problem = self.probe()
            if problem is None:
                self._unhealthy_since = None
                return None
            left = (self._unhealthy_since or time.monotonic()) + \
                self._setting("health_wait_s", HEALTH_WAIT_S) - time.monotonic()
            if left <= 0:
                return problem
            time.sleep(min(delay, left))
            delay = min(delay * 2, HEALTH_BACKOFF_S[1])

    # ------------------------------------------------------------------ the one path
    def execute(self, location: str, sql: str, limits):
        """Run one untrusted statement read-only in ``location`` (the replica's database,
        schema or dataset name). Never raises for bad SQL, timeouts, a missing replica or an
        unreachable server: those are typed results (see the class docstring)."""
        from polysql_ray.engines.base import ExecStatus, ExecutionResult

        with LiveStopwatch() as sw:
            refusal, sql = precheck(sql, self.dialect, self.denied_functions, limits=limits,
                                    send_unmodified=self.send_unmodified, denied_text=self.denied_text)
            if refusal is None and self.tokenizer_guard:
                refusal = warehouse_refusal(sql, self.dialect)
            if refusal is None:
                refusal = self.scope_refusal(sql, location)
        if refusal is not None:
            return ExecutionResult.failure(refusal[0], refusal[1], sw.elapsed)
        if self._unhealthy_since is not None:  # prove the server healthy before charging
            with LiveStopwatch() as sw:
                problem = self._await_health()
            if problem is not None:
                return ExecutionResult.failure(
                    ExecStatus.UNAVAILABLE, f"{self.unreachable}: the server has not answered since a "
                    f"statement timed out ({problem}); not sent", sw.elapsed)
        res = self._execute_checked(location, sql, limits)
        if res.status in (ExecStatus.TIMEOUT, ExecStatus.UNAVAILABLE):
            import time

            problem = self.probe()
            if problem is not None and self._unhealthy_since is None:
                self._unhealthy_since = time.monotonic()
            if problem is not None and res.status is ExecStatus.TIMEOUT:
                return ExecutionResult.failure(
                    ExecStatus.UNAVAILABLE, f"{self.unreachable}: timed out while the server was not "
                    f"answering ({problem}); not the statement's timeout: {res.error}", res.elapsed_s)
        return res

    def _execute_checked(self, location: str, sql: str, limits):
        """Steps 2-4 of the class docstring for a statement that passed :func:`precheck`."""
        from polysql_ray.engines.base import ExecStatus, ExecutionResult

        statement_errors, connect_errors = self.driver_errors()
        last: BaseException | None = None
        with LiveStopwatch() as sw:
            for _attempt in range(1 + self.connection.lost_connection_retries):
                try:
                    with self.acquire(limits, location) as lease:
                        try:
                            res = self.run(lease, location, sql, limits)
                        except statement_errors as e:
                            if self.lost(e, lease):
                                lease.discard()
                                last = e
                                continue
                            return self.failure(e, lease, limits, sw.now())
                        except Exception as e:  # result conversion etc.: never escape
                            lease.discard()
                            return ExecutionResult.failure(ExecStatus.RUNTIME, repr(e), sw.now())
                        finally:
                            self.after(lease)
                    self.queries += 1
                    res.elapsed_s = sw.now()
                    return res
                except connect_errors as e:  # could not (re)connect
                    last = e
                except TimeoutError as e:
                    return ExecutionResult.failure(ExecStatus.UNAVAILABLE, str(e), sw.now())
        return ExecutionResult.failure(ExecStatus.UNAVAILABLE, f"{self.unreachable}: {last}", sw.now())
