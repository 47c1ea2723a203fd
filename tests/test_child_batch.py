"""A batch in the engine child (``ChildEngine.execute_many``, one pipe round trip per batch):
every statement keeps the result and the limits it had one round trip at a time.

The statement in the middle of a batch that blows the memory ceiling, outlives its hard
deadline or loses its child gets today's status and message; the statements around it still
return their own results (the rest in a fresh child). Named points: a statement's answer
received by the parent (a wrapped ``recv``), never a sleep.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, require_data  # noqa: E402
from hostile_resource_cases import cte_doubling  # noqa: E402

from polysql_ray.engines.base import ExecStatus as S, Limits  # noqa: E402

require_data(SPIDER / "database" / "concert_singer")

SOURCE = SPIDER / "database" / "concert_singer" / "concert_singer.sqlite"
LIMITS = Limits(timeout_s=60.0, row_cap=5, max_bytes=1_000_000)
FOREVER = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"


def canary(k: int) -> tuple[str, int]:
    return f"SELECT count(*) + {k} FROM singer", 6 + k


@pytest.fixture
def db(tmp_path):
    src = tmp_path / "concert_singer.sqlite"
    shutil.copy(SOURCE, src)
    return str(src)


def assert_canary(res, k: int) -> None:
    assert res.ok and res.table.column(0)[0].as_py() == canary(k)[1], (res.status, res.error)


def after_first_answer(eng, action) -> None:
    """Run ``action(pid)`` once, when the parent has received the first answer of a batch."""
    pid, real = eng.pid, eng._reader.recv
    fired = []

    def recv():
        out = real()
        if not fired:
            fired.append(True)
            action(pid)
        return out

    eng._reader.recv = recv


def test_batch_answers_as_one_by_one(db, tmp_path):
    from polysql_ray.engines.child import ChildEngine

    sqls = [canary(1)[0], "SELEC 1", "SELECT nope FROM singer", "DELETE FROM singer", "", ";;",
            "SELECT * FROM singer", "SELECT name, singer_id FROM singer ORDER BY 2 LIMIT 3",
            "SELECT 1; SELECT 2", "SELECT 'a', 1.5, NULL, x'00'", canary(2)[0]]
    requests = [(db, s) for s in sqls] + [(str(tmp_path / "missing.sqlite"), "SELECT 1")]
    eng = ChildEngine("sqlite", {})
    try:
        batch = list(eng.execute_many(requests, LIMITS))
        single = [eng.execute(loc, sql, LIMITS) for loc, sql in requests]
    finally:
        eng.close()
    assert len(batch) == len(requests)
    got = [(r.status, r.error, None if r.table is None else r.table.to_pylist()) for r in batch]
    assert got == [(r.status, r.error, None if r.table is None else r.table.to_pylist()) for r in single]
    assert {r.status for r in batch} >= {S.OK, S.SYNTAX, S.SCHEMA, S.REJECTED, S.EMPTY, S.TOO_LARGE,
                                          S.UNAVAILABLE}


def test_memory_blowup_mid_batch_is_its_own_too_large(db):
    """The actor's batch [canary, CTE bomb, canary] without SQLite's own heap limit: the bomb
    is stopped at the ceiling (``too_large``, today's message); both canaries answer."""
    from polysql_ray.pipeline.actors import ExecutionActor

    actor = ExecutionActor("sqlite", {"heap_limit_mb": 0}, {"timeout_s": 60, "memory_mb": 300})
    try:
        *results, stats = actor.execute_batch([(db, canary(1)[0]), (db, cte_doubling(26)), (db, canary(2)[0])])
        assert stats["n"] == 3
        assert_canary(results[0], 1)
        assert results[1].status is S.TOO_LARGE, (results[1].status, results[1].error)
        assert "limits.memory_mb=300 (engine process stopped)" in results[1].error
        assert_canary(results[2], 2)
        assert actor.engine.kills == 1
    finally:
        actor.engine.close()


def test_hard_deadline_mid_batch_is_its_own_timeout(db):
    """The child is frozen (SIGSTOP) once the first answer is in, while it runs a statement
    that never ends: that statement is killed at its hard deadline (``timeout``, today's
    message); the statement after it answers from a fresh child."""
    from polysql_ray.engines.child import ChildEngine

    eng = ChildEngine("sqlite", {})
    limits = Limits(timeout_s=1.0, row_cap=5)
    try:
        assert_canary(eng.execute(db, canary(0)[0], LIMITS), 0)
        after_first_answer(eng, lambda pid: os.kill(pid, signal.SIGSTOP))
        pid = eng.pid
        results = list(eng.execute_many([(db, canary(1)[0]), (db, FOREVER), (db, canary(2)[0])], limits))
        assert len(results) == 3
        assert_canary(results[0], 1)
        assert results[1].status is S.TIMEOUT, (results[1].status, results[1].error)
        assert results[1].error.startswith("interrupted after 1.0s: the engine did not stop at its own "
                                           "interrupt, its process was stopped after ")
        assert_canary(results[2], 2)
        assert eng.pid not in (None, pid) and eng.kills == 1
    finally:
        eng.close()


def test_child_dying_mid_batch_runs_that_statement_again(db):
    """The child is killed from outside once the first answer is in, while it runs the second
    statement: that statement runs again in a fresh child and answers (one death is not its
    failure); killed there too, it is ``runtime``; the statement after it answers either way."""
    from polysql_ray.engines.child import CHILD_DEATHS, ChildEngine

    slow = ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 200000) "
            "SELECT count(*) FROM r")
    for deaths, doomed in ((1, slow), (CHILD_DEATHS, FOREVER)):
        eng = ChildEngine("sqlite", {})
        try:
            assert_canary(eng.execute(db, canary(0)[0], LIMITS), 0)
            after_first_answer(eng, lambda pid: os.kill(pid, signal.SIGKILL))
            pid = eng.pid
            if deaths > 1:  # the fresh children that get it again die too, before answering
                real, killed = eng._send, []

                def send(batch, limits, t0, real=real, killed=killed):
                    out = real(batch, limits, t0)
                    if out is None and batch[0][1] == FOREVER and len(killed) < deaths - 1:
                        killed.append(eng.pid)
                        os.kill(eng.pid, signal.SIGKILL)
                    return out
                eng._send = send
            results = list(eng.execute_many([(db, canary(1)[0]), (db, doomed), (db, canary(2)[0])],
                                            Limits(timeout_s=600)))
            assert len(results) == 3
            assert_canary(results[0], 1)
            if deaths == 1:
                assert results[1].ok and results[1].table.column(0)[0].as_py() == 200000, \
                    (results[1].status, results[1].error)
            else:
                assert results[1].status is S.RUNTIME and \
                    f"died running this statement {CHILD_DEATHS} times" in results[1].error, \
                    (results[1].status, results[1].error)
            assert_canary(results[2], 2)
            assert eng.pid not in (None, pid)
        finally:
            eng.close()


