"""Starting a local Ray cluster on a loaded machine (:func:`polysql_ray.pipeline.cluster.start_ray`).

Ray gives a new node a fixed 30 s to register with its GCS. Here the GCS is made to answer the
registration 45 s late (Ray's own fault injection, ``RAY_testing_asio_delay_us``, in
``ray_config_def.h``), so every attempt misses the wait, however idle or loaded the machine is:
each attempt is made, what it started is killed, and the last failure is raised.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, logging
from polysql_ray.pipeline import cluster
import ray

cluster.START_ATTEMPTS = 2
warnings = []
logging.getLogger("polysql_ray.pipeline.cluster").addHandler(
    type("H", (logging.Handler,), {"emit": lambda self, r: warnings.append(r.getMessage())})())
before = cluster._descendants()
try:
    cluster.start_ray(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    error = None
except Exception as exc:
    error = str(exc)
left = [p for p, t in cluster._descendants().items() if before.get(p) != t]
print(json.dumps({"error": error, "warnings": warnings, "left": left, "initialized": ray.is_initialized()}))
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_startup_timeout_is_retried_and_each_attempt_cleaned_up():
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               RAY_testing_asio_delay_us="NodeInfoGcsService.grpc_server.RegisterNode=45000000:45000000")
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["error"] and "timed out during startup" in res["error"], res
    assert res["warnings"] == ["Ray startup timed out (attempt 1 of 2); starting again"], res
    assert res["left"] == [] and not res["initialized"], res  # nothing of either attempt runs on


INTERRUPTED = r"""
import json
from polysql_ray.pipeline import cluster
import ray
import ray._private.worker as worker

def interrupted(*args, **kwargs):  # Ctrl-C lands once the node's processes run, before the driver joins
    raise KeyboardInterrupt
worker.connect = interrupted
before = cluster._descendants()
try:
    cluster.start_ray(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    error = None
except KeyboardInterrupt:
    error = "KeyboardInterrupt"
left = [p for p, t in cluster._descendants().items() if before.get(p) != t]
print(json.dumps({"error": error, "left": left, "initialized": ray.is_initialized()}))
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_ctrl_c_inside_ray_init_leaves_no_process_of_the_cluster():
    """The interrupt is raised on (a run stops with exit 130), and the processes the start had
    launched (GCS, raylet, agents) are gone with it: no reaper runs yet at that point."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, "-c", INTERRUPTED], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res == {"error": "KeyboardInterrupt", "left": [], "initialized": False}, res
