"""A loopback stand-in for a ClickHouse *server*: ClickHouse's HTTP interface in front of chdb.

No modern ClickHouse server installs here, so the ``clickhouse-connect`` server path of
:mod:`polysql_ray.engines.clickhouse_server` is tested at the protocol layer against this
process. It speaks the part of ClickHouse's HTTP interface (docs "HTTP Interface") that
clickhouse-connect uses, and runs every statement in a real ClickHouse (chdb, in this
process's own data path):

* ``POST /?<params>``: the query is the ``query`` parameter and/or the body; for
  ``INSERT ... FORMAT <fmt>`` in ``query`` the body is the data (run as ``INSERT ... FROM
  INFILE`` over a temp file); ``param_<name>`` parameters bind ``{name:Type}``. The output format is the query's own ``FORMAT`` clause
  (clickhouse-connect appends one), else TabSeparated, as a server does.
* every parameter that is not a transport parameter is a **ClickHouse setting** of that one
  request: the chdb session that runs the query is opened with exactly those settings on top
  of the user's profile, so
  ``readonly=1``, ``max_execution_time``, ``max_result_rows`` ... are enforced by ClickHouse
  itself, and a setting chdb does not know fails with ClickHouse's own error. The reader's
  profile is ``--reader-profile`` (default: none, i.e. ``readonly=0``: ClickHouse refuses to
  change ``readonly`` at all under ``readonly=2``, so a reader that must accept the engine's
  per-request ``readonly=1`` cannot have a read-only profile; its least privilege comes from
  GRANTs, which this stand-in does not model).
* Basic auth is checked against ``--user``/``--admin-user`` and the passwords in the
  environment variables ``--password-env``/``--admin-password-env`` (code 516 otherwise).
* errors: HTTP 4xx/5xx, ``X-ClickHouse-Exception-Code`` and ClickHouse's ``Code: N.
  DB::Exception: ...`` text in the body, as a server sends them.

What it does not reproduce: real authentication and RBAC (users, roles, GRANTs, settings
profiles and constraints are modelled by the two profiles above), sessions, HTTP
compression (responses are identity-encoded), progress headers, streaming (a result is
sent whole, so no exception arrives mid-stream), the native TCP protocol, and any server
version but chdb's ClickHouse. ``python tests/clickhouse_http_standin.py --port N`` runs it.
"""
from __future__ import annotations

import argparse
import base64
import os
import re
import tempfile
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: Parameters of the HTTP interface that are not settings (ClickHouse HTTPHandler).
TRANSPORT_PARAMS = frozenset({
    "query", "database", "default_format", "session_id", "session_timeout", "session_check",
    "compress", "decompress", "query_id", "quota_key", "user", "password", "buffer_size",
    "wait_end_of_query", "client_protocol_version", "role", "stacktrace", "enable_http_compression",
    "http_headers_progress_interval_ms", "send_progress_in_http_headers",
    "cancel_http_readonly_queries_on_client_close", "http_zlib_compression_level",
})

#: ClickHouse error code -> HTTP status (a subset of the server's exceptionCodeToHTTPStatus).
HTTP_STATUS = {516: 401, 164: 403, 497: 403, 291: 403, 62: 400, 46: 400, 47: 400, 115: 400,
               60: 404, 81: 404}

_CODE = re.compile(r"Code:\s*(\d+)")
_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_INSERT = re.compile(r"^\s*INSERT\s+INTO\s+(.+?)\s+FORMAT\s+(\w+)\s*$", re.IGNORECASE | re.DOTALL)


