"""MySQL / MariaDB target engine (PyMySQL): one untrusted read-only statement, sandboxed.

Layout: one database per (dataset, db_id), named ``pq_<dataset>_<db_id>``
(:func:`servers.replica_name`); ``location`` is that database name, selected with
``COM_INIT_DB`` so predictions use unqualified table names as on the source.

Sandbox (README "Untrusted SQL"):

* **one reader account per copy** (:func:`copy_account`: ``<user>_<hash of the database>``,
  created by ``replication/mysql.py``): ``GRANT SELECT`` on its copy's database (and the alias
  databases the copy claimed) and nothing else; no FILE, PROCESS, SUPER ...: ``INTO OUTFILE``
  and ``SET GLOBAL`` fail with privilege errors (1045/1227) -> REJECTED, and another copy's
  database - another db_id, another run's replica, an admin database - is refused by the
  server (1142 on a SELECT -> SCHEMA, as another engine answers "no such table" for the same
  text; 1044 -> REJECTED) and absent from ``information_schema``, whatever the SQL;
  connections are pooled per copy (``ConnectionPool.acquire(key)``, the bound holds across
  copies);
* **a fresh session per statement**: ``COM_RESET_CONNECTION`` before every statement drops
  user variables, named locks (``GET_LOCK``), ``HANDLER`` state, temporary tables, prepared
  statements and session variables a previous prediction may have left; then one trusted
  ``SET SESSION`` puts back read-only transactions (``tx_read_only``/``transaction_read_only``:
  writes fail with 1792), the statement timeout (flavour from ``@@version``,
  :data:`FLAVOURS`) and the configured session variables;
* timeouts that no statement can switch off: the session timeout (MariaDB
  ``max_statement_time``, error 1969; MySQL ``max_execution_time``) plus a **watchdog** that
  sends ``KILL QUERY <id>`` from a separate control connection when the whole call (execute
  and fetch) passes the limit - an executable comment such as
  ``/*M!100000 SET STATEMENT max_statement_time=0 FOR */`` cannot reach it;
* the statement is sent **unmodified** (MariaDB accepts trailing ``;`` and comments; cutting
  comments would change what MariaDB runs, since ``/*! ... */`` is executed); executable
  comments are refused by the statement guard, so what it tokenizes is what the server runs;
* **SELECT only, decided by the server**: after the statement, the session counter
  ``Com_select`` (zeroed by the reset) must be exactly one (``DO``, ``HANDLER``,
  ``CHECKSUM TABLE``, ``SHOW`` move other counters) and a result set must have come back,
  else REJECTED;
* one statement: PyMySQL connects without ``CLIENT.MULTI_STATEMENTS`` (the server answers a
  ``;``-joined string with syntax error 1064), after the shared statement guard;
* ``LOAD_FILE`` is refused client-side (:data:`DENIED_FUNCTIONS`): without the FILE
  privilege MariaDB returns NULL instead of an error, which would look like a result;
  ``information_schema.PROCESSLIST`` is refused by text (:data:`DENIED_TEXT`): MariaDB shows
  an account its own other sessions (other predictions' SQL) and no privilege hides them;
* row cap: an unbuffered cursor (``SSCursor``) fetches ``row_cap + 1`` rows; when the cap is
  exceeded the connection is dropped instead of draining the rest.

Session semantics: ``sql_mode`` is the server default unless ``ServerSettings.sql_mode`` is
set (MariaDB 10.11 default: ``STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,
NO_AUTO_CREATE_USER,NO_ENGINE_SUBSTITUTION``): no ``ANSI_QUOTES`` (``"x"`` is a string) and no
``PIPES_AS_CONCAT`` (``a || b`` is logical OR), so SQLite-written predictions using ``||`` for
concatenation silently compute something else - that is the dialect gap being measured
(section 5), not something to paper over. Default collation ``utf8mb4_general_ci``: ``=`` and
``LIKE`` ignore case; ``div_precision_increment=4`` (1/3 = 0.3333).

Errors are mapped by error number (:data:`ERRNO_STATUS`; MariaDB "Error Codes" and MySQL
"Server Error Message Reference"). A lost connection (2006/2013, ``KILL``) is replaced
transparently and the statement retried once. Results keep PyMySQL's Python types
(``Decimal``, ``date``, ``datetime``, ``timedelta``, ``bytes``).
"""
from __future__ import annotations

