"""ClickHouse *server* path through clickhouse-connect (HTTP), for users who run a server.

Selected by ``engines.clickhouse.host=<host>`` (see :class:`~polysql_ray.engines.clickhouse.
ClickHouseEngine`); without ``host`` the dialect runs in chdb, in-process. Settings
(:data:`DEFAULTS`, ``conf/engine/clickhouse.yaml``): ``host``, ``port`` (8123; 8443 with
``secure: true``), ``user`` (the reader), ``password_env``/``password_file``, ``admin_user`` and
``admin_password_env``/``admin_password_file`` (replica loading only), ``database`` (prefix of
the replica databases), ``connect_timeout_s``, ``client_grace_s``. Passwords never appear in
config (:class:`~polysql_ray.engines.servers.ServerSettings` refuses a literal ``password``).

Sandbox: the same settings as the chdb path (:data:`clickhouse.SANDBOX_SETTINGS` ``readonly=1``,
``result_overflow_mode=throw`` ..., the semantic ``join_use_nulls`` (a stock server's 0 by
default), the statement's own ``clickhouse.RESULT_SETTINGS`` from its top-level ``SETTINGS``
clause (so that clause changes nothing and ``readonly=1`` lets it run), ``max_memory_usage``,
``max_threads``, and per query ``max_execution_time`` = ``Limits.timeout_s``,
``max_result_rows`` = ``Limits.row_cap``, ``max_result_bytes`` = ``Limits.max_bytes``) are sent
as **server-side settings with every request** (HTTP parameters), never in query text; requests
are stateless (no HTTP session), so nothing a statement does outlives it. The reader account
must be allowed to *take* these settings, so its profile cannot itself be ``readonly`` (ClickHouse
refuses any change of ``readonly`` under ``readonly=1`` or ``2``); give it least privilege by
grants instead: ``GRANT SELECT ON <database>_*.* TO <user>`` and nothing else. The client-side
refusals of the chdb path apply too (one SELECT/WITH statement, the scalar ``file()`` and host
functions, ``INTO OUTFILE``), plus a ``FORMAT`` clause (results travel as Arrow only).

Errors are typed from the ClickHouse error code the server sends (``X-ClickHouse-Exception-Code``,
:data:`clickhouse.ERROR_CODES`, plus :data:`SERVER_CODES`); a refused login, a refused
connection or a lost one is ``unavailable`` (not the SQL's fault); a read that outlives
``timeout_s + client_grace_s`` is ``timeout`` (the server cancels a read-only query when its
client disconnects: ``cancel_http_readonly_queries_on_client_close``).

Replicas: the replica folder built by :mod:`polysql_ray.replication.clickhouse_writer` (the
same certified ``replica.json`` + Arrow files as for chdb) is loaded once per content onto the
server by the admin account, into ``<database>_<content id>``: built under a temporary name,
row counts checked, then renamed into place, so a concurrent loader never sees half a replica.

Tested only at the protocol layer: against ``tests/clickhouse_http_standin.py`` (ClickHouse's
HTTP interface in front of chdb), not against a ClickHouse server (none installs here).
"""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.servers import ServerSettings

S = ExecStatus

#: Default settings of the server path.
DEFAULTS: dict[str, Any] = dict(port=8123, user="polysql_reader", admin_user="polysql_admin",
                                password_env="POLYSQL_CH_READER_PASSWORD",
                                admin_password_env="POLYSQL_CH_ADMIN_PASSWORD",
                                database="polysql", connect_timeout_s=10.0)

#: Seconds the client waits beyond ``max_execution_time`` before it gives up itself.
CLIENT_GRACE_S = 5.0

