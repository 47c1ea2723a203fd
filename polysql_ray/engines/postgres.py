"""PostgreSQL target engine (psycopg 3): one untrusted read-only statement, sandboxed.

Locations (:func:`split_location`): ``<database>/<schema>``, or a bare ``<schema>`` of the
configured database (``ServerSettings.database``, default ``polysql``; PostgreSQL sources).
A replica is one *database* per copy, ``pq_<dataset>_<db_id>_<tag>`` (:func:`servers.replica_name`),
holding the source's schema under the source's name (``main`` for an SQLite source, the source
database's name for MySQL, the source schema for PostgreSQL), so qualified names resolve as on
the source (``replication/postgres.py``). Each query runs with ``search_path`` set to exactly
that schema (``pg_catalog`` stays implicitly first, as always in PostgreSQL), so unqualified
names resolve too. One bounded pool serves every database: a connection belongs to one
database, and the pool closes the oldest idle connection of another database before opening
one past ``pool_size`` (``ConnectionPool.acquire(key)``), so 20 Spider databases never take
more than ``pool_size`` connections per engine (why this is our pool and not
``psycopg_pool``, which serves one database per pool: :mod:`polysql_ray.engines.servers`).

Sandbox (README "Untrusted SQL"), all enforced by the server, not by us:

* the statement runs as the least-privilege role ``polysql_reader`` (created by
  ``replication/postgres.py``: LOGIN, NOSUPERUSER, USAGE+SELECT on ``pq_*`` schemas only,
  role defaults ``default_transaction_read_only=on`` and a ``statement_timeout`` backstop);
  superuser-only file/program access (``pg_read_file``, ``lo_import``, ``COPY ... PROGRAM``)
  fails with SQLSTATE 42501 -> REJECTED;
* the reader role cannot call server-control or session-spying functions: :func:`harden_database`
  (run by replication as the admin) revokes ``EXECUTE`` from ``PUBLIC`` on
  :data:`REVOKED_FUNCTIONS` (``pg_terminate_backend``, ``pg_cancel_backend``, ``set_config``,
  ``pg_stat_get_activity`` ...) and ``SELECT`` on ``pg_stat_activity`` in the replica
  database, so SQL the client cannot parse still fails (42501 -> REJECTED);
* no other database is visible: a connection reaches one database only, and in each copy's
  database :func:`harden_database` also revokes from ``PUBLIC`` ``SELECT`` on every relation
  that shows the server's other databases, roles or tablespaces and ``EXECUTE`` on every
  function that names or probes them (:func:`cluster_objects`, derived from the server:
  shared catalogs ``pg_class.relisshared``, the ``pg_catalog`` views over them,
  object-address and database/tablespace functions), so ``SELECT datname FROM pg_database``,
  ``pg_stat_database``, ``pg_roles`` and ``pg_describe_object(1262, oid, 0)`` fail with 42501.
  Privileges live in each database's own ``pg_class``, so this changes nothing in the server's
  other databases (no server setting is touched). The same names are refused client-side
  first (:meth:`PostgresEngine.scope_refusal`, defence in depth);
* inside ``BEGIN READ ONLY`` with ``SET LOCAL statement_timeout`` (ms) -> 57014 is TIMEOUT;
  every later ``FETCH`` gets only the time left, and a watchdog sends a cancel request
  (``Connection.cancel``, a separate connection the query cannot reach) when the whole call
  passes the limit: the deadline covers the execute *and* the fetch;
* a fresh session per statement: ``ROLLBACK`` then ``DISCARD ALL`` after every statement
  (advisory locks, session variables, prepared statements, temp tables, LISTEN); a connection
  that is not idle afterwards (e.g. stuck in an aborted transaction, 25P02) is closed;
* through a server-side cursor (``DECLARE ... CURSOR FOR <sql>``, extended protocol): the
  server rejects a multi-statement string ("cannot insert multiple commands into a prepared
  statement", 42601) and only ``row_cap + 1`` rows ever leave the server (``FETCH``);
* after the shared statement guard (``engines/guard.py``) has accepted exactly one
  SELECT/WITH statement.

Errors are mapped by SQLSTATE (:data:`SQLSTATE_STATUS`, then class :data:`SQLSTATE_CLASS_STATUS`;
PostgreSQL docs Appendix A "PostgreSQL Error Codes"). A lost connection (backend terminated,
server restart) is replaced transparently and the read-only statement retried once.
Results are Arrow tables built from psycopg's Python values (``Decimal``, ``date``,
``datetime``, ``bytes`` ...).
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import (
    PORTABLE_CORE, PORTABLE_GUARDED, ConnectionBehaviour, Semantics, StructuralFacts, StructuralIdentifiers,
)
from polysql_ray.engines.identifiers import POSTGRES_RESERVED, IdentifierRules
from polysql_ray.engines.servers import ConnectionPool, ServerEngine, ServerSettings, classify, rows_to_arrow

S = ExecStatus

#: Default settings (conf/engine/postgres.yaml mirrors them).
DEFAULTS: dict[str, Any] = dict(host="127.0.0.1", port=5432, user="polysql_reader",
                                admin_user="postgres", database="polysql", pool_size=4,
                                password_env="POLYSQL_PG_READER_PASSWORD",
                                admin_password_env="POLYSQL_PG_ADMIN_PASSWORD")

#: Exact SQLSTATE -> status.
SQLSTATE_STATUS: dict[str, ExecStatus] = {
    "42601": S.SYNTAX,    # syntax_error (also: multiple commands in a prepared statement)
    "42P01": S.SCHEMA,    # undefined_table
    "42703": S.SCHEMA,    # undefined_column
    "42883": S.SYNTAX,    # undefined_function / operator: the dialect lacks it (not schema linking)
    "42803": S.SYNTAX,    # grouping_error: GROUP BY strictness of the dialect
    "42702": S.SCHEMA,    # ambiguous_column
    "42P09": S.SCHEMA,    # ambiguous_alias
    "42704": S.SCHEMA,    # undefined_object
    "3F000": S.SCHEMA,    # invalid_schema_name (qualified name of a missing schema)
    "42501": S.REJECTED,  # insufficient_privilege (pg_read_file, lo_import, other schemas ...)
    "25006": S.REJECTED,  # read_only_sql_transaction
    "0A000": S.RUNTIME,   # feature_not_supported
    "57014": S.TIMEOUT,   # query_canceled (statement_timeout)
    "57P01": S.UNAVAILABLE,  # admin_shutdown (backend terminated)
    "57P02": S.UNAVAILABLE,  # crash_shutdown
    "57P03": S.UNAVAILABLE,  # cannot_connect_now
    "3D000": S.UNAVAILABLE,  # invalid_catalog_name (database missing)
    "28000": S.UNAVAILABLE,  # invalid_authorization_specification
    "28P01": S.UNAVAILABLE,  # invalid_password
}

#: SQLSTATE class (first two characters) -> status, when no exact code matches.
SQLSTATE_CLASS_STATUS: dict[str, ExecStatus] = {
    "42": S.RUNTIME,   # other "syntax error or access rule" (datatype mismatch, grouping ...)
    "22": S.RUNTIME,   # data exception (division by zero, invalid cast ...)
    "21": S.RUNTIME,   # cardinality violation (subquery returned more than one row)
    "53": S.RUNTIME,   # insufficient resources
    "54": S.RUNTIME,   # program limit exceeded
    "08": S.UNAVAILABLE,  # connection exception
}

#: Type OID -> Arrow type for columns that carry no value (empty or all-NULL result columns).
OID_ARROW: dict[int, pa.DataType] = {
    16: pa.bool_(), 20: pa.int64(), 21: pa.int16(), 23: pa.int32(), 700: pa.float32(),
    701: pa.float64(), 1700: pa.decimal128(38, 10), 25: pa.string(), 1043: pa.string(),
    1042: pa.string(), 19: pa.string(), 1082: pa.date32(), 1114: pa.timestamp("us"),
    1184: pa.timestamp("us", tz="UTC"), 17: pa.binary(),
}

#: Functions whose EXECUTE privilege PUBLIC loses in the replica database (all overloads):
#: server control and other sessions' state. Superusers (replication) keep them.
REVOKED_FUNCTIONS: tuple[str, ...] = (
    "pg_terminate_backend", "pg_cancel_backend", "set_config", "pg_stat_get_activity",
    "pg_stat_get_backend_activity", "pg_stat_get_backend_activity_start", "pg_stat_get_backend_pid",
    "pg_stat_get_backend_userid", "pg_stat_get_backend_client_addr", "pg_stat_get_backend_idset",
    "pg_blocking_pids", "pg_notify", "pg_listening_channels",
)

#: Views PUBLIC loses SELECT on in the replica database (other sessions' query text).
REVOKED_VIEWS: tuple[str, ...] = ("pg_stat_activity", "pg_stat_ssl", "pg_stat_gssapi")

#: The relations of the server that show other databases (other copies, another run's replicas,
#: the server's other databases) or its roles and tablespaces, derived from the server itself
#: rather than listed: every shared catalog (``pg_class.relisshared``: ``pg_database``,
#: ``pg_authid``, ``pg_shdescription``, ``pg_db_role_setting``, ``pg_tablespace`` ...) and every
#: ``pg_catalog`` view whose definition names one, transitively (``pg_stat_database``,
#: ``pg_roles``, ``pg_user``, ``pg_stat_activity``, ``pg_tables`` for its tablespace column ...).
#: PostgreSQL records no dependencies between its own objects (they are pinned), so views are
#: matched on ``pg_get_viewdef`` text. One column, ``relname``; readable by any role.
CLUSTER_RELATIONS_SQL = r"""
WITH RECURSIVE views AS MATERIALIZED (
    SELECT v.relname::text AS relname, pg_catalog.pg_get_viewdef(v.oid) AS def FROM pg_catalog.pg_class v
    WHERE v.relkind = 'v' AND v.relnamespace = 'pg_catalog'::regnamespace
), reach(relname) AS (
    SELECT c.relname::text FROM pg_catalog.pg_class c WHERE c.relisshared AND c.relkind = 'r'
  UNION
    SELECT v.relname FROM views v, reach r WHERE v.def ~ ('\m' || r.relname || '\M')
)
SELECT DISTINCT relname FROM reach ORDER BY 1
"""

#: The functions that name, measure or probe any database or tablespace of the server, derived
#: from ``pg_proc``: those taking an object address ``(classid oid, objid oid, objsubid int)``
#: (``pg_describe_object(1262, <oid>, 0)`` names any database), and those about a database or
#: tablespace given as an argument (``pg_database_size``, ``pg_tablespace_location``,
#: ``has_database_privilege``, ``pg_stat_get_db_*`` ...; ``current_database()`` takes none).
#: Columns ``signature`` (``regprocedure`` text) and ``proname``.
CLUSTER_FUNCTIONS_SQL = r"""
SELECT p.oid::regprocedure::text AS signature, p.proname::text AS proname FROM pg_catalog.pg_proc p
WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.pronargs > 0
  AND (p.proargtypes[0:2]::oid[] = ARRAY['oid', 'oid', 'int4']::regtype[]::oid[]
       OR p.proname ~ '(database|tablespace)' OR p.proname ~ '^pg_stat_get_db_')
