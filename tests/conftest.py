"""Shared fixtures: paths to the real shared data, the quickstart benchmark, a Ray session,
and the server gate (skip with instructions locally, fail in CI via POLYSQL_REQUIRE_SERVERS=1)."""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POLYSQL_SHARED", REPO.parent / "shared")).resolve()

SERVER_HELP = {
    "postgres": ("127.0.0.1", 5432,
                 "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start"),
    "mysql": ("127.0.0.1", 3306,
              "start it with: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd"),
}


def server_reachable(name: str) -> bool:
    host, port, _ = SERVER_HELP[name]
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require_server(name: str) -> None:
    """Skip (locally) or fail (POLYSQL_REQUIRE_SERVERS=1, as in CI) when a server is down."""
    if server_reachable(name):
        return
    host, port, how = SERVER_HELP[name]
    msg = f"{name} server not reachable at {host}:{port}; {how}"
    if os.environ.get("POLYSQL_REQUIRE_SERVERS") == "1":
        pytest.fail(msg + " (POLYSQL_REQUIRE_SERVERS=1: these tests are mandatory)")
    pytest.skip(msg)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` (or $POLYSQL_SHARED/data); skips when absent."""
    data = SHARED / "data"
    if not (data / "spider" / "dev.json").exists():
        pytest.skip(f"shared data not found at {data}; set POLYSQL_SHARED=<folder holding data/>")
    return data


@pytest.fixture(scope="session")
def spider_root(shared_data) -> Path:
    return shared_data / "spider"


@pytest.fixture(scope="session")
def postgres_server():
    require_server("postgres")
    return SERVER_HELP["postgres"][:2]


@pytest.fixture(scope="session")
def mysql_server():
    require_server("mysql")
    return SERVER_HELP["mysql"][:2]


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray cluster for every end-to-end test of the session."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
