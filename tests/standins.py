"""Stand-in servers for warehouse engines and object storage, each in its own virtual environment.

fakesnow (Snowflake stand-in) pins an older sqlglot than this project, so it lives in its own
venv and runs as a loopback HTTP server process started here. bqemulator (BigQuery stand-in)
insists on downloading DuckDB's spatial extension at start (no network here), so
:data:`BQEMULATOR_LAUNCH` starts it with that step replaced by a no-op (GEOGRAPHY is then
unavailable; no benchmark uses it). moto is an S3-protocol server (stand-in for object storage
under the results store), run as ``moto_server`` on loopback.

Where the venvs live: ``POLYSQL_<NAME>_VENV`` when set, else a cache shared by every checkout of
this machine, ``${XDG_CACHE_HOME:-~/.cache}/polysql_ray/standins/<name>-<hash of its pins>``. The
first test that needs a stand-in builds its venv there with pip (about a minute each; a file
lock makes concurrent pytest runs build it once), so the README's test command needs no set-up
step of its own. Where pip cannot install it (no package index), the calling tests skip with one
line naming the command that builds it, or fail when ``POLYSQL_REQUIRE_STANDINS=1`` (CI).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

#: stand-in name -> (venv env var, pip requirements, console script in the venv's bin/)
STANDINS = {
    "fakesnow": ("POLYSQL_FAKESNOW_VENV", ("fakesnow[server]==0.12.*", "snowflake-connector-python==4.8.*"),
                 "fakesnow"),
    "bqemulator": ("POLYSQL_BQEMULATOR_VENV", ("bqemulator==1.4.*", "numpy"), "python"),
    "moto": ("POLYSQL_MOTO_VENV", ("moto[s3]==5.2.*", "flask", "flask-cors"), "moto_server"),
}

#: the shared cache of stand-in venvs (one per stand-in and set of pins)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "polysql_ray" / "standins"

#: Python run by the bqemulator venv: skip the spatial-extension download, then the CLI.
BQEMULATOR_LAUNCH = ("import sys; import bqemulator.storage.engine as e; "
                     "e.DuckDBEngine._load_spatial = lambda self: None; "
                     "from bqemulator.cli import main; sys.argv[0] = 'bqemulator'; sys.exit(main())")


def standin_venv(name: str) -> Path:
    """The folder of stand-in ``name``'s venv: ``$POLYSQL_<NAME>_VENV``, else its cache folder."""
    env, reqs, _ = STANDINS[name]
    if os.environ.get(env):
        return Path(os.environ[env])
    pins = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]
    return CACHE / f"{name}-{pins}"


def build_command(name: str) -> str:
    """The shell command that builds stand-in ``name``'s venv (printed in skip messages)."""
    _, reqs, _ = STANDINS[name]
    venv = standin_venv(name)
    return f"python3 -m venv {venv} && {venv}/bin/pip install " + " ".join(f"'{r}'" for r in reqs)


#: written last into a cache venv: a build killed half-way never looks complete
COMPLETE = ".polysql-complete"


def _build(name: str, venv: Path) -> str | None:
    """Build ``venv`` for stand-in ``name`` under a file lock; returns an error text or None."""
    _, reqs, _ = STANDINS[name]
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)          # a concurrent run builds it once; the other waits
        if (venv / COMPLETE).exists():
            return None
        shutil.rmtree(venv, ignore_errors=True)   # a half-built one
        try:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *reqs], check=True,
                           capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            shutil.rmtree(venv, ignore_errors=True)
            return ((e.stderr or "").strip().splitlines()[-1:] or [str(e)])[0]
        (venv / COMPLETE).write_text("\n".join(reqs) + "\n")
    return None


def standin_executable(name: str) -> Path:
    """The stand-in's console script, its venv built on first use (see the module docstring).

    Skips with one line when it cannot be built (or fails under ``POLYSQL_REQUIRE_STANDINS=1``)."""
    env, _, script = STANDINS[name]
    venv = standin_venv(name)
    exe = venv / "bin" / script
    err = None
    if os.environ.get(env):
        if not exe.exists():
            err = f"{env} points to {venv}, which has no {script}"
    elif not (venv / COMPLETE).exists():
        err = _build(name, venv)
    if err is not None or not exe.exists():
        msg = f"{name} stand-in not available ({err}); build it with: {build_command(name)}"
        if os.environ.get("POLYSQL_REQUIRE_STANDINS") == "1":
            pytest.fail(msg + " (POLYSQL_REQUIRE_STANDINS=1)", pytrace=False)
        pytest.skip(msg)
    return exe


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fakesnow_server(wait_s: float = 600.0):
    """Start ``fakesnow -s`` on a free loopback port; yields ``(host, port)``; stops it after."""
    port = free_port()
    return _serve([str(standin_executable("fakesnow")), "-s", "--host", "127.0.0.1", "-p", str(port)],
                  port, "fakesnow", wait_s)


def bqemulator_server(wait_s: float = 600.0):
    """Start bqemulator (REST only, ephemeral) on a free loopback port; yields ``(host, port)``."""
    port = free_port()
    return _serve([str(standin_executable("bqemulator")), "-c", BQEMULATOR_LAUNCH, "start",
                   "--rest-host", "127.0.0.1", "--rest-port", str(port), "--grpc-port", "0",
                   "--project", "polysql", "--log-level", "error"], port, "bqemulator", wait_s)


def moto_server(wait_s: float = 600.0):
    """Start ``moto_server`` (in-memory S3 protocol) on a free loopback port; yields ``(host, port)``."""
    port = free_port()
    return _serve([str(standin_executable("moto")), "-H", "127.0.0.1", "-p", str(port)], port, "moto", wait_s)


@contextlib.contextmanager
def _serve(argv: list[str], port: int, name: str, wait_s: float):
    import tempfile

    # stand-ins log every request on stderr (fakesnow, moto): into a file, never a pipe that
    # nobody reads: a full pipe blocks the server's logging call and with it every request
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
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
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
