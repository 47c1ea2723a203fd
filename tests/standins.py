"""Stand-in servers for warehouse engines, each in its own virtual environment (not a conftest).

fakesnow (Snowflake stand-in) pins an older sqlglot than this project, so it lives in its own
venv, ``<repo>/.venv-fakesnow`` (``.ci/run`` creates it; ``POLYSQL_FAKESNOW_VENV`` overrides),
and runs as a loopback HTTP server process started here. bqemulator (BigQuery stand-in) lives
in ``<repo>/.venv-bqemulator`` (``POLYSQL_BQEMULATOR_VENV``); it insists on downloading DuckDB's
spatial extension at start (no network here), so :data:`BQEMULATOR_LAUNCH` starts it with that
step replaced by a no-op (GEOGRAPHY is then unavailable; no benchmark uses it). Without the venv the calling tests
skip with the command that creates it, or fail when ``POLYSQL_REQUIRE_STANDINS=1`` (CI).
moto (an S3-protocol server, stand-in for object storage under the results store) lives in
``<repo>/.venv-moto`` (``POLYSQL_MOTO_VENV``) and runs as ``moto_server`` on loopback.
"""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: stand-in name -> (venv env var, default venv folder, console script, creation command)
STANDINS = {
    "fakesnow": ("POLYSQL_FAKESNOW_VENV", REPO / ".venv-fakesnow", "fakesnow",
                 "python3 -m venv .venv-fakesnow && .venv-fakesnow/bin/pip install "
                 "'fakesnow[server]==0.12.*' 'snowflake-connector-python==4.8.*'"),
    "bqemulator": ("POLYSQL_BQEMULATOR_VENV", REPO / ".venv-bqemulator", "python",
                   "python3 -m venv .venv-bqemulator && .venv-bqemulator/bin/pip install 'bqemulator==1.4.*' numpy"),
    "moto": ("POLYSQL_MOTO_VENV", REPO / ".venv-moto", "moto_server",
             "python3 -m venv .venv-moto && .venv-moto/bin/pip install 'moto[s3]==5.2.*' flask flask-cors"),
}

#: Python run by the bqemulator venv: skip the spatial-extension download, then the CLI.
BQEMULATOR_LAUNCH = ("import sys; import bqemulator.storage.engine as e; "
                     "e.DuckDBEngine._load_spatial = lambda self: None; "
                     "from bqemulator.cli import main; sys.argv[0] = 'bqemulator'; sys.exit(main())")


def standin_executable(name: str) -> Path:
    """The stand-in's console script; skips (or fails under POLYSQL_REQUIRE_STANDINS=1)."""
    env, default, script, how = STANDINS[name]
    exe = Path(os.environ.get(env, default)) / "bin" / script
    if not exe.exists():
        msg = f"{name} stand-in not installed at {exe}; create it with: {how}"
        if os.environ.get("POLYSQL_REQUIRE_STANDINS") == "1":
            pytest.fail(msg + " (POLYSQL_REQUIRE_STANDINS=1)", pytrace=False)
        pytest.skip(msg)
    return exe


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fakesnow_server(wait_s: float = 60.0):
    """Start ``fakesnow -s`` on a free loopback port; yields ``(host, port)``; stops it after."""
    port = free_port()
    return _serve([str(standin_executable("fakesnow")), "-s", "--host", "127.0.0.1", "-p", str(port)],
                  port, "fakesnow", wait_s)


def bqemulator_server(wait_s: float = 120.0):
    """Start bqemulator (REST only, ephemeral) on a free loopback port; yields ``(host, port)``."""
    port = free_port()
    return _serve([str(standin_executable("bqemulator")), "-c", BQEMULATOR_LAUNCH, "start",
                   "--rest-host", "127.0.0.1", "--rest-port", str(port), "--grpc-port", "0",
                   "--project", "polysql", "--log-level", "error"], port, "bqemulator", wait_s)


def moto_server(wait_s: float = 60.0):
    """Start ``moto_server`` (in-memory S3 protocol) on a free loopback port; yields ``(host, port)``."""
    port = free_port()
    return _serve([str(standin_executable("moto")), "-H", "127.0.0.1", "-p", str(port)], port, "moto", wait_s)


#: port -> the stand-in process serving it (tests that freeze a stand-in: SIGSTOP/SIGCONT)
PROCESSES: dict[int, subprocess.Popen] = {}


@contextlib.contextmanager
def _serve(argv: list[str], port: int, name: str, wait_s: float):
    import tempfile

    # stand-ins log every request on stderr (fakesnow, moto): into a file, never a pipe that
    # nobody reads: a full pipe blocks the server's logging call and with it every request
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    PROCESSES[port] = proc
    try:
        deadline = time.monotonic() + wait_s
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                err = log.read().decode(errors="replace")[-2000:]
                pytest.fail(f"{name} did not start on 127.0.0.1:{port}: {err}", pytrace=False)
            time.sleep(0.2)
        yield "127.0.0.1", port
    finally:
        PROCESSES.pop(port, None)
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
