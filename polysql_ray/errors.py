"""User-facing errors: which exceptions mean "your input needs fixing" and how they print."""
from __future__ import annotations

#: Exception class names whose message already names what to fix; printed without a traceback.
USER_ERRORS = ("ConfigError", "DatasetError", "GeneratorError", "ReplicationError", "FileNotFoundError",
               "ConfigCompositionException", "ServerUnavailable", "PredictionFileError")


def user_error_message(exc: BaseException) -> str | None:
    """The message to print for a user error (walking ``__cause__``), else None."""
    seen = exc
    while seen is not None:
        if type(seen).__name__ in USER_ERRORS or (isinstance(seen, RuntimeError) and str(seen).startswith("replication failed")):
            return str(seen)
        seen = seen.__cause__
    return None
