"""Spider ``concert_singer`` on each warehouse engine, for the hostile-SQL suite and its table.

Not a test module. :func:`warehouse` yields a :class:`Target` (engine, replica, writer) for
``clickhouse`` (chdb, in-process), ``snowflake`` (fakesnow on loopback) or ``bigquery``
(bqemulator on loopback), built from a private copy of the SQLite source. The stand-ins enforce
no timeout, so their client-side watchdog decides runaways; it gives up at ``timeout_s +
client_grace_s`` = ``timeout_s + 4`` s here (a stand-in on a loaded 2-core machine can take over
2 s for an ordinary statement, so a shorter grace turns canaries into timeouts).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tests.conftest_servers import SPIDER

SOURCE = SPIDER / "database" / "concert_singer" / "concert_singer.sqlite"

#: Seconds the stand-in engines' watchdog waits beyond ``timeout_s``.
GRACE_S = 4

#: Run after every attack; must equal its value on the SQLite source (data intact).
CHECKSUM_SQL = "SELECT count(*), sum(Age) FROM singer"


@dataclass
class Target:
    """One engine holding a verified replica of ``concert_singer``."""

    name: str
    engine: object
    replica: object
    writer: object
    settings: dict | None = None  # connection settings of the stand-in (None: chdb)

    def execute(self, sql: str, limits):
        """The engine's typed result, with ``limits.max_bytes`` enforced as the pipeline does."""
        return limits.enforce(self.engine.execute(self.replica.location, sql, limits))

    def intact(self) -> bool:
        """The replica's content fingerprint is the certified one."""
        return self.writer.fingerprint(self.replica.location) == self.replica.manifest.copy_fingerprint


def source_checksum(path: Path = SOURCE) -> tuple:
    """:data:`CHECKSUM_SQL` on the SQLite source."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
        return tuple(con.execute(CHECKSUM_SQL).fetchone())


@contextlib.contextmanager
def warehouse(name: str, workdir: Path, dataset: str = "hostile"):
    """Yield a :class:`Target` for engine ``name``; stops its stand-in afterwards."""
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.registry import make_engine
    from polysql_ray.replication.base import get_writer, replicate

    from tests.standins import bqemulator_server, fakesnow_server

    if not SOURCE.exists():
        import pytest

        pytest.skip(f"shared data not found at {SOURCE} (set POLYSQL_SHARED)")
    workdir.mkdir(parents=True, exist_ok=True)
    src_file = workdir / "concert_singer.sqlite"
    shutil.copy(SOURCE, src_file)
    src = SourceDatabase(dataset, "concert_singer", "sqlite", str(src_file))
    with contextlib.ExitStack() as stack:
        if name == "clickhouse":
            settings = {}
        elif name == "snowflake":
            os.environ.setdefault("POLYSQL_TEST_FAKESNOW_PW", "fakesnow-accepts-any")  # never a real secret
            host, port = stack.enter_context(fakesnow_server())
            settings = {"host": host, "port": port, "protocol": "http", "account": "fakesnow", "user": "fake",
                        "admin_user": "fake", "password_env": "POLYSQL_TEST_FAKESNOW_PW",
                        "admin_password_env": "POLYSQL_TEST_FAKESNOW_PW"}
        elif name == "bigquery":
            host, port = stack.enter_context(bqemulator_server())
            settings = {"project": "polysql", "api_endpoint": f"http://{host}:{port}", "anonymous": True}
        else:
            raise ValueError(f"not a warehouse engine: {name}")
        replica = replicate(src, name, workdir / "replicas", settings=settings or None)
        engine_settings = {**settings, "client_grace_s": GRACE_S, **({"pool_size": 1} if name == "snowflake" else {})}
        engine = make_engine(name, **({} if name == "clickhouse" else engine_settings))
        stack.callback(engine.close)
        yield Target(name, engine, replica, get_writer(name, settings or None), settings or None)


#: engine -> the driver module its client needs (a test of that engine skips without it)
DRIVERS = {"clickhouse": "chdb", "snowflake": "snowflake.connector", "bigquery": "google.cloud.bigquery"}


@contextlib.contextmanager
def lazy_targets(tmp_path_factory):
    """Yields ``get(name) -> Target``: each engine's stand-in and replica started on first use
    (so a run of one engine's cases starts one stand-in), all stopped on exit; skips an engine
    whose driver is not installed."""
    import pytest

    with contextlib.ExitStack() as stack:
        cache: dict = {}

        def get(name: str):
            if name not in cache:
                pytest.importorskip(DRIVERS[name])
                cache[name] = stack.enter_context(warehouse(name, tmp_path_factory.mktemp(name)))
            return cache[name]

        yield get
