"""The run's own local Ray cluster (cluster.init_ray): which head processes it starts.

Each case starts a fresh local cluster in a child interpreter (init_ray refuses to start a second
one in a process that already has Ray, e.g. the session fixture's) and lists the command lines of
the child's descendant processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys
from polysql_ray.pipeline.cluster import init_ray
import ray

init_ray({"ray": {"address": None, "include_dashboard": False, **json.loads(sys.argv[1])}})

@ray.remote
def pid():
    return os.getpid()

worker = ray.get(pid.remote())  # the cluster runs work
kids = {}
for d in os.listdir("/proc"):
    if d.isdigit():
        try:
            kids.setdefault(int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except OSError:
            pass
todo, cmds = [os.getpid()], []
while todo:
    for k in kids.get(todo.pop(), []):
        todo.append(k)
        try:
            cmds.append(open(f"/proc/{k}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
from ray._private import node, parameter
patched = hasattr(parameter.RayParams.__init__, "__wrapped__") or node.Node.start_api_server.__name__ == "<lambda>"
print(json.dumps({"cmds": cmds, "worker": worker, "patched": patched}))
ray.shutdown()
"""


def _head_processes(ray_cfg: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(ray_cfg)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["monitor"] = any("autoscaler/_private/monitor.py" in c for c in res["cmds"])
    res["log_monitor"] = any("log_monitor.py" in c for c in res["cmds"])
    res["api_server"] = any("dashboard/dashboard.py" in c for c in res["cmds"])
    return res


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("ray_cfg, monitor, log_monitor, api_server", [
    ({}, False, False, False),                             # default: lean head, no log forwarding
    ({"log_to_driver": True}, False, True, False),         # forwarding worker output needs the log monitor
    ({"lean_head": False}, True, True, True),              # Ray's stock head
])
def test_local_cluster_head_processes(ray_cfg, monitor, log_monitor, api_server):
    res = _head_processes(ray_cfg)
    assert (res["monitor"], res["log_monitor"], res["api_server"]) == (monitor, log_monitor, api_server)
    assert res["worker"] > 0 and any("raylet" in c for c in res["cmds"])
    assert not res["patched"]  # after ray.init the parameter defaults are Ray's again