#: Server-only error codes (the rest: :data:`clickhouse.ERROR_CODES`).
SERVER_CODES: dict[int, ExecStatus] = {
    516: S.UNAVAILABLE,  # AUTHENTICATION_FAILED: configuration, not the statement
    192: S.UNAVAILABLE,  # UNKNOWN_USER
    202: S.UNAVAILABLE,  # TOO_MANY_SIMULTANEOUS_QUERIES
    209: S.UNAVAILABLE,  # SOCKET_TIMEOUT
    210: S.UNAVAILABLE,  # NETWORK_ERROR
    242: S.UNAVAILABLE,  # TABLE_IS_READ_ONLY (replica in trouble)
    115: S.REJECTED,     # UNKNOWN_SETTING (a SETTINGS clause naming no setting)
}

#: Settings added to every request of the server path beyond the chdb ones: Arrow strings as
#: ``string`` (as chdb returns them; non-UTF-8 bytes still become binary, ``arrow_result``).
ARROW_SETTINGS: dict[str, object] = {"output_format_arrow_string_as_string": 1}


def classify_server_error(exc: BaseException) -> ExecStatus:
    """Status of a clickhouse-connect exception: its ClickHouse ``code`` (header or ``Code: N``
    in the text) via :data:`SERVER_CODES` then ``clickhouse.ERROR_CODES``; an exception without
    a code (connection refused/reset, no response) is UNAVAILABLE."""
    from polysql_ray.engines.clickhouse import DEFAULT_STATUS, ERROR_CODES, _CODE

    code = getattr(exc, "code", None)
    if code is None:
        m = _CODE.search(str(exc))
        code = int(m.group(1)) if m else None
    if code is None:
        return S.UNAVAILABLE
    return SERVER_CODES.get(code) or ERROR_CODES.get(code, DEFAULT_STATUS)


