"""Innocent predictions never pay for a neighbour's runaway or a hung server (issue 23, item 5).

On each warehouse stand-in (fakesnow for Snowflake, bqemulator for BigQuery: neither can cancel
a running statement, and bqemulator runs every job on one DuckDB connection, so a runaway holds
it for everyone), started privately by the test on its own port:

* a runaway followed by 10 innocent predictions: none of the ten is charged (``timeout`` or
  any failure): each is ``ok`` with the source's answer, or ``unavailable`` (rescored by the
  next run) if the server did not come back within the health wait;
* the stand-in frozen (SIGSTOP) before a statement is sent: that statement and the next are
  ``unavailable``, never ``timeout``; thawed (SIGCONT), statements are ``unavailable`` until the
  stand-in answers a probe, then ``ok``.

Events are ordered by signals sent at named points (before the statement), never by sleeps;
assertions are on statuses only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import require_data  # noqa: E402

from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402

from tests.warehouse_targets import SOURCE, lazy_targets  # noqa: E402

require_data(SOURCE.parent)

ENGINES = ("snowflake", "bigquery")
#: The runaway's limit (watchdog at 1 + 4 s), and the innocents' own: generous, so that only a held
#: or hung stand-in, never a loaded machine, could make one of them late (bqemulator held by the
#: runaway kept the next ones waiting far past 10 s before the health gate).
LIMITS = Limits(timeout_s=1.0, row_cap=1000, max_bytes=1_000_000)
INNOCENT_LIMITS = Limits(timeout_s=10.0, row_cap=1000, max_bytes=1_000_000)
#: The runaway: 6**11 * 9 = 3.3e9 joined rows (eleven singer tables and stadium), ~3x the watchdog's
#: deadline (1 + 4 s) on an idle core, yet bounded, so a stand-in that cannot cancel it is free again
#: within minutes (hostile_cases.CROSS_13, 1.3e10 rows, holds bqemulator for several minutes here).
RUNAWAY = ("SELECT sum(" + " + ".join(f"t{i}.Singer_ID" for i in range(11)) + " + s.Capacity) FROM "
           + ", ".join(f"singer t{i}" for i in range(11)) + ", stadium s")
#: Statements sent after the thaw until one is ok (each waits one 2 s probe at most while suspect).
THAW_STATEMENTS = 60
#: Ten innocent predictions, each with a different answer (checked against the SQLite source).
INNOCENT = [f"SELECT count(*) FROM singer WHERE Age > {age}" for age in range(20, 70, 5)]


def source_answer(sql: str):
    with contextlib.closing(sqlite3.connect(f"file:{SOURCE}?mode=ro", uri=True)) as con:
        return con.execute(sql).fetchone()[0]


def standin_pid(engine) -> int:
    """Process id of the stand-in the engine talks to: the process holding the socket that listens
    on the engine's port (``/proc/net/tcp``, then each process's open sockets)."""
    s = engine.settings
    port = int(s["api_endpoint"].rsplit(":", 1)[1]) if isinstance(s, dict) else int(s.port)
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in list(f)[1:]:
                cols = line.split()
                if int(cols[1].rsplit(":", 1)[1], 16) == port and cols[3] == "0A":  # LISTEN
                    inodes.add(f"socket:[{cols[9]}]")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                    return int(proc.name)
    raise LookupError(f"no process listens on port {port}")


def with_settings(engine, **extra):
    """A second engine of the same class and server, with ``extra`` settings."""
    from polysql_ray.engines.registry import make_engine

    s = engine.settings
    if isinstance(s, dict):
        return make_engine(engine.name, **{**s, **extra})
    return type(engine)(dataclasses.replace(s, extra={**s.extra, **extra}))


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    """Each engine's stand-in started on first use (:func:`tests.warehouse_targets.lazy_targets`)."""
    with lazy_targets(tmp_path_factory) as get:
        yield get


@pytest.mark.parametrize("engine_name", ENGINES)
def test_runaway_then_ten_innocent_predictions_none_charged(targets, engine_name):
    t = targets(engine_name)
    runaway = t.execute(RUNAWAY, LIMITS)
    # its own timeout, or unavailable when the stand-in it holds cannot prove itself healthy
    assert runaway.status in (S.TIMEOUT, S.UNAVAILABLE), (runaway.status, runaway.error)
    statuses = []
    for sql in INNOCENT:
        res = t.execute(sql, INNOCENT_LIMITS)
        statuses.append(res.status)
        assert res.status in (S.OK, S.UNAVAILABLE), (sql, res.status, res.error)
        if res.ok:
            assert res.table.column(0)[0].as_py() == source_answer(sql), sql
    charged = [s for s in statuses if s is not S.OK and s is not S.UNAVAILABLE]
    assert charged == []
    assert t.engine.health == "healthy" or S.UNAVAILABLE in statuses


@pytest.mark.parametrize("engine_name", ENGINES)
def test_frozen_standin_never_leaves_a_timeout(targets, engine_name):
    t = targets(engine_name)
    engine = with_settings(t.engine, health_probe_s=2, health_wait_s=1)
    loc = t.replica.location
    try:
        warm = engine.execute(loc, INNOCENT[0], INNOCENT_LIMITS)
        assert warm.ok, (warm.status, warm.error)
        pid = standin_pid(engine)
        os.kill(pid, signal.SIGSTOP)  # the named point: frozen before the statement is sent
        try:
            hung = engine.execute(loc, INNOCENT[1], LIMITS)
            assert hung.status is S.UNAVAILABLE, (hung.status, hung.error)
            assert engine.health == "suspect"
            still = engine.execute(loc, INNOCENT[2], LIMITS)
            assert still.status is S.UNAVAILABLE, (still.status, still.error)
        finally:
            os.kill(pid, signal.SIGCONT)
        # thawed: the engine sends again once a probe is answered within its 2 s; a loaded machine's
        # stand-in (working off what came while frozen) may miss a few: unavailable, never charged
        for _ in range(THAW_STATEMENTS):
            back = engine.execute(loc, INNOCENT[3], INNOCENT_LIMITS)
            assert back.status in (S.OK, S.UNAVAILABLE), (back.status, back.error)
            if back.ok:
                break
        assert back.ok and back.table.column(0)[0].as_py() == source_answer(INNOCENT[3]), (back.status, back.error)
        assert engine.health == "healthy"
    finally:
        engine.close()