import re

import time
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import ConnectionBehaviour, Semantics, StructuralFacts, StructuralIdentifiers
from polysql_ray.engines.identifiers import IdentifierRules
from polysql_ray.engines.servers import ConnectionPool, ServerEngine, ServerSettings, classify, rows_to_arrow

S = ExecStatus

#: Default settings (conf/engine/mysql.yaml mirrors them).
DEFAULTS: dict[str, Any] = dict(host="127.0.0.1", port=3306, user="polysql_reader",
                                admin_user="root", database="", pool_size=4,
                                password_env="POLYSQL_MYSQL_READER_PASSWORD",
                                admin_password_env="POLYSQL_MYSQL_ADMIN_PASSWORD")

#: Error number -> status (MySQL and MariaDB share most numbers).
ERRNO_STATUS: dict[int, ExecStatus] = {
    1064: S.SYNTAX,    # ER_PARSE_ERROR
    1149: S.SYNTAX,    # ER_SYNTAX_ERROR
    1146: S.SCHEMA,    # ER_NO_SUCH_TABLE
    1054: S.SCHEMA,    # ER_BAD_FIELD_ERROR
    1305: S.SYNTAX,    # ER_SP_DOES_NOT_EXIST (unknown function: the dialect lacks it)
    1630: S.SCHEMA,    # ER_FUNC_INEXISTENT_NAME_COLLISION
    1052: S.SCHEMA,    # ER_NON_UNIQ_ERROR (ambiguous column)
    1109: S.SCHEMA,    # ER_UNKNOWN_TABLE
    1049: S.UNAVAILABLE,  # ER_BAD_DB_ERROR (replica database missing)
    1969: S.TIMEOUT,   # MariaDB ER_STATEMENT_TIMEOUT (max_statement_time)
    3024: S.TIMEOUT,   # MySQL ER_QUERY_TIMEOUT (max_execution_time)
    1317: S.TIMEOUT,   # ER_QUERY_INTERRUPTED (KILL QUERY)
    1142: S.REJECTED,  # ER_TABLEACCESS_DENIED_ERROR (a command other than SELECT: ERRNO_MESSAGE_STATUS)
    1143: S.REJECTED,  # ER_COLUMNACCESS_DENIED_ERROR
    1227: S.REJECTED,  # ER_SPECIFIC_ACCESS_DENIED_ERROR (SET GLOBAL, SUPER ...)
    1044: S.REJECTED,  # ER_DBACCESS_DENIED_ERROR
    1045: S.REJECTED,  # ER_ACCESS_DENIED_ERROR (INTO OUTFILE without FILE)
    # ER_PROCACCESS_DENIED_ERROR: `MAX (x)` (a space before the parenthesis) names a stored
    # routine `<db>.MAX`; replicas contain no routines, so this is a call of a function that
    # does not exist in the dialect as written (root would get 1305), not a sandbox refusal.
    1370: S.SYNTAX,
    1792: S.REJECTED,  # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
    1290: S.REJECTED,  # ER_OPTION_PREVENTS_STATEMENT (--secure-file-priv, read-only)
    1055: S.SYNTAX,    # ER_WRONG_FIELD_WITH_GROUP (ONLY_FULL_GROUP_BY): GROUP BY strictness
    1111: S.RUNTIME,   # ER_INVALID_GROUP_FUNC_USE
    1242: S.RUNTIME,   # ER_SUBQUERY_NO_1_ROW
    1241: S.RUNTIME,   # ER_OPERAND_COLUMNS
    1267: S.RUNTIME,   # ER_CANT_AGGREGATE_2COLLATIONS
    1365: S.RUNTIME,   # ER_DIVISION_BY_ZERO
    2003: S.UNAVAILABLE,  # CR_CONN_HOST_ERROR
    2006: S.UNAVAILABLE,  # CR_SERVER_GONE_ERROR
    2013: S.UNAVAILABLE,  # CR_SERVER_LOST
    2055: S.UNAVAILABLE,  # CR_SERVER_LOST_EXTENDED
}