ORDER BY 1
"""


def cluster_objects(conn) -> tuple[list[str], list[tuple[str, str]]]:
    """``(relation names, [(function signature, function name)])`` of
    :data:`CLUSTER_RELATIONS_SQL` and :data:`CLUSTER_FUNCTIONS_SQL` on ``conn`` (any role).
    Raises psycopg errors."""
    rels = [r[0] for r in conn.execute(CLUSTER_RELATIONS_SQL).fetchall()]
    funcs = [(r[0], r[1]) for r in conn.execute(CLUSTER_FUNCTIONS_SQL).fetchall()]
    return rels, funcs


def exposed_objects(conn, role: str) -> list[str]:
    """The relations and functions of :func:`cluster_objects` that ``role`` can still read or
    call in the database of ``conn`` ([] once :func:`harden_database` ran there)."""
    rels, funcs = cluster_objects(conn)
    out = [r for r in rels if conn.execute("SELECT has_table_privilege(%s, %s, 'SELECT')",
                                           [role, f"pg_catalog.{r}"]).fetchone()[0]]
    out += [f for f, _ in funcs if conn.execute("SELECT has_function_privilege(%s, %s, 'EXECUTE')",
                                                [role, f]).fetchone()[0]]
    return out


#: Seconds the watchdog waits past ``limits.timeout_s`` before cancelling.
WATCHDOG_GRACE_S = 1.0

#: Rows per FETCH (each FETCH gets the time left of the whole-call deadline).
FETCH_ROWS = 10_000

#: Functions refused before execution even though privileges would also refuse them
#: (defence in depth; matched on sqlglot function names, lower case).
DENIED_FUNCTIONS: frozenset[str] = frozenset({
    "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "lo_import",
    "lo_export", "lo_get", "dblink", "dblink_exec", "pg_terminate_backend", "pg_cancel_backend",
    "set_config", "pg_reload_conf", "pg_logdir_ls", "pg_ls_waldir",
})


def _connect_kwargs(settings: ServerSettings, admin: bool = False,
                    dbname: str | None = None) -> dict[str, Any]:
    """psycopg connect kwargs for the reader (or admin) role; password resolved now."""
    kw: dict[str, Any] = dict(host=settings.host, port=settings.port,
                              user=settings.admin_user if admin else settings.user,
                              dbname=dbname or settings.database,
                              connect_timeout=max(1, int(settings.connect_timeout_s)),
                              application_name="polysql_ray")
    pw = settings.admin_password() if admin else settings.reader_password()
    if pw is not None:
        kw["password"] = pw
    return kw


def keep_special_values(conn) -> None:
    """Make ``conn`` hand over dates and timestamps Python cannot hold as their PostgreSQL text.

    psycopg raises ``DataError`` ("date too large (after year 10K)") while fetching
    ``'infinity'::date``, ``-infinity`` timestamps, year 10000+ and BC values (psycopg docs,
    "Dates and times adaptation"); such a value is an ordinary engine value, not a failed
    statement. The loaders registered here return the server's text for exactly those values
    (``infinity``, ``10000-01-01``, ``0044-03-15 BC``), which
    :func:`polysql_ray.engines.servers.rows_to_arrow` keeps as a string column and the comparison
    reads as ISO text (``comparison/normalize.py``, special values)."""
    from psycopg.types import datetime as pgdt

    for name, base in (("date", pgdt.DateLoader), ("timestamp", pgdt.TimestampLoader),
                       ("timestamptz", pgdt.TimestamptzLoader)):
        conn.adapters.register_loader(name, _text_on_overflow(base))


def _text_on_overflow(base):
    import psycopg

    class Loader(base):  # type: ignore[misc, valid-type]
        def load(self, data):
            try:
                return super().load(data)
            except psycopg.DataError:
                return bytes(data).decode("ascii", "replace")
    Loader.__name__ = f"Special{base.__name__}"
    return Loader


def split_location(location: str, default_database: str) -> tuple[str, str]:
    """``<database>/<schema>`` or ``<schema>`` (in ``default_database``) -> ``(database, schema)``."""
    db, sep, schema = location.partition("/")
    return (db, schema) if sep else (default_database, location)


def harden_database(conn) -> None:
    """Revoke :data:`REVOKED_FUNCTIONS` (every overload) and :data:`REVOKED_VIEWS` from
    ``PUBLIC`` in the database ``conn`` is connected to (a superuser connection; idempotent),
    and ``SELECT``/``EXECUTE`` on every relation and function of :func:`cluster_objects`, so a
    statement in this copy cannot list or name the server's other databases, roles or
    tablespaces. PostgreSQL checks EXECUTE on functions called through a view as the caller, so
    ``pg_stat_activity`` is closed twice over.

    Scope: privileges on a relation live in ``pg_class.relacl``, which every database holds for
    itself - shared catalogs included (``pg_database``'s PUBLIC grant revoked here stays granted
    in every other database of the server; checked on PostgreSQL 15) - so this changes nothing
    outside the project's own databases (replicas, installed dump sources, the configured
    ``database``); a user's shared server keeps its catalogs for everyone else."""
    from psycopg import sql

    rels, funcs = cluster_objects(conn)
    for rel in rels:
        conn.execute(sql.SQL("REVOKE SELECT ON pg_catalog.{} FROM PUBLIC").format(sql.Identifier(rel)))
    for signature, _ in funcs:
        conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(sql.SQL(signature)))

    for (proc,) in conn.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p "
            "WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname = ANY(%s)",
            [list(REVOKED_FUNCTIONS)]).fetchall():
        conn.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {} FROM PUBLIC").format(sql.SQL(proc)))
    for view in REVOKED_VIEWS:
        conn.execute(sql.SQL("REVOKE SELECT ON pg_catalog.{} FROM PUBLIC").format(sql.Identifier(view)))


