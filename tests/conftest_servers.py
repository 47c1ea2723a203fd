"""Helpers shared by the server-engine tests (PostgreSQL, MariaDB/MySQL); not a conftest.

Import from a test module::

    from conftest_servers import require_servers, SPIDER, SPIDERMAN

* :func:`require_servers` - module-level skip (with instructions to start the servers) when
  a server is unreachable, or a hard failure when ``POLYSQL_REQUIRE_SERVERS=1``.
* :func:`register_server_replication` - adds the server readers/writers to
  ``replication.base.READERS/WRITERS`` when the lead has not yet listed them there.
* ``SHARED`` / ``SPIDER`` / ``SPIDERMAN`` - the shared real data (``POLYSQL_SHARED`` or
  ``<repo>/../shared``); tests skip when absent.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from polysql_ray.errors import SERVER_START

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POLYSQL_SHARED", REPO.parent / "shared"))
SPIDER = SHARED / "data" / "spider"
SPIDERMAN = SHARED / "data" / "spiderman"

SERVERS = {
    "postgres": ("127.0.0.1", 5432, SERVER_START["postgres"]),
    "mysql": ("127.0.0.1", 3306, SERVER_START["mysql"]),
}


def server_reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_servers(*names: str) -> None:
    """Skip the calling module when a server in ``names`` is unreachable (fail instead when
    env ``POLYSQL_REQUIRE_SERVERS=1``). Call at module level."""
    missing = [n for n in names if not server_reachable(*SERVERS[n][:2])]
    if not missing:
        return
    how = "; ".join(f"{n} at {SERVERS[n][0]}:{SERVERS[n][1]}: start with `{SERVERS[n][2]}`"
                    for n in missing)
    msg = f"server(s) unreachable: {how}"
    if os.environ.get("POLYSQL_REQUIRE_SERVERS") == "1":
        pytest.fail(msg + " (POLYSQL_REQUIRE_SERVERS=1)", pytrace=False)
    pytest.skip(msg, allow_module_level=True)


def require_data(path: Path) -> Path:
    """Skip when a shared-data path is absent."""
    if not path.exists():
        pytest.skip(f"shared data not found at {path} (set POLYSQL_SHARED)", allow_module_level=True)
    return path


def register_server_replication() -> None:
    """Make sure ``replicate()`` knows the server writers and the MySQL source reader."""
    from polysql_ray.replication import base

    base.WRITERS.setdefault("postgres", "polysql_ray.replication.postgres:PostgresWriter")
    base.WRITERS.setdefault("mysql", "polysql_ray.replication.mysql:MySQLWriter")
    base.READERS.setdefault("mysql", "polysql_ray.replication.mysql_source:MySQLReader")
