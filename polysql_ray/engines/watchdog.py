"""Client-side deadline for server calls that the server may not interrupt itself.

Warehouse engines set the server-side timeout first (Snowflake ``STATEMENT_TIMEOUT_IN_SECONDS``,
BigQuery ``job_timeout_ms``, ClickHouse ``max_execution_time``). A server that does not enforce
it (the fakesnow and bqemulator stand-ins; a real server that stops answering) would otherwise
hold the evaluation forever. :func:`call_with_deadline` runs the blocking driver call in a
daemon thread and gives up at the deadline: the caller then cancels what it can on the server
(``on_timeout``), discards the connection and returns a typed ``timeout``. The abandoned thread
ends when the driver call returns; it never touches the result again.
"""
from __future__ import annotations

import threading
from typing import Any, Callable


class DeadlineExceeded(Exception):
    """The call did not return within its deadline (``seconds``); it may still be running."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no answer within {seconds:g}s")
        self.seconds = seconds


def call_with_deadline(fn: Callable[[], Any], seconds: float,
                       on_timeout: Callable[[], Any] | None = None, cancel_wait_s: float = 5.0) -> Any:
    """``fn()``'s return value, or its exception re-raised, if it returns within ``seconds``.

    Raises :class:`DeadlineExceeded` otherwise, after starting ``on_timeout()`` in its own
    daemon thread and waiting at most ``cancel_wait_s`` for it (best effort: its exceptions are
    swallowed, and a cancel request to a server that stopped answering cannot block the caller).
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=target, name="polysql-deadline", daemon=True).start()
    if not done.wait(seconds):
        if on_timeout is not None:
            def cancel() -> None:
                try:
                    on_timeout()
                except Exception:
                    pass

            canceller = threading.Thread(target=cancel, name="polysql-cancel", daemon=True)
            canceller.start()
            canceller.join(cancel_wait_s)
        raise DeadlineExceeded(seconds)
    if "error" in box:
        raise box["error"]
    return box["value"]
