"""The warehouse stand-ins for a local try, and the one implementation the tests use.

Usage::

    python -m jobs.standins start  [only=[fakesnow,bqemulator]]   # builds venvs on first use
    python -m jobs.standins status
    python -m jobs.standins stop

``start`` runs fakesnow (a Snowflake stand-in, HTTP on loopback) and bqemulator (a BigQuery
stand-in, REST on loopback) as background processes and prints the exact overrides that point
a sweep at them (``engines.snowflake.*``, ``engines.bigquery.*``); ``status`` prints them again
for the running ones; ``stop`` ends the processes this command started (by their recorded pid).
README "Warehouse dialects".

Each stand-in lives in its own virtual environment (fakesnow pins an older sqlglot than this
project; bqemulator insists on downloading DuckDB's spatial extension at start, so
:data:`BQEMULATOR_LAUNCH` starts it with that step replaced by a no-op: GEOGRAPHY is then
unavailable). moto (an S3-protocol server, stand-in for object storage under the results store)
is built and started the same way by the tests. Where the venvs live:
``POLYSQL_<NAME>_VENV`` when set, else a cache shared by every checkout of this machine,
``${XDG_CACHE_HOME:-~/.cache}/polysql_ray/standins/<name>-<hash of its pins>``, built with pip
on first use (about a minute each) under a file lock, so concurrent users build it once.
Started stand-ins are recorded in ``<cache>/run/<name>.json`` (pid, port, log file;
``POLYSQL_STANDINS_RUN`` names another folder).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from polysql_ray.jobs_cli import UsageError, parse_overrides, run_job

PROG = "jobs.standins"

#: stand-in name -> (venv env var, pip requirements, console script in the venv's bin/)
STANDINS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "fakesnow": ("POLYSQL_FAKESNOW_VENV", ("fakesnow[server]==0.12.*", "snowflake-connector-python==4.8.*"),
                 "fakesnow"),
    "bqemulator": ("POLYSQL_BQEMULATOR_VENV", ("bqemulator==1.4.*", "numpy"), "python"),
    "moto": ("POLYSQL_MOTO_VENV", ("moto[s3]==5.2.*", "flask", "flask-cors"), "moto_server"),
}

#: the stand-ins ``start`` runs (the warehouse dialects)
WAREHOUSE_STANDINS = ("fakesnow", "bqemulator")

#: the shared cache of stand-in venvs (one per stand-in and set of pins)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "polysql_ray" / "standins"

#: Python run by the bqemulator venv: skip the spatial-extension download, then the CLI.
BQEMULATOR_LAUNCH = ("import sys; import bqemulator.storage.engine as e; "
                     "e.DuckDBEngine._load_spatial = lambda self: None; "
                     "from bqemulator.cli import main; sys.argv[0] = 'bqemulator'; sys.exit(main())")

#: written last into a cache venv: a build killed half-way never looks complete
COMPLETE = ".polysql-complete"

#: env var the Snowflake overrides name for the stand-in's password (fakesnow accepts any)
FAKESNOW_PASSWORD_ENV = "POLYSQL_FAKESNOW_PW"


class StandinError(RuntimeError):
    """A stand-in could not be built or started; the message says what to run or read."""


def standin_venv(name: str) -> Path:
    """The folder of stand-in ``name``'s venv: ``$POLYSQL_<NAME>_VENV``, else its cache folder."""
    env, reqs, _ = STANDINS[name]
    if os.environ.get(env):
        return Path(os.environ[env])
    pins = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:12]
    return CACHE / f"{name}-{pins}"


def build_command(name: str) -> str:
    """The shell command that builds stand-in ``name``'s venv (printed when it cannot be built)."""
    _, reqs, _ = STANDINS[name]
    venv = standin_venv(name)
    return f"python3 -m venv {venv} && {venv}/bin/pip install " + " ".join(f"'{r}'" for r in reqs)


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


def executable(name: str) -> Path:
    """The stand-in's console script, its venv built on first use (module doc).

    Raises:
        StandinError: it cannot be built (the message names the command that builds it).
    """
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
        raise StandinError(f"{name} stand-in not available ({err}); build it with: {build_command(name)}")
    return exe


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_argv(name: str, port: int) -> list[str]:
    """The command line that serves stand-in ``name`` on ``127.0.0.1:port``."""
    exe = str(executable(name))
    if name == "fakesnow":
        return [exe, "-s", "--host", "127.0.0.1", "-p", str(port)]
    if name == "bqemulator":
        return [exe, "-c", BQEMULATOR_LAUNCH, "start", "--rest-host", "127.0.0.1", "--rest-port",
                str(port), "--grpc-port", "0", "--project", "polysql", "--log-level", "error"]
    if name == "moto":
        return [exe, "-H", "127.0.0.1", "-p", str(port)]
    raise StandinError(f"unknown stand-in {name!r}; known: {sorted(STANDINS)}")


#: seconds a stand-in may take to open its port (bqemulator's DuckDB start is the slowest)
WAIT_S = {"fakesnow": 60.0, "bqemulator": 120.0, "moto": 60.0}