def connect(settings: ServerSettings, admin: bool = False, dbname: str | None = None,
            autocommit: bool = True):
    """Open a psycopg connection (reader role unless ``admin``). Raises psycopg errors."""
    import psycopg

    return psycopg.connect(autocommit=autocommit, **_connect_kwargs(settings, admin, dbname))


#: Settings that change what a statement returns (PostgreSQL 15 docs 20.11 "Client Connection
#: Defaults" and 24.2 "Collation Support"), read by :meth:`PostgresEngine.identity`; they enter
#: every cell key scored on the server.
RESULT_SETTINGS: tuple[str, ...] = ("server_encoding", "TimeZone", "DateStyle", "IntervalStyle",
                                    "extra_float_digits", "standard_conforming_strings", "bytea_output")


class PostgresEngine(ServerEngine):
    """PostgreSQL engine (``dialect = "postgres"``) - see the module docstring.

    Args:
        settings: :class:`ServerSettings` or a config dict (``DEFAULTS`` fill the gaps).

    Attributes:
        pool: the bounded :class:`ConnectionPool` (its ``stats`` count connections opened).
        queries: number of ``execute`` calls that reached the server.
    """

    name = "postgres"
    dialect = "postgres"
    settings = {}
    # PostgreSQL 15 docs 4.1.1: unquoted names fold to lower case, quoted ones are exact
    identifiers = IdentifierRules(fold="lower", tables_ci=False, columns_ci=False,
                                  reserved=POSTGRES_RESERVED)
    semantics = Semantics(
        integer_division=True,   # "Mathematical Functions and Operators": integer division truncates
        nulls_asc="last", nulls_desc="first",  # "Sorting Rows (ORDER BY)": NULLs sort as larger than
                                               # any value: NULLS LAST for ASC, NULLS FIRST for DESC
        ci_equals=False,         # "Collation Support": deterministic collations compare bytes/locale,
                                 # case-sensitively
        ci_like=False,           # "Pattern Matching": LIKE is case-sensitive (ILIKE is not)
        empty_sum_null=True,     # "Aggregate Functions": sum of no rows returns null, not zero
        string_number="literal",  # "Type Conversion: Operators" 10.2: an unknown-type literal takes the
                                  # other operand's type; text = integer has no operator (error)
    )
    structural = StructuralFacts(
        identifiers=StructuralIdentifiers(True, False, False, "exact"),
        portable_nodes=PORTABLE_CORE | PORTABLE_GUARDED,
        ordered_classes=frozenset({"num"}),  # text orders by the locale's collation
        numeric_plus=True, keywords="postgres.txt",
        double_literals=frozenset())  # 4.1.2.6 "Numeric Constants": numeric unless it fits an integer
    type_map = {"INTEGER": "INTEGER", "SMALLINT": "SMALLINT", "BIGINT": "BIGINT",
                "DOUBLE": "DOUBLE PRECISION", "VARCHAR": "TEXT", "BLOB": "BYTEA", "DECIMAL": "NUMERIC",
                "BOOLEAN": "BOOLEAN", "DATE": "DATE", "TIMESTAMP": "TIMESTAMP"}
    varchar_with_length = "VARCHAR({n})"
    writer = "polysql_ray.replication.postgres:PostgresWriter"
    reader = "polysql_ray.replication.postgres_source:PostgresReader"
    sandbox = {"transaction": "READ ONLY", "statement_timeout": "limits.timeout_s", "role": "polysql_reader",
               "revoked_functions": REVOKED_FUNCTIONS, "revoked_views": REVOKED_VIEWS,
               "session_reset": "ROLLBACK; DISCARD ALL"}
    error_table = {**SQLSTATE_STATUS, **SQLSTATE_CLASS_STATUS}
    denied_functions = DENIED_FUNCTIONS
    connection = ConnectionBehaviour("pool", lost_connection_retries=1, fresh_session=True)
    prompt_rules = "postgres.yaml"
    source_dump_suffix = ".sql"  # a plain-SQL pg_dump (replication/postgres_source.py)
    server_start = "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **DEFAULTS)
        self.settings = settings
        self.pool: ConnectionPool = ConnectionPool(self._open, lambda c: c.close(), settings.pool_size)
        self.queries = 0
        self._known_locations: set[str] = set()
        self._cluster: tuple[frozenset[str], frozenset[str]] | None = None

    def identity(self) -> dict:
        """``server_version``, :data:`RESULT_SETTINGS` and the collation a new replica database
        gets (``template1``'s ``datcollate``/``datctype``: text order and ``ILIKE``), read as
        the admin role from the ``postgres`` database. Raises psycopg errors."""
        with connect(self.settings, admin=True, dbname="postgres") as c:
            version = c.execute("SHOW server_version").fetchone()[0]
            values = {n: c.execute("SELECT current_setting(%s)", [n]).fetchone()[0] for n in RESULT_SETTINGS}
            collate, ctype = c.execute("SELECT datcollate, datctype FROM pg_database "
                                       "WHERE datname = 'template1'").fetchone()
        return {"product": "PostgreSQL", "version": str(version), "standin": "",
                "settings": {**values, "datcollate": str(collate), "datctype": str(ctype)},
                "endpoint": f"{self.settings.host}:{self.settings.port}"}

    def _open(self, dbname: str | None = None):
        conn = connect(self.settings, dbname=dbname)
        conn.prepare_threshold = None  # no server-side prepared statements: DISCARD ALL drops them
        keep_special_values(conn)
        return conn

    def __repr__(self) -> str:
        s = self.settings
        return f"PostgresEngine({s.user}@{s.host}:{s.port}/{s.database}, pool={s.pool_size})"

    # ------------------------------------------------------------------ execution hooks
    def driver_errors(self) -> tuple[tuple, tuple]:
        """psycopg errors: any on a statement, OperationalError when connecting."""
        import psycopg

        return (psycopg.Error,), (psycopg.OperationalError,)

    def acquire(self, limits: Limits, location: str = ""):
        """A pooled connection to the replica's database (``<database>/<schema>`` locations)."""
        return self.pool.acquire(split_location(location, self.settings.database)[0])

    def lost(self, exc: BaseException, lease) -> bool:
        """The connection broke (backend terminated, server restart)."""
        return bool(lease.conn.broken or lease.conn.closed)

    def run(self, lease, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Read-only transaction, statement timeout, server-side cursor (module docstring)."""
        import threading
        import time

        from psycopg import sql as psql

        conn = lease.conn
        schema = split_location(location, self.settings.database)[1]
        if location not in self._known_locations:
            row = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema]).fetchone()
            if row is None:
                return ExecutionResult.failure(
                    S.UNAVAILABLE, f"replica schema {location!r} does not exist")
            self._known_locations.add(location)
        deadline = time.monotonic() + limits.timeout_s
        ms = max(1, int(limits.timeout_s * 1000))
        # trusted, composed with quoting, sent in one round trip (simple protocol)
        conn.execute(psql.SQL("BEGIN TRANSACTION READ ONLY; SET LOCAL statement_timeout = {}; "
                              "SET LOCAL search_path = {}").format(
            psql.Literal(ms), psql.Identifier(schema)))
        timer = threading.Timer(limits.timeout_s + WATCHDOG_GRACE_S, conn.cancel)
        timer.daemon = True
        timer.start()
        cur = conn.cursor(name="polysql_q")  # server-side: DECLARE + FETCH
        try:
            cur.execute(sql)
            rows: list = []
            while True:
                want = min(FETCH_ROWS, limits.row_cap + 1 - len(rows))
                chunk = cur.fetchmany(want)
                rows.extend(chunk)
                if len(chunk) < want or len(rows) > limits.row_cap:
                    break
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0:
                    return ExecutionResult.failure(
                        S.TIMEOUT, f"fetch ran past the {limits.timeout_s}s limit (whole call)")
                conn.execute(psql.SQL("SET LOCAL statement_timeout = {}").format(psql.Literal(left_ms)))
            desc = cur.description or []
            if len(rows) > limits.row_cap:
                return ExecutionResult.failure(
                    S.TOO_LARGE, f"more than {limits.row_cap} rows (row cap)")
            names = [d.name for d in desc]
            types = [OID_ARROW.get(d.type_code, pa.null()) for d in desc]
            return ExecutionResult(S.OK, rows_to_arrow(names, rows, types))
        finally:
            timer.cancel()
            try:
                cur.close()
            except Exception:  # noqa: BLE001 - aborted transaction: after() rolls back
                pass

    def after(self, lease) -> None:
        """A fresh session for the next statement: ``ROLLBACK``, ``DISCARD ALL``; the
        connection is dropped when that fails or it is still not idle (aborted transaction)."""
        import psycopg

        conn = lease.conn
        if lease.broken or conn.closed or conn.broken:
            lease.discard()
            return
        try:
            conn.execute("ROLLBACK")
            conn.execute("DISCARD ALL")
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                lease.discard()
        except Exception:  # noqa: BLE001 - any trouble: never reuse this session
            lease.discard()

    def failure(self, e: BaseException, lease, limits: Limits, elapsed_s: float) -> ExecutionResult:
        """Status by SQLSTATE (:data:`SQLSTATE_STATUS`, then :data:`SQLSTATE_CLASS_STATUS`)."""
        code = getattr(e, "sqlstate", None)
        status = classify(code, SQLSTATE_STATUS, SQLSTATE_CLASS_STATUS, S.RUNTIME)
        msg = f"[{code}] {e}" if code else str(e)
        return ExecutionResult.failure(status, msg, elapsed_s)

    def ping(self) -> None:
        """``SELECT 1`` on a fresh connection to the default database, closed after."""
        conn = connect(self.settings)
        try:
            conn.execute("SELECT 1").fetchone()
        finally:
            conn.close()

    def scope_refusal(self, sql: str, location: str):
        """REJECTED for a statement naming a relation or calling a function that shows the
        server's other databases, roles or tablespaces (:func:`cluster_objects`, derived once
        per engine from the server as the reader): defence in depth, the copy's database has
        them revoked (:func:`harden_database`). None when the server cannot be asked (it
        refuses them itself)."""
        from polysql_ray.engines.guard import called_function, named

        objects = self._cluster_names(location)
        if objects is None:
            return None
        rels, funcs = objects
        name = named(sql, self.dialect, rels)
        if name is not None:
            return (S.REJECTED, f"{name} lists every database of the server (other copies, other "
                                f"runs' replicas); only this copy is visible")
        name = called_function(sql, self.dialect, funcs)
        if name is not None:
            return (S.REJECTED, f"function {name}() names or probes other databases of the server; "
                                f"only this copy is visible")
        return None

    def _cluster_names(self, location: str) -> tuple[frozenset[str], frozenset[str]] | None:
        """``(relation names, function names)`` of :func:`cluster_objects`, lower case, read
        once through a pooled reader connection of ``location``'s database; None while the
        server cannot be asked."""
        if self._cluster is None:
            try:
                with self.pool.acquire(split_location(location, self.settings.database)[0]) as lease:
                    rels, funcs = cluster_objects(lease.conn)
            except Exception:  # noqa: BLE001 - server down or database missing: the run decides
                return None
            self._cluster = (frozenset(r.lower() for r in rels), frozenset(f.lower() for _, f in funcs))
        return self._cluster

    def close(self) -> None:
        """Close pooled connections."""
        self.pool.close()
