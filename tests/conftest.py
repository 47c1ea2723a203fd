"""Shared fixtures. Server gating (skip locally with start instructions, fail in CI through
POLYSQL_REQUIRE_SERVERS=1) and shared-data paths live in ``conftest_servers.py``."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray cluster for every end-to-end test of the session (2 CPUs, as on CI, and one
    unit of the custom resource ``polysql_test_node`` for the placement tests)."""
    import ray

    # Ray gives its raylet a fixed 30 s to register (ray/_private/node.py); a loaded machine can
    # take longer, so that one startup failure is retried (a bound on a condition, not a timing)
    for attempt in range(5):
        if ray.is_initialized():
            break
        try:
            ray.init(address="local", num_cpus=2, resources={"polysql_test_node": 1},
                     include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except Exception as exc:  # noqa: BLE001 — only Ray's startup timeout is retried
            ray.shutdown()
            if "timed out during startup" not in str(exc) or attempt == 4:
                raise
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