def wait_listening(proc: subprocess.Popen, port: int, name: str, log_path: Path | None,
                   wait_s: float) -> None:
    """Return once ``127.0.0.1:port`` accepts a connection; raise :class:`StandinError` with the
    log's tail when the process exits first or ``wait_s`` passes."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            err = log_path.read_text(errors="replace")[-2000:] if log_path and log_path.exists() else ""
            raise StandinError(f"{name} did not start on 127.0.0.1:{port}: {err}")
        time.sleep(0.2)  # polling a port that is not open yet; no event to wait on


@contextlib.contextmanager
def serve_argv(argv: list[str], port: int, name: str, wait_s: float):
    """Run ``argv`` (a server that listens on ``127.0.0.1:port``) for the ``with`` block; yields
    ``(host, port)`` and stops it afterwards. Raises :class:`StandinError` when it does not start."""
    import tempfile

    # stand-ins log every request on stderr (fakesnow, moto): into a file, never a pipe that
    # nobody reads: a full pipe blocks the server's logging call and with it every request
    with tempfile.TemporaryDirectory(prefix="polysql-standin-") as tmp:
        log_path = Path(tmp) / "log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        try:
            wait_listening(proc, port, name, log_path, wait_s)
            yield "127.0.0.1", port
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def serve(name: str, wait_s: float | None = None):
    """Run stand-in ``name`` on a free loopback port for the ``with`` block; yields
    ``(host, port)``. Raises :class:`StandinError` (cannot be built, or did not start)."""
    port = free_port()
    return serve_argv(launch_argv(name, port), port, name, wait_s or WAIT_S[name])


#: stand-in -> the dialect whose engine it stands in for
DIALECT = {"fakesnow": "snowflake", "bqemulator": "bigquery"}


def engine_settings(name: str, port: int) -> dict:
    """The ``engines.<dialect>`` settings that reach stand-in ``name`` on loopback ``port``
    (never a real secret: fakesnow accepts any password, read from :data:`FAKESNOW_PASSWORD_ENV`)."""
    if name == "fakesnow":
        return {"host": "127.0.0.1", "port": port, "protocol": "http", "account": "fakesnow",
                "user": "fake", "admin_user": "fake", "password_env": FAKESNOW_PASSWORD_ENV,
                "admin_password_env": FAKESNOW_PASSWORD_ENV}
    if name == "bqemulator":
        return {"project": "polysql", "api_endpoint": f"http://127.0.0.1:{port}", "anonymous": True}
    raise StandinError(f"{name} stands in for no dialect")


def overrides(name: str, port: int) -> list[str]:
    """:func:`engine_settings` as sweep overrides (``engines.snowflake.port=...``)."""
    def text(v):
        return "true" if v is True else str(v)
    return [f"engines.{DIALECT[name]}.{k}={text(v)}" for k, v in engine_settings(name, port).items()]


# ----------------------------------------------------------------------------- the command


def _state_dir() -> Path:
    """Where started stand-ins are recorded: ``$POLYSQL_STANDINS_RUN``, else ``<cache>/run``."""
    return Path(os.environ.get("POLYSQL_STANDINS_RUN") or CACHE / "run")


def _state(name: str) -> dict | None:
    """The recorded run of stand-in ``name`` when its process is still alive, else None."""
    f = _state_dir() / f"{name}.json"
    if not f.exists():
        return None
    st = json.loads(f.read_text())
    try:
        os.kill(st["pid"], 0)
    except (ProcessLookupError, PermissionError):
        f.unlink(missing_ok=True)  # it ended on its own
        return None
    return st


def start(name: str) -> dict:
    """Start stand-in ``name`` in the background (own session, log in the state folder) and
    record it; reuses a running one. Returns its state ``{"pid", "port", "log"}``."""
    st = _state(name)
    if st is not None:
        return st
    port = free_port()
    argv = launch_argv(name, port)
    _state_dir().mkdir(parents=True, exist_ok=True)
    log_path = _state_dir() / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        wait_listening(proc, port, name, log_path, WAIT_S[name])
    except StandinError:
        proc.kill()
        raise
    st = {"pid": proc.pid, "port": port, "log": str(log_path)}
    (_state_dir() / f"{name}.json").write_text(json.dumps(st))
    return st


def stop(name: str) -> bool:
    """Stop the recorded stand-in ``name`` (its process group); True when one was running."""
    st = _state(name)
    if st is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(st["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(st["pid"], 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)  # waiting for a process we signalled to exit
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(st["pid"], signal.SIGKILL)
    (_state_dir() / f"{name}.json").unlink(missing_ok=True)
    return True


def _print_overrides(name: str, port: int) -> None:
    print(f"{name} (dialect {DIALECT[name]}) on 127.0.0.1:{port}; add to a sweep:")
    if name == "fakesnow":
        print(f"  export {FAKESNOW_PASSWORD_ENV}=any   # fakesnow accepts any password")
    print("  " + " ".join(overrides(name, port)))


KEYS = {"only": None}


def main(argv: list[str]) -> int:
    """``start`` / ``status`` / ``stop`` [``only=[...]``]; returns the exit code."""
    if not argv or argv[0] not in ("start", "status", "stop"):
        raise UsageError(f"usage: python -m {PROG} start|status|stop [only=[fakesnow,bqemulator]]")
    verb, kv = argv[0], parse_overrides(argv[1:], KEYS, PROG)
    names = kv["only"] or list(WAREHOUSE_STANDINS)
    names = [names] if isinstance(names, str) else list(names)
    unknown = [n for n in names if n not in WAREHOUSE_STANDINS]
    if unknown:
        raise UsageError(f"only={unknown}: expected some of {list(WAREHOUSE_STANDINS)}")
    for name in names:
        if verb == "start":
            try:
                st = start(name)
            except StandinError as e:
                raise UsageError(str(e)) from None
            _print_overrides(name, st["port"])
        elif verb == "status":
            st = _state(name)
            if st is None:
                print(f"{name}: not running (python -m {PROG} start)")
            else:
                print(f"{name}: running, pid {st['pid']}, log {st['log']}")
                _print_overrides(name, st["port"])
        else:
            print(f"{name}: {'stopped' if stop(name) else 'was not running'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
