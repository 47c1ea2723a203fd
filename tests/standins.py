"""Stand-in servers for the tests: the implementation is :mod:`jobs.standins` (shared with the
user command ``python -m jobs.standins start|status|stop``); this module turns "cannot be built"
into a skip with the command that builds it, or a failure under ``POLYSQL_REQUIRE_STANDINS=1``
(CI), and "did not start" into a test failure.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from jobs import standins as _impl
from jobs.standins import (  # noqa: F401 - re-exported for the tests
    BQEMULATOR_LAUNCH, CACHE, COMPLETE, STANDINS, build_command, free_port, standin_venv,
)

REPO = Path(__file__).resolve().parents[1]


def standin_executable(name: str) -> Path:
    """The stand-in's console script, its venv built on first use (:func:`jobs.standins.executable`).

    Skips with one line when it cannot be built (or fails under ``POLYSQL_REQUIRE_STANDINS=1``)."""
    try:
        return _impl.executable(name)
    except _impl.StandinError as e:
        if os.environ.get("POLYSQL_REQUIRE_STANDINS") == "1":
            pytest.fail(f"{e} (POLYSQL_REQUIRE_STANDINS=1)", pytrace=False)
        pytest.skip(str(e))


@contextlib.contextmanager
def _serve(argv: list[str], port: int, name: str, wait_s: float):
    """:func:`jobs.standins.serve_argv`, a start failure failing the test."""
    cm = _impl.serve_argv(argv, port, name, wait_s)
    try:
        host_port = cm.__enter__()
    except _impl.StandinError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield host_port
    finally:
        cm.__exit__(None, None, None)


#: The tests' bound on a stand-in starting to listen (a condition the process signals; a loaded
#: machine only makes it later, and a process that exits first fails at once).
WAIT_S = 600.0


def _standin(name: str, wait_s: float | None):
    standin_executable(name)  # skip (or fail) here when it cannot be built
    port = free_port()
    argv = _impl.launch_argv(name, port)
    return _serve(argv, port, name, wait_s or max(WAIT_S, _impl.WAIT_S[name]))


def fakesnow_server(wait_s: float | None = None):
    """Start ``fakesnow -s`` on a free loopback port; yields ``(host, port)``; stops it after."""
    return _standin("fakesnow", wait_s)


def bqemulator_server(wait_s: float | None = None):
    """Start bqemulator (REST only, ephemeral) on a free loopback port; yields ``(host, port)``."""
    return _standin("bqemulator", wait_s)


def moto_server(wait_s: float | None = None):
    """Start ``moto_server`` (in-memory S3 protocol) on a free loopback port; yields ``(host, port)``."""
    return _standin("moto", wait_s)