#: Error number -> ((message prefix, status), ...): where one number means two things, the
#: server's message decides, first match wins, then :data:`ERRNO_STATUS`.
#: 1142 "SELECT command denied ... for table `otherdb`.`t`": the copy's reader holds SELECT on
#: its own database only, so a SELECT is refused exactly when it names a table outside it
#: (another database, ``mysql.user``): the model named something its schema does not have, a
#: schema error as PostgreSQL's 42P01 and SQLite's "no such table" for the same text. Any other
#: command denied (INSERT, DROP ...) stays a sandbox refusal.
ERRNO_MESSAGE_STATUS: dict[int, tuple[tuple[str, ExecStatus], ...]] = {
    1142: (("SELECT command denied", S.SCHEMA),),
}

#: Client error numbers meaning "this connection is dead": drop it and retry once.
LOST_CONNECTION_ERRNOS: frozenset[int] = frozenset({0, 2006, 2013, 2055, 1927})

#: Functions refused before execution (lower case; see module docstring).
DENIED_FUNCTIONS: frozenset[str] = frozenset({"load_file", "sys_exec", "sys_eval"})

#: Words refused anywhere in the text (ASCII-folded, lower case; see module docstring).
DENIED_TEXT: tuple[str, ...] = ("processlist",)

#: Built-in functions MySQL/MariaDB parse as functions only when the name touches its ``(``,
#: unless ``sql_mode`` has ``IGNORE_SPACE`` (MySQL 8.0 Reference 11.2.5 "Function Name Parsing
#: and Resolution"); ``COUNT (*)`` is then a syntax error or a stored-routine call (1064/1305/1370).
SPACE_SENSITIVE_FUNCTIONS: frozenset[str] = frozenset({
    "adddate", "bit_and", "bit_or", "bit_xor", "cast", "count", "curdate", "curtime", "date_add",
    "date_sub", "extract", "group_concat", "max", "mid", "min", "now", "position", "session_user",
    "std", "stddev", "stddev_pop", "stddev_samp", "subdate", "substr", "substring", "sum", "sysdate",
    "system_user", "trim", "variance", "var_pop", "var_samp",
})

#: Session variables that change what a statement returns (MariaDB "Server System Variables"):
#: read by :meth:`MySQLEngine.identity` after the engine's own ``SET SESSION``, so they are the
#: values predictions meet; they enter every cell key scored on the server.
RESULT_VARIABLES: tuple[str, ...] = (
    "lower_case_table_names",   # 0: table names case-sensitive (FROM Singer misses table singer)
    "sql_mode",                 # IGNORE_SPACE (count (*)), PIPES_AS_CONCAT, ANSI_QUOTES, ONLY_FULL_GROUP_BY
    "collation_server", "character_set_server", "collation_connection",  # = / LIKE / GROUP BY on text
    "div_precision_increment",  # digits of 1/3
    "time_zone", "system_time_zone",  # NOW(), CURDATE(), TIMESTAMP values
    "group_concat_max_len",     # GROUP_CONCAT silently truncates past it
    "default_week_format",      # WEEK()
)

#: ``COM_RESET_CONNECTION`` (MySQL 5.7.3+, MariaDB 10.2.4+): reset the session, keep the login.
COM_RESET_CONNECTION = 0x1F

#: Seconds the watchdog waits past ``limits.timeout_s`` before ``KILL QUERY`` (the session
#: timeout normally fires first and reports error 1969).
WATCHDOG_GRACE_S = 1.0


