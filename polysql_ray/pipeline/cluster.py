"""The run's Ray cluster: start or join it, keep it lean, reap it, check the run fits, shut it down.

* :func:`ray_init_kwargs` / :func:`init_ray`: a NEW local cluster unless ``ray.address`` is set
  (never an earlier ``ray start``'s), with the head processes a fixed local cluster has no use
  for left out (:func:`_lean_head`) and a reaper (:data:`REAPER`, which inspects the driver's
  process tree through ``/proc``) that takes the cluster down with a driver killed by ``kill -9``.
* :class:`RunCluster`: started on the run's first need of Ray (a vLLM model, or pending work),
  shut down as soon as the run's work on it is done when the run started it.
* :func:`check_fits`: fail fast, with the key to change, when the execution actors and the
  models' actor pools (vLLM) would reserve every CPU or ask for a custom resource no node has (Ray would wait forever).
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any, Mapping

import ray

from polysql_ray.errors import ConfigError


def ray_init_kwargs(cfg: dict) -> dict[str, Any]:
    """``ray.init`` arguments: a NEW local cluster (``address="local"``) unless ``ray.address``
    is set, so a run never attaches to a cluster some earlier ``ray start`` left on the
    machine (another user's, another venv's, a stale one). Joining is explicit:
    ``ray.address=auto`` or ``ray.address=ray://host:10001`` (or ``RAY_ADDRESS`` via the
    config's interpolation). ``ray.system_config`` (raylet settings, Ray's ``_system_config``)
    applies to a local cluster only; the default keeps no idle worker process beyond 10 s
    (``num_workers_soft_limit: 0``): Ray otherwise keeps one per CPU, and starts one more than
    it uses when two scoring tasks arrive together (~80-240 MiB RSS each, for nothing); and it
    prestarts none (``prestart_worker_first_driver: false``, ``enable_worker_prestart: false``):
    Ray otherwise starts one idle worker per CPU when the driver connects, and more ahead of
    queued tasks, each a Python process importing Ray (~100 MiB, seconds of CPU) whether or not
    the run ever gives it a task; a worker then starts when a task or actor first needs one."""
    rc = cfg.get("ray") or {}
    kwargs: dict[str, Any] = {"include_dashboard": bool(rc.get("include_dashboard", False)),
                              "log_to_driver": bool(rc.get("log_to_driver", False)),
                              "configure_logging": True, "logging_level": logging.WARNING}
    if rc.get("address"):
        kwargs["address"] = str(rc["address"])
    else:
        kwargs["address"] = "local"
        if rc.get("num_cpus"):
            kwargs["num_cpus"] = int(rc["num_cpus"])
        if rc.get("system_config"):
            # the raylet settings of the run's own cluster (a joined cluster keeps its own)
            kwargs["_system_config"] = dict(rc["system_config"])
    return kwargs


def init_ray(cfg: dict) -> bool:
    """Start the run's own local Ray cluster, or join ``ray.address`` when set
    (:func:`ray_init_kwargs`). A local cluster gets a reaper (:data:`REAPER`): if the driver
    dies without shutting Ray down (``kill -9``), the cluster's processes go with it.
    Returns True when this call started the run's own local cluster (the run shuts it down as
    soon as its work on the cluster is done), False when it joined ``ray.address`` (the caller
    may still use the connection) or Ray was already initialised in this process.

    With ``ray.lean_head`` (default true) a local cluster starts without the head processes it
    has no use for (:func:`_lean_head`: monitor, log monitor, dashboard API server): about
    260 MiB of RSS and 1 s of CPU less."""
    if ray.is_initialized():
        return False
    kwargs = ray_init_kwargs(cfg)
    start_ray(lean_head=kwargs["address"] == "local" and bool((cfg.get("ray") or {}).get("lean_head", True)),
              **kwargs)
    if kwargs["address"] == "local":
        _start_reaper()
        return True
    return False


#: Attempts at starting a local cluster whose node misses Ray's startup waits (:func:`start_ray`).
START_ATTEMPTS = 5
#: How Ray says that its new node missed them (``ray/_private/node.py``), the only error retried.
STARTUP_TIMED_OUT = "timed out during startup"


def start_ray(lean_head: bool = False, **kwargs: Any) -> None:
    """``ray.init(**kwargs)``, retried when a new local node misses Ray's fixed startup waits;
    with ``lean_head``, a head without the processes :func:`_lean_head` leaves out (fewer
    Python processes start beside the node's agents, so they are up sooner).

    Ray gives a new node 30 s to register with its GCS (``ray/_private/node.py``; the
    ``raylet_start_wait_time_s`` setting is not read there), and its raylet a fixed time to see
    its agents' port files (ray-project/ray#65983); a loaded machine can miss either. Such a
    failure (:data:`STARTUP_TIMED_OUT` in the error) leaves the attempt's processes running
    (``ray.shutdown`` does not know them): they are killed (this process's descendants that
    the attempt started, from ``/proc``) and the cluster started again, :data:`START_ATTEMPTS`
    times in all; the last attempt's failure is raised after the same clean-up, and so is a
    Ctrl-C (or SIGTERM's ``SystemExit``) that lands inside ``ray.init``. Any other error is
    raised at once."""
    restore = _lean_head(log_monitor=bool(kwargs.get("log_to_driver", True)),
                         api_server=bool(kwargs.get("include_dashboard"))) if lean_head else None
    try:
        _start_attempts(kwargs)
    finally:
        if restore:
            restore()


def _start_attempts(kwargs: dict[str, Any]) -> None:
    """The attempts of :func:`start_ray`."""
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _descendants()
        try:
            ray.init(**kwargs)
            return
        except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM mid-start: nothing is left running
            ray.shutdown()
            _kill_new(before)
            raise
        except Exception as exc:
            ray.shutdown()
            if STARTUP_TIMED_OUT not in str(exc):
                raise
            _kill_new(before)
            if attempt == START_ATTEMPTS:
                raise
            logging.getLogger(__name__).warning("Ray startup timed out (attempt %d of %d); starting again",
                                                attempt, START_ATTEMPTS)


def _descendants() -> dict[int, str]:
    """``{pid: start time}`` of this process's descendants (``/proc``; empty without it)."""
    from pathlib import Path

    parent: dict[int, list[tuple[int, str]]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            f = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent.setdefault(int(f[1]), []).append((int(d.name), f[19]))
    out: dict[int, str] = {}
    todo = [os.getpid()]
    while todo:
        for pid, t0 in parent.get(todo.pop(), []):
            if pid not in out:
                out[pid] = t0
                todo.append(pid)
    return out


def _kill_new(before: dict[int, str]) -> None:
    """SIGKILL this process's descendants that are not in ``before`` (same pid and start time),
    and reap those that are its own children (no zombie is left)."""
    import signal

    for pid, t0 in _descendants().items():
        if before.get(pid) != t0:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:  # gone already, or not our child (its parent reaps it)
                pass


def _lean_head(log_monitor: bool, api_server: bool = False):
    """Make the next ``ray.init`` start a local head node without Ray's autoscaler monitor (a
    fixed local cluster has nothing to autoscale), unless ``log_monitor`` without its log
    monitor (it only forwards worker output to the driver, which ``log_to_driver=False`` turns
    off), and unless ``api_server`` without the dashboard's API server (with
    ``include_dashboard=False`` Ray still starts it, in its minimal mode, for the job-submission
    and state APIs; a run's own local cluster is reached by nobody else); each is a Python
    process of ~80-100 MiB. ``ray.init`` has no argument for these, so the defaults of the node
    parameters it builds (``RayParams(no_monitor=, include_log_monitor=)``, the switches behind
    ``ray start --no-monitor --include-log-monitor``) and the head's ``Node.start_api_server``
    are changed until the returned function is called. Returns None (nothing changed) for a Ray
    without them."""
    import functools
    import inspect

    from ray._private import node, parameter

    init = parameter.RayParams.__init__
    names = inspect.signature(init).parameters
    if "no_monitor" not in names or "include_log_monitor" not in names:
        return None
    start_api = getattr(node.Node, "start_api_server", None)
    if start_api is not None and not api_server:
        node.Node.start_api_server = lambda self, *args, **kwargs: None

    @functools.wraps(init)
    def lean_init(self, *args, **kwargs):
        kwargs.setdefault("no_monitor", True)
        if not log_monitor:
            kwargs.setdefault("include_log_monitor", False)
        init(self, *args, **kwargs)

    parameter.RayParams.__init__ = lean_init

    def restore() -> None:
        parameter.RayParams.__init__ = init
        if start_api is not None:
            node.Node.start_api_server = start_api

    return restore


#: Runs beside a driver that started a local cluster: every second it notes the driver's
#: descendant processes (pid + start time, from /proc); once the driver is gone (or a zombie)
#: it SIGKILLs the noted ones still alive (raylet, GCS, agents, workers that Ray would otherwise
#: leave behind after ``kill -9`` of the driver). Exits quietly when nothing is left.
#:
#: Cheap by construction, as it runs for the whole run: each second one ``os.listdir("/proc")``
#: and one read of ``/proc/<pid>/stat`` per process *new since the last listing* (a process
#: outside the driver's tree never enters it: its parent only changes to an ancestor or init),
#: not a read of every process on the machine; run with ``-I -S`` (no site, no path: it needs
#: only the standard library's builtins). After each listing it writes a line to stdout (the
#: run sends it to /dev/null; a test reads it to know a listing was made).
REAPER = """
import os, sys, time, signal
driver, me = int(sys.argv[1]), os.getpid()
def stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            s = f.read()
        f = s[s.rindex(b")") + 2:].split(None, 20)
        return int(f[1]), f[19], f[0]
    except (OSError, ValueError, IndexError):
        return None
seen, listed = {}, set()
def note():
    global listed
    now = {int(n) for n in os.listdir("/proc") if n.isdigit()}
    new = {}
    for pid in now - listed:
        st = stat(pid)
        if st is not None and pid != me:
            new[pid] = st
    listed = now
    grew = True
    while grew:
        grew = False
        for pid, (ppid, t0, _) in list(new.items()):
            if ppid == driver or ppid in seen:
                seen[pid] = t0
                del new[pid]
                grew = True
    try:
        print(len(seen), flush=True)
    except OSError:
        pass
while True:
    note()
    st = stat(driver)
    if st is None or st[2] == b"Z":
        break
    time.sleep(1.0)
for pid, t0 in seen.items():
    st = stat(pid)
    if st is not None and st[1] == t0:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def _start_reaper(driver: int | None = None, stdout: int | None = None) -> subprocess.Popen | None:
    """Start :data:`REAPER` watching ``driver`` (default this process), in a session of its own
    (a signal to the driver's process group does not reach it); ``stdout``: where its lines go
    (default /dev/null). None without ``/proc``."""
    if not os.path.isdir("/proc"):
        return None
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", REAPER, str(os.getpid() if driver is None else driver)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL if stdout is None else stdout,
                            stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)


def engine_actors(cfg: dict, engine: str, cluster_cpus: float | None = None) -> int:
    """Execution actors of ``engine`` (``engines.<engine>.actors``): a whole number as given;
    ``auto``: one per two CPUs of the cluster, at most a quarter of its CPUs reserved
    (``num_cpus`` per actor), at least 1 -- scoring tasks take one per CPU
    (``pipeline.max_inflight_score: auto``) and an execution actor's work interleaves with
    theirs, so together they keep every core busy. ``cluster_cpus``: the cluster's CPU count
    (default: ``ray.cluster_resources()``, Ray must be up)."""
    ecfg = (cfg.get("engines") or {}).get(engine) or {}
    setting = ecfg.get("actors", 1)
    if str(setting) != "auto":
        return max(1, int(setting))
    cpus = float(ray.cluster_resources().get("CPU", 1.0)) if cluster_cpus is None else float(cluster_cpus)
    # and never more than a quarter of the cluster's CPUs reserved by one engine's actors
    # (``num_cpus`` each), so two engines and the scoring tasks always fit (:func:`check_fits`)
    share = float(ecfg.get("num_cpus", 0.5) or 0.5)
    return max(1, min(int(cpus // 2), int((cpus / 4) // share)))


def check_fits(cfg: dict, engines: list[str], generators: Mapping[str, Any] | None = None) -> None:
    """Fail fast instead of hanging when the execution actors and the model generators' actor
    pools would reserve every CPU of the cluster and leave none for a scoring task, or when an
    engine asks for a custom resource (``engines.<name>.resources``) that no node has (Ray would
    wait forever).

    Args:
        engines: the engines whose execution actors the run starts.
        generators: ``{model: generator}`` of the models the run generates with; a generator
            with ``ray_cpus()`` (the vLLM pool: ``num_actors`` x ``cpus_per_actor``) holds that
            many CPUs for the run.

    Errors: :class:`ConfigError` naming the keys to lower."""
    have = ray.cluster_resources()
    for e in engines:
        for name, amount in dict(((cfg.get("engines") or {}).get(e) or {}).get("resources") or {}).items():
            if float(have.get(name, 0.0)) < float(amount) - 1e-9:
                raise ConfigError(
                    f"engines.{e}.resources asks for {amount:g} of custom resource {name!r}, but the "
                    f"Ray cluster has {float(have.get(name, 0.0)):g}: start a node with "
                    f"resources={{\"{name}\": N}} or drop engines.{e}.resources")
    total = have.get("CPU", 0.0)
    reserved = sum(engine_actors(cfg, e, total)
                   * float(((cfg.get("engines") or {}).get(e) or {}).get("num_cpus", 0.5)) for e in engines)
    pools = {m: float(g.ray_cpus()) for m, g in (generators or {}).items() if callable(getattr(g, "ray_cpus", None))}
    pools = {m: n for m, n in pools.items() if n > 0}
    score = float(cfg["pipeline"].get("score_num_cpus", 0.25))
    if reserved + sum(pools.values()) + score > total + 1e-9:
        held = "".join(f", the actor pool of model {m} {n:g}" for m, n in sorted(pools.items()))
        keys = " or the model's num_actors / cpus_per_actor" if pools else ""
        raise ConfigError(
            f"execution actors reserve {reserved:g} CPUs{held} and a scoring task needs {score:g}, but "
            f"the Ray cluster has {total:g}: lower engines.<name>.actors / engines.<name>.num_cpus"
            f"{keys} or pipeline.score_num_cpus")


class RunCluster:
    """The Ray cluster of one run: :meth:`start` on each need (the first call starts or joins
    it, :func:`init_ray`), :meth:`shutdown` once the run's work on it is done, which shuts it
    down only when this run started it (a joined cluster, or a Ray this process already had,
    is left as it was)."""

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.own = False  # this run started a local cluster

    def start(self) -> None:
        """Start the run's own local cluster or join ``ray.address`` (no-op once Ray is up)."""
        self.own = init_ray(self.cfg) or self.own

    def shutdown(self) -> None:
        """``ray.shutdown()`` when this run started the cluster."""
        if self.own:
            ray.shutdown()
