"""User-facing errors: which exceptions mean "your input needs fixing" and how they print."""
from __future__ import annotations

#: Exception class names whose message already names what to fix; printed without a traceback.
USER_ERRORS = ("ConfigError", "DatasetError", "GeneratorConfigError", "ReplicationError", "ReplayError",
               "StoreError", "FileNotFoundError", "ConfigCompositionException", "ServerUnavailable")

#: How to bring up each server engine on a machine like the CI one (README "Two commands").
SERVER_START = {
    "postgres": "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    # --pidfile: without it start-stop-daemon takes ANY mariadbd (a private instance on another
    # port) for "already running" and starts nothing. lower_case_table_names=1: table names
    # resolve case-insensitively, as on the SQLite sources (README "Replication").
    "mysql": "start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid "
             "--exec /usr/sbin/mariadbd -- --lower-case-table-names=1",
}

_UNREACHABLE = ("connection refused", "can't connect", "could not connect", "is the server running",
                "timeout expired", "connection timed out", "no route to host")


def server_hint(engine: str, message: str) -> str:
    """A hint to append when ``message`` says the server of ``engine`` cannot be reached."""
    if engine in SERVER_START and any(s in message.lower() for s in _UNREACHABLE):
        return (f" (is the {engine} server running? check engines.{engine}.host/port; "
                f"start it with: {SERVER_START[engine]})")
    return ""


def user_error_message(exc: BaseException) -> str | None:
    """The message to print for a user error (walking ``__cause__``), else None."""
    seen = exc
    if isinstance(exc, OSError) and type(exc).__name__ == "StoreError":
        return str(exc)
    while seen is not None:
        if type(seen).__name__ in USER_ERRORS:
            return str(seen)
        seen = seen.__cause__
    return None
