"""Engine scratch folders (``polysql_ray.engines.scratch``): removed when their process ends,
and, when the process was killed and so ran no exit hook, swept by the next engine started on
the same node. Real processes: a child Python, and a DuckDB execution actor on Ray."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from polysql_ray.engines.scratch import process_alive

ROOT = Path(__file__).resolve().parents[1]

# a child that makes a DuckDB engine (its spill folder) under TMPDIR, prints the folder, then
# closes it / exits normally / waits to be killed
CHILD = """
import os, signal, sys
from polysql_ray.engines.duckdb import DuckDBEngine
e = DuckDBEngine()
print(e._temp_dir, flush=True)
how = sys.argv[1]
if how == "close":
    e.close()
elif how == "wait":
    sys.stdin.read()
"""


def _child(root: Path, how: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TMPDIR": str(root),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", CHILD, how], env=env, capture_output=True, text=True,
                          timeout=600)


def _folders(root: Path) -> list[str]:
    return sorted(p.name for p in root.glob("polysql-duckdb-*"))


def test_folder_is_removed_on_close_and_on_exit(tmp_path):
    for how in ("close", "exit"):
        p = _child(tmp_path, how)
        assert p.returncode == 0, p.stderr
        made = Path(p.stdout.split()[0])
        assert made.parent == tmp_path and made.name.startswith("polysql-duckdb-")
        assert not made.exists(), how
    assert _folders(tmp_path) == []


def test_killed_owners_leave_their_folders_until_the_next_engine_sweeps_them(tmp_path, capsys):
    env = {**os.environ, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    owners = [subprocess.Popen([sys.executable, "-c", CHILD, "wait"], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True) for _ in range(3)]
    made = [Path(o.stdout.readline().strip()) for o in owners]  # each has made its folder
    before_kill = _folders(tmp_path)
    for o in owners:
        o.send_signal(signal.SIGKILL)
        o.wait()
    after_kill = _folders(tmp_path)
    assert after_kill == before_kill == sorted(m.name for m in made)  # SIGKILL: no exit hook ran
    assert len(after_kill) == 3
    mine = tmp_path / f"polysql-duckdb-{os.getpid()}-live"  # a live owner's folder is kept
    mine.mkdir()
    p = _child(tmp_path, "exit")  # the next engine on this node
    assert p.returncode == 0, p.stderr
    after_sweep = _folders(tmp_path)
    assert after_sweep == [mine.name]
    with capsys.disabled():
        print(f"\nduckdb scratch folders: 3 owners alive {len(before_kill)}, after SIGKILL {len(after_kill)}, "
              f"after the next engine's sweep {len(after_sweep)} (a live owner's, kept)")


def test_killed_execution_actor_folder_is_swept_by_the_next_actor(ray_session, tmp_path, capsys):
    """A DuckDB execution actor killed by ``ray.kill`` (no exit hook runs) leaves its folder;
    the next DuckDB actor started on the node removes it."""
    import ray

    from polysql_ray.pipeline.actors import ExecutionActor

    env = {"env_vars": {"TMPDIR": str(tmp_path)}}  # the actors' temp folder: this test's own
    cls = ray.remote(ExecutionActor).options(num_cpus=0.5, runtime_env=env, max_restarts=0)
    before = _folders(tmp_path)
    # the engine inside the actor (by default it runs in a child process of the actor, which
    # owns the folder then; a child orphaned by a killed actor exits by itself, engines/child.py)
    in_actor = {"child_process": False}
    first = cls.remote("duckdb", in_actor, {"timeout_s": 60})
    assert ray.get(first.ping.remote(), timeout=600) == "duckdb"
    with_actor = _folders(tmp_path)
    assert len(with_actor) == len(before) + 1
    pid = int(with_actor[0].split("-")[2])
    ray.kill(first)
    deadline = time.monotonic() + 600  # the OS says when the process is gone
    while process_alive(pid):
        assert time.monotonic() < deadline, f"actor process {pid} still alive after ray.kill"
        time.sleep(0.1)
    after_kill = _folders(tmp_path)
    assert after_kill == with_actor  # killed: its exit hook never ran
    second = cls.remote("duckdb", in_actor, {"timeout_s": 60})
    assert ray.get(second.ping.remote(), timeout=600) == "duckdb"
    after_next = _folders(tmp_path)
    assert len(after_next) == 1 and after_next != after_kill  # only the live actor's folder
    ray.kill(second)
    with capsys.disabled():
        print(f"\nduckdb actor folders: before {len(before)}, with an actor {len(with_actor)}, "
              f"after ray.kill {len(after_kill)}, after the next actor's start {len(after_next)}")
