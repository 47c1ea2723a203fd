"""Shared fixtures. Server gating (skip locally with start instructions, fail in CI through
POLYSQL_REQUIRE_SERVERS=1) and shared-data paths live in ``conftest_servers.py``."""
from __future__ import annotations

import os

import pytest

#: Ray's configurable startup timeouts, raised for every cluster the tests start (this process's
#: and the CLIs' it runs; ``RAY_<setting>`` is read by each Ray process, ray_config_def.h): on a
#: loaded machine a worker or agent process may take minutes to start, and past
#: ``worker_register_timeout_seconds`` (60) the raylet kills the worker, past
#: ``agent_register_timeout_ms`` (30 s) the raylet exits. The fixed waits are retried
#: (:func:`polysql_ray.pipeline.cluster.start_ray`).
for _name, _value in (("RAY_worker_register_timeout_seconds", "600"), ("RAY_agent_register_timeout_ms", "600000")):
    os.environ.setdefault(_name, _value)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray cluster for every end-to-end test of the session (2 CPUs, as on CI, and one
    unit of the custom resource ``polysql_test_node`` for the placement tests)."""
    import ray

    from polysql_ray.pipeline.cluster import start_ray

    # a loaded machine can miss Ray's fixed startup waits: start_ray starts the cluster again, and
    # a lean head (as a run's) starts fewer processes beside the node's agents
    if not ray.is_initialized():
        start_ray(lean_head=True, address="local", num_cpus=2, resources={"polysql_test_node": 1},
                  include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session", autouse=True)
def _drop_server_replicas_made_by_tests(tmp_path_factory):
    """Server replicas are named per results folder (``Manifest.content_tag``), so each test
    run would leave its own: at the end of the session, drop every copy whose manifest lies
    under this session's temporary folders (nothing else is touched)."""
    yield
    from pathlib import Path

    from polysql_ray.replication.base import Manifest, get_writer

    for mpath in Path(tmp_path_factory.getbasetemp()).rglob("manifest.json"):
        try:
            m = Manifest.from_json(mpath.read_text())
            if m.location and m.target_engine in ("postgres", "mysql"):
                get_writer(m.target_engine).drop(m.location)
        except Exception:  # noqa: BLE001 - best-effort cleanup (server may be down)
            pass


def pytest_terminal_summary(terminalreporter):
    """One line per distinct skip reason, with its count, so a reader sees what the run did not
    test and how to get it (pytest -q alone prints only "N skipped")."""
    reasons: dict[str, int] = {}
    for rep in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(rep, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.write_sep("-", f"skipped {sum(reasons.values())}: what was not tested, and why")
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{n:5d}  {reason}")