class Backend:
    """chdb sessions keyed by their settings; statements serialized (one chdb per process)."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix=f"polysql-chdb-{os.getpid()}-http-")
        self.sessions: dict[tuple, object] = {}
        self.lock = threading.Lock()

    def run(self, sql: str, settings: dict[str, str], database: str | None, params: dict | None = None) -> bytes:
        import chdb

        key = tuple(sorted(settings.items()))
        with self.lock:
            con = self.sessions.get(key)
            if con is None:
                con = chdb.connect(f"file:{self.path}?" + "&".join(f"{k}={v}" for k, v in key))
                self.sessions[key] = con
            con.query(f"USE `{database or 'default'}`")
            return con.query(sql, "TabSeparated", params=params or None).bytes()


class Handler(BaseHTTPRequestHandler):
    server_version = "polysql-clickhouse-http-standin"
    backend: Backend
    users: dict[str, tuple[str | None, dict[str, str]]]  # user -> (password, profile settings)

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if urllib.parse.urlparse(self.path).path == "/ping":
            return self._send(200, b"Ok.\n")
        self._handle(b"", readonly_get=True)

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._handle(body, readonly_get=False)

    def _handle(self, body: bytes, readonly_get: bool) -> None:
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlparse(self.path).query, keep_blank_values=True))
        user, password = self._credentials(params)
        if user not in self.users or self.users[user][0] != password:
            return self._error(f"Code: 516. DB::Exception: {user}: Authentication failed: password is "
                               f"incorrect, or there is no user with such name. (AUTHENTICATION_FAILED)")
        settings = {**self.users[user][1], **{k: v for k, v in params.items()
                                             if k not in TRANSPORT_PARAMS and not k.startswith("param_")}}
        if readonly_get:
            settings["readonly"] = "1"
        query = params.get("query", "")
        try:
            insert = _INSERT.match(query) if body and query else None
            if insert:
                out = self._insert(insert.group(1), insert.group(2), body, settings, params.get("database"))
            else:
                sql = (query + ("\n" if query and body else "") + body.decode()).strip()
                out = self.backend.run(sql, settings, params.get("database"),
                                       {k[6:]: v for k, v in params.items() if k.startswith("param_")})
        except Exception as e:  # chdb raises ClickHouse's own exception text
            return self._error(str(e))
        m = _FORMAT.search(params.get("query", "") or body.decode(errors="replace"))
        self._send(200, out, {"X-ClickHouse-Format": m.group(1) if m else "TabSeparated",
                              "X-ClickHouse-Timezone": "UTC",
                              "X-ClickHouse-Query-Id": params.get("query_id", ""),
                              "X-ClickHouse-Summary": '{"read_rows":"0"}'})

    def _insert(self, target: str, fmt: str, body: bytes, settings: dict, database: str | None) -> bytes:
        with tempfile.NamedTemporaryFile(suffix="." + fmt.lower()) as tmp:
            tmp.write(body)
            tmp.flush()
            return self.backend.run(f"INSERT INTO {target} FROM INFILE '{tmp.name}' FORMAT {fmt}",
                                    settings, database)

    def _credentials(self, params: dict) -> tuple[str, str]:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            return user, password
        return (self.headers.get("X-ClickHouse-User") or params.get("user", "default"),
                self.headers.get("X-ClickHouse-Key") or params.get("password", ""))

    def _error(self, message: str) -> None:
        m = _CODE.search(message)
        code = int(m.group(1)) if m else 1002
        text = message if m else f"Code: 1002. DB::Exception: {message}"
        self._send(HTTP_STATUS.get(code, 500), (text.rstrip() + "\n").encode(),
                   {"X-ClickHouse-Exception-Code": str(code)})

    def _send(self, status: int, payload: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main(argv: list[str] | None = None) -> None:
    """Serve until killed. Users: ``--user`` with ``--reader-profile`` settings and
    ``--admin-user`` with the default profile (replica loading)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--user", default="polysql_reader")
    ap.add_argument("--password-env", default="POLYSQL_CH_READER_PASSWORD")
    ap.add_argument("--admin-user", default="polysql_admin")
    ap.add_argument("--admin-password-env", default="POLYSQL_CH_ADMIN_PASSWORD")
    ap.add_argument("--reader-profile", default="", help="k=v,... settings of the reader's profile")
    a = ap.parse_args(argv)
    Handler.backend = Backend()
    Handler.users = {a.user: (os.environ.get(a.password_env, ""),
                                dict(kv.split("=", 1) for kv in a.reader_profile.split(",") if kv)),
                     a.admin_user: (os.environ.get(a.admin_password_env, ""), {})}
    ThreadingHTTPServer((a.host, a.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
