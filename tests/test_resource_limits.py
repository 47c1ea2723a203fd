"""Time and memory limits hold on every engine (issue 23, item 6): statuses, never durations.

Every attack of ``hostile_resource_cases.py`` runs as the execution actor runs it: embedded
engines (SQLite, DuckDB, ClickHouse/chdb) in their child process (``engines/child.py``: hard
deadline at ``timeout_s + min(timeout_s / 2, 30)``, memory ceiling ``limits.memory_mb``), server
engines on the shared PostgreSQL/MariaDB with their server-side timeouts and watchdogs. Each
case asserts a typed, contained status (``timeout``/``too_large``, never a dead engine), and that
the next prediction on the same engine still answers right. How long each took against its
limit is measured by ``benchmarks/resource_limits.py``, not here.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, require_data  # noqa: E402
from hostile_resource_cases import RESOURCE_CASES, cte_doubling  # noqa: E402

from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402

require_data(SPIDER / "database" / "concert_singer")

SOURCE = SPIDER / "database" / "concert_singer" / "concert_singer.sqlite"
LIMITS = Limits(timeout_s=2.0, row_cap=1000, max_bytes=1_000_000)
#: The canaries' own limit: generous, so a loaded machine never turns one into a timeout.
CANARY_LIMITS = Limits(timeout_s=60.0, row_cap=1000, max_bytes=1_000_000)
CANARY = ("SELECT count(*) FROM singer", 6)
EMBEDDED = ("sqlite", "duckdb", "clickhouse")


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """engine name -> (engine as the actor runs it, replica location); built on first use."""
    import contextlib

    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.replication.base import replicate

    d = tmp_path_factory.mktemp("resource")
    src_file = d / "concert_singer.sqlite"
    shutil.copy(SOURCE, src_file)
    src = SourceDatabase("resource", "concert_singer", "sqlite", str(src_file))
    cache: dict = {}
    with contextlib.ExitStack() as stack:
        def get(name):
            if name not in cache:
                if name in EMBEDDED:
                    from polysql_ray.engines.child import ChildEngine

                    engine = ChildEngine(name, {})
                    location = str(src_file) if name == "sqlite" else replicate(src, name, d / "replicas").location
                else:
                    from conftest_servers import register_server_replication, require_servers

                    require_servers(name)
                    register_server_replication()
                    from polysql_ray.engines.registry import make_engine

                    engine = make_engine(name, pool_size=1)
                    location = replicate(src, name, d / "replicas").location
                stack.callback(engine.close)
                cache[name] = (engine, location)
            return cache[name]

        yield get


@pytest.mark.parametrize("case", RESOURCE_CASES, ids=[f"{c.engine}-{c.name}" for c in RESOURCE_CASES])
def test_resource_attack_is_contained(targets, case):
    engine, location = targets(case.engine)
    res = LIMITS.enforce(engine.execute(location, case.sql, LIMITS))
    assert res.status in case.expect, (res.status, res.error)
    if res.status is S.OK:  # only where the engine refuses the value itself: NULL, not the bomb
        assert res.table.num_rows == 1 and res.table.column(0).null_count == 1, res.table
    canary = engine.execute(location, CANARY[0], CANARY_LIMITS)
    assert canary.ok and canary.table.column(0)[0].as_py() == CANARY[1], (canary.status, canary.error)


def test_memory_ceiling_is_the_statements_too_large_not_a_dead_actor(tmp_path):
    """SQLite without its own heap limit: the actor's child grows past ``memory_mb`` and is
    stopped; the statement is ``too_large``, the actor answers the next statement. The time
    limit is far away (60 s) so that only the ceiling can stop the bomb."""
    from polysql_ray.pipeline.actors import ExecutionActor

    src = tmp_path / "concert_singer.sqlite"
    shutil.copy(SOURCE, src)
    actor = ExecutionActor("sqlite", {"heap_limit_mb": 0}, {"timeout_s": 60, "memory_mb": 300})
    try:
        res = actor.execute_one(str(src), cte_doubling(26))
        assert res.status is S.TOO_LARGE, (res.status, res.error)
        assert "limits.memory_mb=300" in res.error
        again = actor.execute_one(str(src), CANARY[0])
        assert again.ok and again.table.column(0)[0].as_py() == CANARY[1], (again.status, again.error)
    finally:
        actor.engine.close()


def test_sqlite_engine_limits_in_process(tmp_path):
    """The engine-side layers alone (no child process): SQLITE_LIMIT_LENGTH makes a value larger
    than ``max_bytes`` ``too_large`` at once; the hard heap limit makes a prepare-time CTE bomb
    ``too_large`` (SQLITE_NOMEM) instead of growing without bound."""
    from polysql_ray.engines.sqlite import SqliteEngine

    src = tmp_path / "concert_singer.sqlite"
    shutil.copy(SOURCE, src)
    eng = SqliteEngine(heap_limit_mb=64)
    try:
        big = eng.execute(str(src), "SELECT length(randomblob(2000000))", LIMITS)
        assert big.status is S.TOO_LARGE and "too big" in big.error, (big.status, big.error)
        ok = eng.execute(str(src), "SELECT length(randomblob(500000))", LIMITS)
        assert ok.ok and ok.table.column(0)[0].as_py() == 500000
        bomb = eng.execute(str(src), cte_doubling(22), Limits(timeout_s=600))
        assert bomb.status is S.TOO_LARGE, (bomb.status, bomb.error)
        canary = eng.execute(str(src), CANARY[0], CANARY_LIMITS)
        assert canary.ok and canary.table.column(0)[0].as_py() == CANARY[1]
    finally:
        eng.close()
        import sqlite3

        with sqlite3.connect(":memory:") as con:  # the limit is process-wide: lift it again
            con.execute("PRAGMA hard_heap_limit=0")


def _kill_when_sent(eng, sql: str, times: int) -> list[int]:
    """Named point: SIGKILL the child right after a batch starting with ``sql`` is sent to it
    (before it can answer), the first ``times`` times; returns the pids killed."""
    import os
    import signal

    real, killed = eng._send, []

    def send_then_kill(batch, limits, t0):
        out = real(batch, limits, t0)
        if out is None and batch[0][1] == sql and len(killed) < times:
            killed.append(eng.pid)
            os.kill(eng.pid, signal.SIGKILL)
        return out

    eng._send = send_then_kill
    return killed


def test_child_killed_twice_mid_statement_is_runtime_and_replaced(tmp_path):
    """A statement whose child dies by itself (a crash, or a kill from outside) runs again in a
    fresh child; dying there too (``CHILD_DEATHS``) makes it ``runtime``, with both exit codes,
    and the next statement gets a fresh child."""
    from polysql_ray.engines.child import CHILD_DEATHS, ChildEngine

    src = tmp_path / "concert_singer.sqlite"
    shutil.copy(SOURCE, src)
    runaway = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    eng = ChildEngine("sqlite", {})
    try:
        assert eng.execute(str(src), CANARY[0], CANARY_LIMITS).ok
        killed = _kill_when_sent(eng, runaway, CHILD_DEATHS)
        res = eng.execute(str(src), runaway, Limits(timeout_s=600))
        assert res.status is S.RUNTIME, (res.status, res.error)
        assert f"died running this statement {CHILD_DEATHS} times" in res.error and "exit -9, exit -9" in res.error
        assert len(set(killed)) == CHILD_DEATHS
        again = eng.execute(str(src), CANARY[0], CANARY_LIMITS)
        assert again.ok and eng.pid not in (None, *killed)
    finally:
        eng.close()


def test_child_killed_once_is_not_the_statements_failure(tmp_path):
    """One death of the child (the OOM killer, an operator's kill -9) proves nothing about the
    statement: it runs again in a fresh child and gets its own result (infrastructure trouble
    is never a verdict)."""
    from polysql_ray.engines.child import ChildEngine

    src = tmp_path / "concert_singer.sqlite"
    shutil.copy(SOURCE, src)
    slow = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 300000) "
            "SELECT count(*) FROM r")
    eng = ChildEngine("sqlite", {})
    try:
        killed = _kill_when_sent(eng, slow, 1)
        res = eng.execute(str(src), slow, Limits(timeout_s=600))
        assert res.ok and res.table.column(0)[0].as_py() == 300000, (res.status, res.error)
        assert len(killed) == 1
        again = eng.execute(str(src), CANARY[0], CANARY_LIMITS)
        assert again.ok and eng.pid not in (None, killed[0])
    finally:
        eng.close()