def test_abandoned_batch_leaves_no_stale_answer(db):
    """A caller that stops reading a batch early: the next statement gets its own answer."""
    from polysql_ray.engines.child import ChildEngine

    eng = ChildEngine("sqlite", {})
    try:
        it = eng.execute_many([(db, canary(k)[0]) for k in range(1, 4)], LIMITS)
        assert_canary(next(it), 1)
        it.close()
        assert_canary(eng.execute(db, canary(7)[0], LIMITS), 7)
    finally:
        eng.close()


def test_result_passed_on_keeps_its_ipc_bytes_exactly():
    """A result restored from Arrow IPC (the child's answer in the actor) is passed on with the
    same bytes, not written again; a table replaced after restoring is written afresh."""
    import pickle

    import pyarrow as pa

    from polysql_ray.engines.base import ExecutionResult
    from polysql_ray.engines.sqlite import rows_to_table

    table = rows_to_table(["id", "id", "v"], [(1, 2, "a"), (3, 4, 5.5), (5, 6, None)])
    first = pickle.loads(pickle.dumps(ExecutionResult(S.OK, table)))
    blob = first.__reduce__()[1][1]
    assert first.__reduce__()[1][1] is blob  # the bytes it came with
    second = pickle.loads(pickle.dumps(first))
    assert second.table.equals(table) and second.table.schema.equals(table.schema, check_metadata=True)
    assert second.table.column_names == ["id", "id", "v"]
    first.table = pa.table({"n": [7]})
    assert pickle.loads(pickle.dumps(first)).table.to_pylist() == [{"n": 7}]


def test_result_passed_on_is_held_to_max_bytes_without_decoding():
    """The actor only checks a child's answer against ``max_bytes`` and passes it on: the check
    uses the size the child measured, so the Arrow bytes are decoded only where the table is read
    (the scoring worker), and the verdict of the check is the one the table itself gives."""
    import pickle

    from polysql_ray.engines.base import ExecutionResult
    from polysql_ray.engines.sqlite import rows_to_table

    table = rows_to_table(["name", "n"], [("x" * 40, k) for k in range(50)])
    arrived = pickle.loads(pickle.dumps(ExecutionResult(S.OK, table)))
    assert arrived.nbytes == table.nbytes
    assert Limits(max_bytes=table.nbytes).enforce(arrived) is arrived
    too_big = Limits(max_bytes=table.nbytes - 1).enforce(arrived)
    assert too_big.status is S.TOO_LARGE and str(table.nbytes) in too_big.error
    assert arrived._table is None  # nothing above read the table
    passed_on = pickle.loads(pickle.dumps(arrived))
    assert arrived._table is None and passed_on.nbytes == table.nbytes
    assert passed_on == ExecutionResult(S.OK, table) and passed_on.table.equals(table)


def test_child_answer_reaches_the_actor_undecoded(db):
    from polysql_ray.engines.child import ChildEngine

    eng = ChildEngine("sqlite", {})
    try:
        res = eng.execute(db, "SELECT name, age FROM singer ORDER BY age LIMIT 3", LIMITS)
        assert res.ok and res._table is None and res.nbytes > 0
        assert LIMITS.enforce(res) is res and res._table is None
        assert res.table.num_rows == 3 and [c.lower() for c in res.table.column_names] == ["name", "age"]
    finally:
        eng.close()