def format_clause(sql: str) -> str | None:
    """Why ``sql`` carries its own output ``FORMAT`` clause (results are Arrow only), else None."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    try:
        toks = Dialect.get_or_raise("clickhouse").tokenize(sql)
    except Exception:
        return None  # the server reports the syntax error
    for i, tok in enumerate(toks[:-1]):
        nxt, after = toks[i + 1], (toks[i + 2] if i + 2 < len(toks) else None)
        if (tok.token_type != TokenType.STRING and tok.text.upper() == "FORMAT" and nxt.text.isidentifier()
                and (after is None or after.token_type == TokenType.SEMICOLON
                     or after.text.upper() == "SETTINGS")):
            return f"FORMAT {nxt.text} is not allowed: the sandbox returns results as Arrow only"
    return None


class ClickHouseServerEngine:
    """The clickhouse dialect on a ClickHouse server; ``location`` is a replica folder.

    Args:
        settings: config mapping (:data:`DEFAULTS` fill gaps; ``host`` required; ``secure``,
            ``client_grace_s`` optional).
        session: settings sent with every statement beyond the sandbox and limits
            (the engine's semantic and resource settings, e.g. ``join_use_nulls``).
    """

    name = "clickhouse"
    dialect = "clickhouse"

    def __init__(self, settings: dict | ServerSettings, session: dict | None = None) -> None:
        if not isinstance(settings, ServerSettings):
            settings = ServerSettings.from_dict(settings, **DEFAULTS)
        if not settings.host:
            raise ValueError("engines.clickhouse.host is required for the server path")
        self.settings = settings
        self.session = dict(session or {})
        self.grace_s = float(settings.extra.get("client_grace_s", CLIENT_GRACE_S))
        self._clients: dict[tuple, object] = {}
        self._loaded: dict[str, str] = {}
        self._denied: frozenset[str] | None = None
        self._result_settings: frozenset[str] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ connections
    def _client(self, admin: bool, read_timeout_s: float):
        from polysql_ray.extras import require

        clickhouse_connect = require("clickhouse_connect", "the clickhouse engine (engines.clickhouse.host)")

        key = (admin, read_timeout_s)
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                s = self.settings
                secure = bool(s.extra.get("secure", False))
                client = clickhouse_connect.get_client(
                    host=s.host, port=int(s.port), secure=secure,
                    username=s.admin_user if admin else s.user,
                    password=(s.admin_password() if admin else s.reader_password()) or "",
                    connect_timeout=int(max(1, s.connect_timeout_s)),
                    send_receive_timeout=int(max(1, round(read_timeout_s))),
                    autogenerate_session_id=False, compress=False, query_retries=0,
                    client_name="polysql_ray")
                self._clients[key] = client
            return client

    def identity(self) -> dict:
        """``SELECT version()`` on the server (admin account), ``host:port`` as the endpoint."""
        version = self._client(True, 30.0).command("SELECT version()")
        return {"product": "ClickHouse server", "version": str(version), "standin": "", "settings": {},
                "endpoint": f"{self.settings.host}:{self.settings.port}"}

    def request_settings(self, limits: Limits, requested: dict[str, str] | None = None) -> dict[str, object]:
        """Settings sent with every statement: sandbox, semantic/resource settings, the
        statement's own result settings (``clickhouse.query_settings``: applied to the request
        so its ``SETTINGS`` clause changes nothing under ``readonly=1``), limits."""
        from polysql_ray.engines.clickhouse import SANDBOX_SETTINGS

        return {**SANDBOX_SETTINGS, **self.session, **(requested or {}), **ARROW_SETTINGS,
                "max_execution_time": f"{limits.timeout_s:g}", "max_result_rows": limits.row_cap,
                "max_result_bytes": limits.max_bytes}

    # ------------------------------------------------------------------ replicas
    def database_for(self, spec: dict) -> str:
        """Server database holding the replica with this ``replica.json``."""
        return f"{self.settings.database}_{spec['content_id'][:24]}"

    def load(self, location: str) -> str:
        """Load the replica folder onto the server once (admin account); returns its database.

        Raises RuntimeError when the loaded row counts differ from ``replica.json``; connector
        errors propagate."""
        from polysql_ray.engines.clickhouse import quote, read_replica_spec

        spec = read_replica_spec(location)
        db = self.database_for(spec)
        if db in self._loaded:
            return db
        admin = self._client(True, 300.0)
        if self._counts(admin, db) == {t["name"]: t["rows"] for t in spec["tables"]}:
            self._loaded[db] = location
            return db
        tmp = f"{db}_load_{uuid.uuid4().hex[:8]}"
        admin.command(f"CREATE DATABASE {quote(tmp)}")
        try:
            for t in spec["tables"]:
                cols = ", ".join(f"{quote(c)} {ty}" for c, ty in t["columns"])
                admin.command(f"CREATE TABLE {quote(tmp)}.{quote(t['name'])} ({cols}) "
                              f"ENGINE = {spec['table_engine']}")
                with pa.memory_map(str(Path(location) / t["file"])) as src:
                    data = pa.ipc.open_file(src).read_all()
                if data.num_rows:
                    admin.insert_arrow(t["name"], data, database=tmp)
            want = {t["name"]: t["rows"] for t in spec["tables"]}
            got = self._counts(admin, tmp)
            if got != want:
                raise RuntimeError(f"replica {location}: loaded row counts {got} != replica.json {want}")
            admin.command(f"DROP DATABASE IF EXISTS {quote(db)}")
            admin.command(f"RENAME DATABASE {quote(tmp)} TO {quote(db)}")
        finally:
            admin.command(f"DROP DATABASE IF EXISTS {quote(tmp)}")
        self._loaded[db] = location
        return db

    @staticmethod
    def _counts(client, db: str) -> dict[str, int]:
        from polysql_ray.engines.clickhouse import quote

        names = [r[0] for r in client.query("SELECT name FROM system.tables WHERE database = {db:String}",
                                            parameters={"db": db}).result_rows]
        return {n: int(client.command(f"SELECT count() FROM {quote(db)}.{quote(n)}")) for n in names}

    def denied(self) -> frozenset[str]:
        """Refused call names derived from the server's own ``system.functions`` and
        ``system.table_functions`` (``clickhouse.catalog_denied``: every alias of a host-name
        or file function, every table function that reads elsewhere), read once as the reader."""
        if self._denied is None:
            from polysql_ray.engines.clickhouse import catalog_denied

            from polysql_ray.engines.clickhouse import DENIED_FUNCTIONS

            found = catalog_denied(lambda q: self._client(False, 30.0).query(q).result_rows)
            if found is DENIED_FUNCTIONS:  # catalog unreadable now: the seeds, derive next time
                return found
            self._denied = found
        return self._denied

    def result_settings(self) -> frozenset[str]:
        """``clickhouse.RESULT_SETTINGS`` names the server lists in ``system.settings`` (read once
        as the reader; empty, and read again next time, when unreadable)."""
        if self._result_settings is None:
            from polysql_ray.engines.clickhouse import known_result_settings

            found = known_result_settings(lambda q: self._client(False, 30.0).query(q).result_rows)
            if not found:
                return found
            self._result_settings = found
        return self._result_settings

    def scope(self, sql: str, location: str) -> str | None:
        """Why ``sql`` names a database other than the copy's own (``clickhouse.scope_refusal``:
        another copy ``<database>_<content id>``, ``system``, ``INFORMATION_SCHEMA``), else None.
        Least privilege on the server (``GRANT SELECT ON <database>_*.*``) cannot tell copies
        apart; this refusal does."""
        import re

        from polysql_ray.engines.clickhouse import read_replica_spec, scope_refusal

        try:
            own = self.database_for(read_replica_spec(location))
        except (OSError, ValueError):
            return None  # execute reports the missing replica
        return scope_refusal(sql, own, re.escape(self.settings.database) + r"_[0-9a-f]{24}(_load_[0-9a-f]{8})?")

    # ------------------------------------------------------------------ execution
    def execute(self, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Run one untrusted statement on the server, read-only, in the replica's database.
        Never raises."""
        from polysql_ray.engines.clickhouse import arrow_result, query_settings, sandbox_refusal
        from polysql_ray.engines.servers import LiveStopwatch, precheck

        with LiveStopwatch() as sw:
            refusal, sql = precheck(sql, self.dialect, frozenset(), limits)
            why = None if refusal else (sandbox_refusal(sql, self.denied()) or format_clause(sql)
                                        or self.scope(sql, location))
            if refusal is not None:
                return ExecutionResult.failure(refusal[0], refusal[1], sw.now())
            if why is not None:
                return ExecutionResult.failure(S.REJECTED, why, sw.now())
            try:
                db = self.load(location)
            except (OSError, ValueError) as e:
                return ExecutionResult.failure(S.UNAVAILABLE, f"replica not found: {location} ({e})", sw.now())
            except Exception as e:
                return ExecutionResult.failure(S.UNAVAILABLE, f"cannot load replica {location} onto "
                                               f"{self.settings.host}: {e}", sw.now())
            try:
                client = self._client(False, limits.timeout_s + self.grace_s)
                requested = query_settings(sql, self.result_settings())
                payload = client.raw_query(sql, settings={**self.request_settings(limits, requested), "database": db},
                                           fmt="Arrow")
            except Exception as e:
                status = classify_server_error(e)
                msg = str(e)
                if status is S.UNAVAILABLE and sw.now() >= limits.timeout_s and "timed out" in msg.lower():
                    status, msg = S.TIMEOUT, f"client gave up after {sw.now():.1f}s: {msg}"
                elif status is S.TIMEOUT:
                    msg = f"interrupted after {limits.timeout_s}s: {msg}"
                return ExecutionResult.failure(status, msg, sw.now())
            try:
                table = arrow_result(payload)
            except Exception as e:
                return ExecutionResult.failure(S.RUNTIME, f"result is not Arrow: {type(e).__name__}: {e}",
                                               sw.now())
            return ExecutionResult(S.OK, table, None, sw.now())

    def close(self) -> None:
        """Close the HTTP clients."""
        with self._lock:
            for client in self._clients.values():
                try:
                    client.close()
                except Exception:
                    pass
            self._clients.clear()