@dataclass(frozen=True)
class Flavour:
    """How one server flavour spells its statement timeout.

    Attributes:
        timeout_var: session variable of the statement timeout.
        unit_per_s: multiplier from seconds to the variable's unit.
        read_only_var: session variable making every transaction read-only.
        extra: further trusted ``name = value`` session settings.
    """

    timeout_var: str
    unit_per_s: float
    read_only_var: str
    extra: tuple[str, ...] = ()


#: Server flavour (``"MariaDB" in @@version``) -> session settings.
FLAVOURS: dict[str, Flavour] = {
    # MariaDB silently *truncates* a recursive CTE at max_recursive_iterations (1000) and returns
    # rows as if complete; lifted so a runaway query meets the timeout instead of looking like an
    # answer (MySQL errors out: 3636).
    "mariadb": Flavour("max_statement_time", 1.0, "tx_read_only",
                       ("max_recursive_iterations = 4294967295",)),
    "mysql": Flavour("max_execution_time", 1000.0, "transaction_read_only"),
}

_FIELD_ARROW: dict[int, pa.DataType] | None = None


def _field_arrow() -> dict[int, pa.DataType]:
    """PyMySQL FIELD_TYPE code -> Arrow type for columns with no value (lazy)."""
    global _FIELD_ARROW
    if _FIELD_ARROW is None:
        from pymysql.constants import FIELD_TYPE as F

        _FIELD_ARROW = {
            F.TINY: pa.int8(), F.SHORT: pa.int16(), F.LONG: pa.int32(), F.INT24: pa.int32(),
            F.LONGLONG: pa.int64(), F.FLOAT: pa.float32(), F.DOUBLE: pa.float64(),
            F.NEWDECIMAL: pa.decimal128(38, 10), F.DECIMAL: pa.decimal128(38, 10),
            F.VAR_STRING: pa.string(), F.STRING: pa.string(), F.VARCHAR: pa.string(),
            F.BLOB: pa.string(), F.DATE: pa.date32(), F.DATETIME: pa.timestamp("us"),
            F.TIMESTAMP: pa.timestamp("us"), F.TIME: pa.duration("us"), F.YEAR: pa.int16(),
        }
    return _FIELD_ARROW


