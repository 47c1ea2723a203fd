"""Snowflake engine through snowflake-connector-python: one schema per (dataset, db_id).

Behaviour as data: :data:`DEFAULTS` (account, warehouse, role, database; secrets only as
``*_env``/``*_file``), :data:`ERRNO_STATUS` / :data:`SQLSTATE_STATUS` (Snowflake error number
and SQLSTATE class -> status), :data:`DENIED_FUNCTIONS`, :data:`SESSION_PARAMETERS`.

Sandbox (Snowflake docs "Parameters", "Access control"):

* the reader role (``role``) is least-privilege: USAGE on the database, warehouse and the
  replica schemas, SELECT on their tables, nothing else (granted by the replication writer
  when ``role`` is set; creating the role is an administrator's job, see README);
* ``STATEMENT_TIMEOUT_IN_SECONDS`` = ``Limits.timeout_s`` as a session parameter set at
  connect time (the server cancels, error 630 -> TIMEOUT); the model cannot change it (one
  SELECT/WITH statement only, :mod:`~polysql_ray.engines.guard`); the connector's own
  ``execute(timeout=timeout_s)`` sends an abort request, and a client-side watchdog
  (:mod:`~polysql_ray.engines.watchdog`) gives up at ``timeout_s + client_grace_s`` (extra
  setting, default :data:`CLIENT_GRACE_S`) with TIMEOUT and discards the connection, for a
  server that enforces neither (fakesnow: the statement then runs on there until it ends);
* row cap: ``fetchmany(row_cap + 1)``.

Names: unquoted identifiers resolve upper case. The replica stores folded names where the
source resolves names case-insensitively (``engines.identifiers.replica_name_for``), so
``select name from singer`` resolves like on SQLite; the schema itself is ``PQ_<DATASET>_<DB_ID>``
upper case.

One copy per statement: the reader role sees the replica schemas it was granted; beyond that,
and because the stand-in has no roles at all, the engine refuses client-side
(:meth:`SnowflakeEngine.scope_refusal`, ``guard.standin_refusal``) any name of another copy's
schema (``PQ_*``), of another database, of ``INFORMATION_SCHEMA``/``SNOWFLAKE.ACCOUNT_USAGE``,
a file where a table goes and every DuckDB file reader the installed DuckDB offers.

Stand-in: tests run against fakesnow in server mode (DuckDB underneath). It cannot show
identifier case, NUMBER scales, timeouts, roles or read-only, and it reads local files (the
client-side refusals above keep predictions from them).
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import ConnectionBehaviour, Semantics, StructuralFacts
from polysql_ray.engines.identifiers import IdentifierRules
from polysql_ray.engines.servers import ConnectionPool, ServerEngine, ServerSettings, classify, rows_to_arrow
from polysql_ray.extras import require

S = ExecStatus

#: Default settings (conf/engine/snowflake.yaml mirrors them). ``extra`` keys: account,
#: warehouse, role, admin_role, protocol.
DEFAULTS: dict[str, Any] = dict(host=None, port=443, user="POLYSQL_READER", admin_user="POLYSQL_ADMIN",
                                database="POLYSQL", pool_size=2, connect_timeout_s=30,
                                password_env="POLYSQL_SF_READER_PASSWORD",
                                admin_password_env="POLYSQL_SF_ADMIN_PASSWORD")

#: Session parameters set at connect (beyond the statement timeout).
SESSION_PARAMETERS: dict[str, Any] = {"QUERY_TAG": "polysql_ray", "TIMEZONE": "UTC",
                                      "ABORT_DETACHED_QUERY": True}

#: Seconds the client waits beyond the statement timeout before it gives up itself.
CLIENT_GRACE_S = 10.0

#: Snowflake error number (``errno``) -> status.
ERRNO_STATUS: dict[int, ExecStatus] = {
    1003: S.SYNTAX,      # SQL compilation error: syntax error / unexpected token
    2140: S.SYNTAX,      # unknown function
    2141: S.SYNTAX,      # unknown user-defined function
    979: S.SYNTAX,       # not a valid group by expression
    904: S.SCHEMA,       # invalid identifier (column)
    2003: S.SCHEMA,      # object does not exist or not authorized
    2043: S.SCHEMA,      # object does not exist / operation cannot be performed
    630: S.TIMEOUT,      # statement reached its statement or warehouse timeout
    604: S.TIMEOUT,      # statement canceled
    3001: S.REJECTED,    # insufficient privileges
    3540: S.REJECTED,    # operation not allowed in read-only
    100038: S.RUNTIME,   # numeric value is not recognized
    100051: S.RUNTIME,   # division by zero
    250001: S.UNAVAILABLE,  # could not connect
    250003: S.UNAVAILABLE,  # failed to execute request (network)
    390100: S.UNAVAILABLE,  # incorrect username or password
    390144: S.UNAVAILABLE,  # JWT token invalid
}

#: SQLSTATE prefix -> status, when the error number is not in :data:`ERRNO_STATUS`.
SQLSTATE_STATUS: dict[str, ExecStatus] = {
    "42601": S.SYNTAX, "42000": S.SYNTAX, "42S02": S.SCHEMA, "42S22": S.SCHEMA, "02000": S.SCHEMA,
    "42501": S.REJECTED, "57014": S.TIMEOUT, "22": S.RUNTIME, "08": S.UNAVAILABLE, "28": S.UNAVAILABLE,
}

#: Snowflake type code (cursor description) -> Arrow type for columns without a value.
TYPE_CODE_ARROW: dict[int, pa.DataType] = {
    0: pa.decimal128(38, 0), 1: pa.float64(), 2: pa.string(), 3: pa.date32(),
    4: pa.timestamp("us"), 8: pa.timestamp("us"), 6: pa.timestamp("us", tz="UTC"),
    7: pa.timestamp("us", tz="UTC"), 11: pa.binary(), 13: pa.bool_(),
}

#: Functions refused before execution: stage/file access and, for DuckDB-backed stand-ins,
#: DuckDB's file readers (not Snowflake functions; a real Snowflake says "unknown function").
DENIED_FUNCTIONS: frozenset[str] = frozenset({
    "read_csv", "read_csv_auto", "read_text", "read_blob", "read_parquet", "read_json",
    "read_json_auto", "read_ndjson", "parquet_scan", "glob", "get_presigned_url",
    "build_scoped_file_url", "build_stage_file_url", "system$get_privatelink_config",
})


#: Schemas/databases that list every copy (refused as qualifiers, see ``guard.standin_refusal``).
CATALOGS: frozenset[str] = frozenset({"information_schema", "account_usage", "snowflake",
                                      "organization_usage", "reader_account_usage", "data_sharing_usage"})


#: (message regex, status) checked first: causes one error number covers. Snowflake reports
#: GROUP BY strictness as 979, fakesnow (DuckDB binder) as 2043 with this message.
MESSAGE_STATUS: tuple[tuple[str, ExecStatus], ...] = (
    (r"must appear in the GROUP BY|not a valid group by expression", S.SYNTAX),
)


def classify_error(errno: int | None, sqlstate: str | None, message: str = "") -> ExecStatus:
    """Status of a Snowflake error: :data:`MESSAGE_STATUS`, then the error number, then the
    SQLSTATE prefix, else RUNTIME."""
    import re

    for pattern, status in MESSAGE_STATUS:
        if re.search(pattern, message or "", flags=re.IGNORECASE):
            return status
    if errno in ERRNO_STATUS:
        return ERRNO_STATUS[errno]
    return classify(sqlstate, {}, SQLSTATE_STATUS, S.RUNTIME)


def schema_name(dataset: str, db_id: str, tag: str = "") -> str:
    """Replica schema ``PQ_<DATASET>_<DB_ID>[_<TAG>]`` (upper case: resolves unquoted)."""
    from polysql_ray.engines.servers import replica_name

    return replica_name(dataset, db_id, tag=tag).upper()


def connect(settings: ServerSettings, admin: bool = False, timeout_s: float | None = None):
    """Open a connector connection (reader role unless ``admin``). Raises connector errors."""
    sc = require("snowflake.connector", "the snowflake engine")

    x = settings.extra
    kw: dict[str, Any] = dict(
        user=settings.admin_user if admin else settings.user,
        account=x.get("account", "polysql"), database=settings.database,
        login_timeout=settings.connect_timeout_s, application="polysql_ray",
        session_parameters={**SESSION_PARAMETERS,
                            **({"STATEMENT_TIMEOUT_IN_SECONDS": max(1, int(round(timeout_s)))}
                               if timeout_s else {})})
    if timeout_s:
        kw["network_timeout"] = timeout_s + CLIENT_GRACE_S
    if settings.host:
        kw.update(host=settings.host, port=settings.port, protocol=x.get("protocol", "https"))
    role = x.get("admin_role") if admin else x.get("role")
    for k, v in (("role", role), ("warehouse", x.get("warehouse"))):
        if v:
            kw[k] = v
    pw = settings.admin_password() if admin else settings.reader_password()
    if pw is not None:
        kw["password"] = pw
    if x.get("authenticator"):
        kw["authenticator"] = x["authenticator"]
    return sc.connect(**kw)


class SnowflakeEngine(ServerEngine):
    """Snowflake engine (``dialect = "snowflake"``); ``location`` is the replica schema name.

    Args:
        settings: :class:`ServerSettings` or a config dict (``DEFAULTS`` fill the gaps).
    """

    tokenizer_guard = True  # servers.warehouse_refusal before sending
    name = "snowflake"
    dialect = "snowflake"
    settings = {}
    # Snowflake "Identifier requirements": unquoted names resolve upper case
    identifiers = IdentifierRules(fold="upper", tables_ci=False, columns_ci=False)
    semantics = Semantics(
        integer_division=False,  # "Arithmetic Operators": integer / integer is an exact NUMBER with
                                 # scale >= 6 (7 / 2 = 3.500000)
        nulls_asc="last", nulls_desc="first",  # "ORDER BY": NULLs are higher than any value by default
                                               # (DEFAULT_NULL_ORDERING = LAST): last ASC, first DESC
        ci_equals=False,         # "Collation Support": with no collation strings compare case-sensitively
        ci_like=False,           # "LIKE": case-sensitive (ILIKE is not)
        empty_sum_null=True,     # "SUM": NULL when there are no input rows
        string_number="cast",    # "Data Type Conversion": a VARCHAR compared with a NUMBER is cast to
                                 # NUMBER (error when it is not numeric)
    )
    structural = StructuralFacts()  # nothing proven across it yet
    # Snowflake DOUBLE (= FLOAT) is an 8-byte double; NUMBER(38,0) is Snowflake's integer.
    type_map = {"SMALLINT": "SMALLINT", "INTEGER": "INTEGER", "BIGINT": "NUMBER(38,0)", "DOUBLE": "DOUBLE",
                "VARCHAR": "VARCHAR", "BLOB": "BINARY", "DECIMAL": "NUMBER", "BOOLEAN": "BOOLEAN",
                "DATE": "DATE", "TIMESTAMP": "TIMESTAMP_NTZ"}
    varchar_with_length = "VARCHAR({n})"
    writer = "polysql_ray.replication.snowflake_writer:SnowflakeWriter"
    reader = None
    sandbox = {**SESSION_PARAMETERS, "STATEMENT_TIMEOUT_IN_SECONDS": "limits.timeout_s",
               "role": "least-privilege reader (settings.role)"}
    error_table = {**ERRNO_STATUS, **SQLSTATE_STATUS}
    denied_functions = DENIED_FUNCTIONS
    transient_unavailable = False
    connection = ConnectionBehaviour("pool")  # one pool per statement timeout (a session parameter)
    prompt_rules = "snowflake.yaml"
    unreachable = "snowflake unreachable"

    def __init__(self, settings: ServerSettings | dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **DEFAULTS)
        self.settings = settings
        self.queries = 0
        self.grace_s = float(settings.extra.get("client_grace_s", CLIENT_GRACE_S))
        self._pools: dict[float, ConnectionPool] = {}

    def identity(self) -> dict:
        """``CURRENT_VERSION()`` on an admin session; a stand-in unless ``host`` is unset or a
        ``*.snowflakecomputing.com`` name (``standin`` setting: its name, else the endpoint).
        Connector errors propagate."""
        host = self.settings.host
        real = not host or str(host).lower().endswith(".snowflakecomputing.com")
        standin = "" if real else str(self.settings.extra.get("standin") or f"stand-in at {host}:{self.settings.port}")
        conn = connect(self.settings, admin=True)
        try:
            cur = conn.cursor()
            version = str(cur.execute("SELECT CURRENT_VERSION()").fetchone()[0])
        finally:
            conn.close()
        return {"product": "Snowflake", "version": version, "standin": standin,
                "settings": {k: str(v) for k, v in SESSION_PARAMETERS.items()},
                "endpoint": f"{host}:{self.settings.port}" if host else
                f"{self.settings.extra.get('account', 'polysql')}.snowflakecomputing.com"}

    def _pool(self, timeout_s: float) -> ConnectionPool:
        pool = self._pools.get(timeout_s)
        if pool is None:
            pool = ConnectionPool(lambda: connect(self.settings, timeout_s=timeout_s),
                                  lambda c: c.close(), self.settings.pool_size)
            self._pools[timeout_s] = pool
        return pool

    # ------------------------------------------------------------------ execution hooks
    def driver_errors(self) -> tuple[tuple, tuple]:
        """Connector errors on a statement; connector and socket errors when connecting."""
        import snowflake.connector.errors as sfe

        return (sfe.Error,), (sfe.Error, OSError)

    def acquire(self, limits: Limits, location: str = ""):
        """A connection of the pool whose sessions carry ``STATEMENT_TIMEOUT_IN_SECONDS``."""
        return self._pool(limits.timeout_s).acquire()

    def run(self, lease, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """``USE SCHEMA`` the replica (UNAVAILABLE when missing), run, fetch ``row_cap + 1``;
        TIMEOUT when no answer comes within ``timeout_s + client_grace_s`` (:mod:`.watchdog`)."""
        import math

        import snowflake.connector.errors as sfe

        from polysql_ray.engines.watchdog import DeadlineExceeded, call_with_deadline

        cur = lease.conn.cursor()

        def use_then_run():
            try:
                cur.execute(f'USE SCHEMA "{self.settings.database}"."{location}"')
            except sfe.Error as e:
                return ExecutionResult.failure(S.UNAVAILABLE, f"replica schema {location!r}: {e}")
            return cur.execute(sql, timeout=max(1, math.ceil(limits.timeout_s))).fetchmany(limits.row_cap + 1)

        try:  # the connector's own timeout, and a client watchdog (over USE SCHEMA too: a hung
            # server stalls there first) for a server that ignores both
            rows = call_with_deadline(use_then_run, limits.timeout_s + self.grace_s)
            if isinstance(rows, ExecutionResult):
                return rows
        except DeadlineExceeded as e:
            lease.discard()
            return ExecutionResult.failure(
                S.TIMEOUT, f"client watchdog gave up ({e}; STATEMENT_TIMEOUT_IN_SECONDS="
                f"{limits.timeout_s:g} not enforced by the server)")
        if len(rows) > limits.row_cap:
            return ExecutionResult.failure(S.TOO_LARGE, f"more than {limits.row_cap} rows")
        desc = cur.description or []
        table = rows_to_arrow([d.name for d in desc], [tuple(r) for r in rows],
                              [TYPE_CODE_ARROW.get(d.type_code, pa.null()) for d in desc])
        return ExecutionResult(S.OK, table, None)

    def scope_refusal(self, sql: str, location: str):
        """``guard.standin_refusal``: DuckDB file readers (derived), replacement scans, another
        copy's schema, another database, ``INFORMATION_SCHEMA`` / ``SNOWFLAKE.ACCOUNT_USAGE``."""
        from polysql_ray.engines.guard import standin_refusal
        from polysql_ray.engines.servers import REPLICA_PREFIX

        return standin_refusal(sql, self.dialect, location, REPLICA_PREFIX + ".*", CATALOGS,
                               self.settings.database, DENIED_FUNCTIONS)

    def failure(self, e: BaseException, lease, limits: Limits, elapsed_s: float) -> ExecutionResult:
        """:func:`classify_error`; a network error past the timeout is the client giving up."""
        import snowflake.connector.errors as sfe

        if isinstance(e, sfe.OperationalError):
            lease.discard()
            if elapsed_s >= limits.timeout_s and e.errno == 250003:
                return ExecutionResult.failure(
                    S.TIMEOUT, f"client gave up after {elapsed_s:.1f}s (the server did not "
                    f"enforce STATEMENT_TIMEOUT_IN_SECONDS={limits.timeout_s:g}): {e}", elapsed_s)
            return ExecutionResult.failure(classify_error(e.errno, e.sqlstate, str(e)), str(e), elapsed_s)
        return ExecutionResult.failure(classify_error(e.errno, e.sqlstate, str(e)), f"[{e.errno}] {e}", elapsed_s)

    def ping(self) -> None:
        """``SELECT 1`` on a fresh session (never pooled), closed after (health probe)."""
        conn = connect(self.settings, timeout_s=self._setting("health_probe_s", 10.0))
        try:
            conn.cursor().execute("SELECT 1").fetchone()
        finally:
            conn.close()

    def close(self) -> None:
        """Close pooled connections."""
        for pool in self._pools.values():
            pool.close()
