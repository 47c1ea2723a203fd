"""User-facing errors: which exceptions mean "your input needs fixing" and how they print."""
from __future__ import annotations

import errno

from polysql_ray.engines.declaration import DeclaredTable

#: Exception class names whose message already names what to fix; printed without a traceback.
USER_ERRORS = ("ConfigError", "DatasetError", "GeneratorConfigError", "ReplicationError", "ReplayError",
               "StoreError", "FileNotFoundError", "ConfigCompositionException", "ServerUnavailable",
               "GeneratorUnavailable", "MissingExtra")

#: How to bring up each server engine on a machine like the CI one (README "Two commands"):
#: declared by each engine class as ``server_start`` (``engines/<name>.py``).
SERVER_START = DeclaredTable(lambda cls: cls.server_start)


class ConfigError(ValueError):
    """The composed configuration cannot be run; the message names the key to fix."""


class ReplicationError(RuntimeError):
    """A copy could not be made or did not verify. The message says which table/column."""


_UNREACHABLE = ("connection refused", "can't connect", "could not connect", "is the server running",
                "timeout expired", "connection timed out", "no route to host")


def server_hint(engine: str, message: str) -> str:
    """A hint to append when ``message`` says the server of ``engine`` cannot be reached."""
    if engine in SERVER_START and any(s in message.lower() for s in _UNREACHABLE):
        return (f" (is the {engine} server running? check engines.{engine}.host/port; "
                f"start it with: {SERVER_START[engine]})")
    return ""


def root_message(exc: BaseException) -> str:
    """The engine's own message of ``exc`` (its ``cause`` when it has one, as a Ray task error
    does) on one line, at most 600 characters (every line kept: the first names host and port)."""
    cause = getattr(exc, "cause", None)
    lines = [ln.strip() for ln in str(cause if cause is not None else exc).strip().splitlines() if ln.strip()]
    return " ".join(lines)[:600]


#: ``errno`` values of a disk that takes no more writes (full, over quota, read-only): a fault of
#: the machine, said in one line wherever it strikes (the store says more itself).
DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def user_error_message(exc: BaseException) -> str | None:
    """The message to print for a user error (walking ``__cause__``), else None. A full or
    read-only disk (:data:`DISK_ERRNOS`) anywhere is one too: the file and what to do."""
    seen = exc
    if isinstance(exc, OSError) and type(exc).__name__ == "StoreError":
        return str(exc)
    while seen is not None:
        if type(seen).__name__ in USER_ERRORS:
            return str(seen)
        if isinstance(seen, OSError) and seen.errno in DISK_ERRNOS:
            where = " -> ".join(str(f) for f in (seen.filename, seen.filename2) if f)
            return (f"{seen.strerror}{': ' + where if where else ''}; free space or make the folder "
                    f"writable, then rerun (everything already stored is kept)")
        seen = seen.__cause__
    return None
