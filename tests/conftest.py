"""Shared fixtures. Server gating (skip locally with start instructions, fail in CI through
POLYSQL_REQUIRE_SERVERS=1) and shared-data paths live in ``conftest_servers.py``."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray cluster for every end-to-end test of the session (2 CPUs, as on CI)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    yield ray
    ray.shutdown()