def _errno(exc: BaseException) -> int | None:
    """The MySQL error number of a PyMySQL exception, else None."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else None


class _Conn:
    """A PyMySQL connection plus what we know about its session (flavour, timeout, db)."""

    def __init__(self, raw, flavour: str) -> None:
        self.raw = raw
        self.flavour = flavour
        self.db: str | None = None
        self.thread_id: int = raw.thread_id()


def copy_account(user: str, database: str) -> str:
    """The reader account of the copy in ``database``: ``<user>_<12 hex of sha256(database)>``
    (lower case; ``user`` cut to 16 characters so the name fits MySQL's 32). Deterministic, so
    the writer that grants and the engine that connects agree without a shared record."""
    import hashlib

    return f"{user[:16]}_{hashlib.sha256(database.lower().encode()).hexdigest()[:12]}"


def connect_raw(settings: ServerSettings, admin: bool = False, database: str | None = None,
                user: str | None = None, **extra):
    """Open a PyMySQL connection (``user``, else the configured reader; the admin when
    ``admin``), autocommit, utf8mb4, no multi-statements. Raises
    ``pymysql.err.OperationalError`` when unreachable or refused."""
    import pymysql

    pw = settings.admin_password() if admin else settings.reader_password()
    return pymysql.connect(host=settings.host, port=int(settings.port),
                           user=settings.admin_user if admin else (user or settings.user),
                           password=pw or "", database=database or None, charset="utf8mb4",
                           autocommit=True, connect_timeout=max(1, int(settings.connect_timeout_s)),
                           client_flag=0, **extra)


def server_flavour(raw) -> str:
    """``"mariadb"`` or ``"mysql"`` from ``SELECT @@version``."""
    with raw.cursor() as cur:
        cur.execute("SELECT @@version")
        return "mariadb" if "mariadb" in str(cur.fetchone()[0]).lower() else "mysql"


class MySQLEngine(ServerEngine):
    """MySQL/MariaDB engine (``dialect = "mysql"``) - see the module docstring.

    Args:
        settings: :class:`ServerSettings` or a config dict (``DEFAULTS`` fill the gaps).

    Attributes:
        pool: bounded :class:`ConnectionPool` (``stats.opened`` = connections opened).
        queries: ``execute`` calls that reached the server.
    """

    name = "mysql"
    dialect = "mysql"
    settings = {}
    # MySQL 8.0 reference 11.2.3: columns case-insensitive; table names per lower_case_table_names
    identifiers = IdentifierRules(fold=None, tables_ci=None, columns_ci=True, quote="`")
    semantics = Semantics(
        integer_division=False,  # "Arithmetic Operators": / gives a DECIMAL (div_precision_increment
                                 # digits); DIV is integer division
        nulls_asc="first", nulls_desc="last",  # "Working with NULL Values": NULLs are presented first
                                               # with ORDER BY ... ASC and last with DESC
        ci_equals=True,          # "Character Sets and Collations": default collations (_ci) ignore case
        ci_like=True,            # "String Comparison Functions": LIKE follows the collation
        empty_sum_null=True,     # "Aggregate Function Descriptions": SUM() returns NULL if there were
                                 # no matching rows
        string_number="number",  # "Type Conversion in Expression Evaluation": a string compared with a
                                 # number compares as floating-point numbers
        arbitrary_ungrouped=True,
        pad_space=True,          # "The PAD SPACE collations" (MariaDB "Character Sets and Collations":
                                 # utf8mb4_general_ci is PAD SPACE): trailing spaces are ignored by =
    )
    # nothing proven across it: case- and accent-insensitive collations change =, GROUP BY, DISTINCT
    structural = StructuralFacts(identifiers=StructuralIdentifiers(False, False, False, "exact"),
                                 numeric_plus=True)
    type_map = {"INTEGER": "INT", "SMALLINT": "SMALLINT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE",
                "VARCHAR": "LONGTEXT", "BLOB": "LONGBLOB", "DECIMAL": "DECIMAL", "BOOLEAN": "BOOLEAN",
                "DATE": "DATE", "TIMESTAMP": "DATETIME(6)"}
    varchar_with_length = "VARCHAR({n})"
    writer = "polysql_ray.replication.mysql:MySQLWriter"
    reader = "polysql_ray.replication.mysql_source:MySQLReader"
    sandbox = {"flavours": FLAVOURS, "role": "polysql_reader_<copy hash> (one per copy)", "session_reset": "COM_RESET_CONNECTION",
               "statement_check": "Com_select == 1", "multi_statements": False}
    error_table = {**ERRNO_STATUS, **{(n, prefix): st for n, rules in ERRNO_MESSAGE_STATUS.items()
                                      for prefix, st in rules}}
    denied_functions = DENIED_FUNCTIONS
    denied_text = DENIED_TEXT
    send_unmodified = True
    connection = ConnectionBehaviour("pool", lost_connection_retries=1, fresh_session=True)
    prompt_rules = "mysql.yaml"
    # --pidfile: without it start-stop-daemon takes ANY mariadbd (a private instance on another
    # port) for "already running" and starts nothing. lower_case_table_names=1: table names
    # resolve case-insensitively, as on the SQLite sources (README "Replication").
    server_start = ("start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid "
                    "--exec /usr/sbin/mariadbd -- --lower-case-table-names=1")

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **DEFAULTS)
        self.settings = settings
        self.pool: ConnectionPool = ConnectionPool(self._open, lambda c: c.raw.close(),
                                                   settings.pool_size)
        self.queries = 0

    def __repr__(self) -> str:
        s = self.settings
        return f"MySQLEngine({s.user}@{s.host}:{s.port}, pool={s.pool_size})"

    def _open(self, database: str) -> _Conn:
        """A connection as the copy's own reader account, in its database."""
        raw = connect_raw(self.settings, database=database,
                          user=copy_account(self.settings.user, database))
        conn = _Conn(raw, server_flavour(raw))
        conn.db = database
        return conn

    def _session(self, conn: _Conn, limits: Limits) -> tuple[str, list]:
        """The one trusted ``SET SESSION`` run after each reset, and its bound parameters.

        engines.mysql.session_vars (e.g. ``{div_precision_increment: 30}``): names checked
        against a plain identifier pattern, values bound parameters."""
        flav = FLAVOURS[conn.flavour]
        value = limits.timeout_s * flav.unit_per_s
        value = round(value, 3) if conn.flavour == "mariadb" else max(1, int(value))
        parts = [f"{flav.read_only_var} = 1", f"{flav.timeout_var} = {value}", *flav.extra]
        params: list = []
        if self.settings.sql_mode is not None:
            parts.append("sql_mode = %s")
            params.append(self.settings.sql_mode)
        for name, val in (self.settings.extra.get("session_vars") or {}).items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
                raise ValueError(f"engines.mysql.session_vars: bad variable name {name!r}")
            parts.append(f"{name} = %s")
            params.append(val)
        return "SET SESSION " + ", ".join(parts), params

    def identity(self) -> dict:
        """Flavour, version and :data:`RESULT_VARIABLES` (plus any ``session_vars``) as a
        prediction's session sees them: read on an admin connection after the engine's own
        ``SET SESSION`` (the reader account may not exist before the first replica). Raises
        PyMySQL's ``OperationalError`` when the server is unreachable."""
        raw = connect_raw(self.settings, admin=True)
        try:
            flavour = server_flavour(raw)
            setup, params = self._session(_Conn(raw, flavour), Limits())
            names = list(dict.fromkeys([*RESULT_VARIABLES, *(self.settings.extra.get("session_vars") or {})]))
            with raw.cursor() as cur:
                cur.execute(setup, params or None)
                # @@name: the session value where there is one (set just above), else the global
                cur.execute("SELECT @@version, " + ", ".join(f"@@{n}" for n in names))
                row = cur.fetchone()
        finally:
            raw.close()
        return {"product": "MariaDB" if flavour == "mariadb" else "MySQL", "version": str(row[0]),
                "standin": "", "settings": {n: str(v) for n, v in zip(names, row[1:])},
                "endpoint": f"{self.settings.host}:{self.settings.port}"}

    def _kill_query(self, database: str, thread_id: int) -> None:
        """Watchdog: ``KILL QUERY <thread_id>`` from a fresh connection of the same copy account
        (an account may kill its own statements, and only those). Errors are swallowed (the
        query may be done)."""
        import pymysql

        for _ in range(2):
            try:
                with connect_raw(self.settings, user=copy_account(self.settings.user, database)) as c, \
                        c.cursor() as cur:
                    cur.execute(f"KILL QUERY {int(thread_id)}")
                return
            except pymysql.err.MySQLError:
                continue

    # ------------------------------------------------------------------ execution hooks
    def driver_errors(self) -> tuple[tuple, tuple]:
        """PyMySQL errors: any on a statement, OperationalError when connecting."""
        import pymysql

        return (pymysql.err.MySQLError,), (pymysql.err.OperationalError,)

    def acquire(self, limits: Limits, location: str = ""):
        """A pooled connection of the copy's reader account (keyed by ``location``)."""
        return self.pool.acquire(location)

    def lost(self, exc: BaseException, lease) -> bool:
        """An interface error or a lost-connection number (:data:`LOST_CONNECTION_ERRNOS`)."""
        import pymysql

        return isinstance(exc, pymysql.err.InterfaceError) or _errno(exc) in LOST_CONNECTION_ERRNOS

    def failure(self, e: BaseException, lease, limits: Limits, elapsed_s: float) -> ExecutionResult:
        """Status by error number (:data:`ERRNO_STATUS`)."""
        code = _errno(e)
        text = str(e.args[1] if len(e.args) > 1 else e)
        status = next((st for prefix, st in ERRNO_MESSAGE_STATUS.get(code, ()) if text.startswith(prefix)),
                      None) or classify(code, ERRNO_STATUS, None, S.RUNTIME)
        return ExecutionResult.failure(status, f"[{code}] {text}", elapsed_s)

    def run(self, lease, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Reset the session, select the database, run under the watchdog (module docstring)."""
        import threading

        import pymysql

        conn: _Conn = lease.conn
        raw = conn.raw
        raw._execute_command(COM_RESET_CONNECTION, b"")  # fresh session (module docstring)
        raw._read_ok_packet()
        if conn.db != location:
            try:
                raw.select_db(location)
            except pymysql.err.OperationalError as e:
                if e.args and e.args[0] in (1049, 1044):
                    return ExecutionResult.failure(
                        S.UNAVAILABLE, f"replica database {location!r} unavailable: {e.args[1]}")
                raise
            conn.db = location
        setup, params = self._session(conn, limits)
        with raw.cursor() as cur:
            cur.execute(setup, params or None)
        fired = threading.Event()

        def watchdog() -> None:
            fired.set()
            self._kill_query(location, conn.thread_id)

        timer = threading.Timer(limits.timeout_s + WATCHDOG_GRACE_S, watchdog)
        timer.daemon = True
        cur = raw.cursor(pymysql.cursors.SSCursor)
        t0 = time.perf_counter()
        timer.start()
        try:
            cur.execute(sql)
            rows = cur.fetchmany(limits.row_cap + 1)
            desc = cur.description
            if len(rows) > limits.row_cap:
                # stop the server first: the unbuffered cursor drains the rest of the result when
                # it is closed or collected (SELECT seq FROM seq_1_to_1000000000000 read rows until
                # max_statement_time, 3x the limit on a loaded machine)
                timer.cancel()
                self._kill_query(location, conn.thread_id)
                if cur._result is not None:  # PyMySQL would spin reading rows until EOF
                    cur._result.unbuffered_active = False
                cur._result = None
                raw._force_close()  # drop the socket with the rows still in flight: nothing drained
                cur.close()
                lease.discard()
                return ExecutionResult.failure(S.TOO_LARGE, f"more than {limits.row_cap} rows (row cap)")
            cur.close()
        except pymysql.err.MySQLError:
            if fired.is_set():
                lease.discard()
                return ExecutionResult.failure(
                    S.TIMEOUT, f"killed by the watchdog after {limits.timeout_s}s (whole call)")
            raise
        finally:
            timer.cancel()
        if fired.is_set() or time.perf_counter() - t0 >= limits.timeout_s:
            # MariaDB lets some functions (BENCHMARK) return a value after being interrupted
            # by max_statement_time, without an error: a result past the limit is a timeout.
            lease.discard()
            return ExecutionResult.failure(
                S.TIMEOUT, f"statement ran past the {limits.timeout_s}s limit (interrupted)")
        with raw.cursor() as check:
            check.execute("SHOW SESSION STATUS LIKE 'Com\\_select'")
            selects = int(check.fetchone()[1])
        if desc is None or selects != 1:
            return ExecutionResult.failure(
                S.REJECTED, "not a SELECT statement (the server ran it as another kind: "
                f"Com_select moved by {selects}{', no result set' if desc is None else ''})")
        fmap = _field_arrow()
        names = [d[0] for d in desc]
        types = [fmap.get(d[1], pa.null()) for d in desc]
        return ExecutionResult(S.OK, rows_to_arrow(names, list(rows), types))

    def ping(self) -> None:
        """``SELECT 1`` on a fresh connection, closed after (health probe). It connects as the
        admin account: the probe asks whether the server answers, and since readers are per copy
        (:func:`copy_account`) the configured base reader need not exist on the server at all."""
        raw = connect_raw(self.settings, admin=True)
        try:
            with raw.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchone()
        finally:
            raw.close()

    def close(self) -> None:
        """Close pooled connections."""
        self.pool.close()
