"""Ray actors and tasks of the pipeline: execution actors per engine, Arrow scoring tasks.

* :class:`ExecutionActor` holds one engine (and so its connections / open database handles)
  and runs batches of SQL one statement at a time inside the engine sandbox. The number of
  actors per engine is the engine's bounded concurrency (``engines.<name>.actors``).
* :func:`score_batch` turns a batch of work items plus their execution results into one Arrow
  table of score rows (:data:`polysql_ray.store.schema.SCORE_SCHEMA`).
"""
from __future__ import annotations

import collections
import datetime as dt
import time
from typing import Any

import ray

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.faults import FaultPoints


class ExecutionActor:
    """Runs SQL on one engine. Created as a Ray actor by the driver (restartable: it holds no
    state beyond connections, so Ray's ``max_restarts``/``max_task_retries`` can replay a batch).

    Args:
        engine: engine name (``sqlite``, ``duckdb`` ...).
        settings: engine settings from ``engines.<name>`` (minus scheduling keys).
        limits: per-query timeout (s), row cap, result bytes, SQL length.
        retry_s: for engines whose ``UNAVAILABLE`` is transient (servers: connection refused,
            lost, restarting), how long one outage is retried with exponential backoff before
            the statement is returned ``UNAVAILABLE`` (stored as ``unavailable``, not a verdict).
            It is the one budget of an outage: such an engine's own health gate
            (:class:`polysql_ray.engines.servers.ServerEngine`, ``health_wait_s``) is set to
            probe once per statement and not to wait, so the outage ends at the first statement
            after the server answers a probe again, and a run with ``retry_s=1`` never waits the
            gate's 120 s (the two budgets once disagreed: a server down for good held the first
            statement ``health_wait_s`` whatever ``pipeline.unavailable_retry_s`` said).
        spec: the engine's registry row, :func:`polysql_ray.engines.registry.engine_spec`
            ``(engine)`` (the driver passes it, so an actor of a child-process engine imports
            no engine module); None looks it up here, which imports them.

    Fault injection (tests only): ``settings["_fault_exit_on"] = SQL`` makes the actor's
    process exit abruptly when asked to run exactly that text, as an engine crash would;
    ``settings["_fault_points"] = folder`` enables the named points ``execute`` (before each
    statement) and ``unavailable`` (an outage met, before its retry) of
    :mod:`polysql_ray.faults`, where a test observes or holds the actor.

    Child process: an embedded engine (``child_process`` in its declaration) runs in a child
    process of the actor (:class:`polysql_ray.engines.child.ChildEngine`), stopped at
    ``timeout_s + min(timeout_s / 2, 30)`` (``timeout``) or past ``limits.memory_mb`` of resident
    memory (``too_large``): a statement its engine cannot interrupt never outlives its limit
    by more than 2x, and never kills the actor. ``settings["child_process"] = False`` keeps it
    in the actor's own process.

    Replicas per node: ``settings["_replica_recipes"] = {location: Recipe}`` (from
    :func:`polysql_ray.replication.pernode.recipes_for`) lets the actor rebuild an embedded
    replica its node lacks before running SQL on it; a failed rebuild is ``UNAVAILABLE``.
    """

    #: Backoff between retries of an unavailable server: first wait, cap (seconds).
    BACKOFF_S = (0.5, 8.0)

    def __init__(self, engine: str, settings: dict, limits: dict, retry_s: float = 120.0,
                 spec=None) -> None:
        settings = dict(settings)
        self._fault_exit_on = settings.pop("_fault_exit_on", None)
        folder = settings.pop("_fault_points", None)
        self._points = FaultPoints(folder) if folder else None
        self._recipes = settings.pop("_replica_recipes", None) or {}
        if spec is None:
            from polysql_ray.engines.registry import engine_spec

            spec = engine_spec(engine)
        in_child = settings.pop("child_process", spec.child_process)
        retries = float(retry_s) if spec.transient_unavailable else 0.0
        if retries > 0:  # this actor's retry is the one wait of an outage (class docstring)
            settings["health_wait_s"] = 0.0
        self._ready: set[str] = set()  # replica locations found or rebuilt on this node
        if in_child:  # the engine's module, pyarrow and sqlglot load in the child only
            from polysql_ray.engines.child import ChildEngine

            self.engine = ChildEngine(engine, settings, dialect=spec.dialect)
        else:
            from polysql_ray.engines.registry import make_engine
            from polysql_ray.lazy import arrow_without_pandas

            arrow_without_pandas()  # a Ray worker of the run that builds tables (polysql_ray.lazy)
            self.engine = make_engine(engine, **settings)
        self.limits = Limits(**limits)
        self.retry_s = retries
        self._outage_since: float | None = None
        self.retries = 0  # executions repeated because the server was unavailable

    def _replica_problem(self, location: str) -> str | None:
        """Why the replica ``location`` is missing on this node and cannot be rebuilt, else None."""
        if location in self._recipes and location not in self._ready:
            from polysql_ray.replication.pernode import ensure_replica

            problem = ensure_replica(location, self._recipes[location])
            if problem is not None:
                return problem
            self._ready.add(location)
        return None

    def _execute_one(self, location: str, sql: str) -> ExecutionResult:
        if self._points is not None:
            self._points.reach("execute")
        if self._fault_exit_on is not None and sql == self._fault_exit_on:
            import os

            os._exit(134)  # as if the engine had crashed the process (SIGABRT-like status)
        problem = self._replica_problem(location)
        if problem is not None:
            return ExecutionResult.failure(ExecStatus.UNAVAILABLE, problem)
        try:
            return self.limits.enforce(self.engine.execute(location, sql, self.limits))
        except Exception as exc:  # an engine bug must not kill the batch: keep it visible
            return ExecutionResult.failure(ExecStatus.RUNTIME, f"engine raised {type(exc).__name__}: {exc}")

    def execute_one(self, location: str, sql: str) -> ExecutionResult:
        """One statement, retrying an unavailable server with backoff within this outage's
        budget (:attr:`retry_s`, shared by every statement of the actor while the outage lasts).

        An outage ends only when a statement runs (``OK``). A statement refused before it
        reaches the server (the guard's ``rejected``/``empty``, the tokenizer's ``syntax``) proves
        nothing about the server, and once renewed the budget by every such statement: a batch
        mixing refused statements with ones for a dropped database waited ``retry_s`` per
        statement instead of once (a 34-item run stalled for 12 minutes)."""
        delay = self.BACKOFF_S[0]
        while True:
            res = self._execute_one(location, sql)
            if res.status is ExecStatus.OK:
                self._outage_since = None
            if res.status is not ExecStatus.UNAVAILABLE:
                return res
            now = time.monotonic()
            if self._outage_since is None:
                self._outage_since = now
            left = self._outage_since + self.retry_s - now
            if left <= 0:
                return res
            if self._points is not None:
                self._points.reach("unavailable")
            time.sleep(min(delay, left))
            self.retries += 1
            delay = min(delay * 2, self.BACKOFF_S[1])

    def execute_batch(self, requests: list[tuple[str, str]]):
        """Run ``[(location, sql), ...]``; returns one ExecutionResult per request followed by a
        stats dict ``{"n": int, "engine_s": float, "retries": int}`` (``num_returns =
        len(requests) + 1``; ``retries``: repeats of unavailable executions in this batch)."""
        out: list[Any] = []
        engine_s = 0.0
        retries0 = self.retries
        many = getattr(self.engine, "execute_many", None)
        if many is not None and self._points is None and self._fault_exit_on is None and self.retry_s <= 0:
            t0 = time.perf_counter()
            out = self._execute_many(many, requests)
            engine_s = time.perf_counter() - t0
        else:
            for location, sql in requests:
                t0 = time.perf_counter()
                out.append(self.execute_one(location, sql))
                engine_s += time.perf_counter() - t0
        out.append({"n": len(requests), "engine_s": engine_s, "retries": self.retries - retries0})
        return tuple(out)

    def _execute_many(self, many, requests: list[tuple[str, str]]) -> list[ExecutionResult]:
        """:meth:`execute_batch` through the engine's ``execute_many`` (a child process: one round
        trip per batch), with the results :meth:`execute_one` gives: a replica that cannot be
        rebuilt is UNAVAILABLE, every result is held to ``max_bytes``, an engine exception is
        that statement's RUNTIME (the rest then run one by one). Only without fault points and
        for engines without outage retries (``retry_s`` 0: embedded engines)."""
        out: list[Any] = [None] * len(requests)
        todo = []
        for k, (location, _) in enumerate(requests):
            problem = self._replica_problem(location)
            if problem is not None:
                out[k] = ExecutionResult.failure(ExecStatus.UNAVAILABLE, problem)
            else:
                todo.append(k)
        done = 0
        try:
            for res in many([requests[k] for k in todo], self.limits):
                out[todo[done]] = self.limits.enforce(res)
                done += 1
        except Exception as exc:  # an engine bug must not kill the batch: keep it visible
            if done == len(todo):
                return out
            out[todo[done]] = ExecutionResult.failure(ExecStatus.RUNTIME, f"engine raised {type(exc).__name__}: {exc}")
            for k in todo[done + 1:]:
                out[k] = self.execute_one(*requests[k])
        return out

    def ping(self) -> str:
        """The engine name (a readiness probe)."""
        return self.engine.name


def _nullable_str(x: str | None) -> str | None:
    return None if x is None else str(x)


#: ``decide``'s verdicts in this scoring process (the driver, or a scoring worker), across its
#: batches, by what a verdict is a function of (:func:`_decided_key`): predictions whose text
#: differs but whose results are identical, byte for byte, get the verdict of the first without
#: comparing again (a third of the realistic sweep's scored items). LRU, at most
#: ``pipeline.verdict_cache_size`` entries (the ``reuse`` argument of :func:`score_batch`).
_DECIDED: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()
_ROLES = ("_gold", "_probe", "_pred", "_ties_probe", "_pred_probe", "_pred_ties_probe")


def _decided_key(it: dict, content, policy_id: tuple, pair) -> tuple | None:
    """The inputs of ``decide`` for item ``it`` (:func:`_score_row`), as a key: generation
    status, gold error, structural proof, gold and prediction shapes, the policy, the gold side
    and engines of ``pair`` and the predicted text only where ``decide`` reads it
    (:func:`~polysql_ray.comparison.verdict.reads_pred_text`), and the
    :meth:`~polysql_ray.engines.base.ExecutionResult.content_key` of each result by role
    (``content(index)``, memoised per batch). None when a result has no content key."""
    from polysql_ray.comparison.verdict import reads_pred_text

    results = []
    for role in _ROLES:
        i = it.get(role)
        if i is not None:
            key = content(i)
            if key is None:
                return None
            results.append(key)
        else:
            results.append(None)
    return (str(it["_gen_status"]), it["_gold_error"], it["_structural"] == "equivalent", it["_shape"],
            it.get("_pred_shape"), policy_id, pair.gold_sql, pair.gold_dialect, pair.pred_dialect,
            pair.gold_engine, pair.pred_engine, pair.pred_sql if reads_pred_text(pair) else None,
            tuple(results))


@ray.remote
def score_batch(items: list[dict], result_refs: list, policy, reuse: int = 0) -> pa.Table:
    """Score one batch of predictions with :func:`polysql_ray.comparison.verdict.decide` (the
    one decision path, shared with ``score_sql``).

    Args:
        items: row metadata per prediction: every SCORE_SCHEMA field known before execution,
            plus ``_gold``/``_probe``/``_ties_probe``/``_pred``/``_pred_probe``/``_pred_ties_probe``
            (indices into ``result_refs`` or None), ``_shape`` (GoldShape of the gold SQL that
            ran), ``_pred_shape`` (PredShape of the prediction), ``_gen_status``/``_gold_error``,
            ``_gold_dialect`` and ``_structural``.
        result_refs: ObjectRefs of ExecutionResults (nested, so fetched here, once each).
        policy: the run's :class:`ComparisonPolicy` object (built once by the driver).
        reuse: at most this many verdicts kept in this process for items whose ``decide``
            inputs are identical to an earlier item's (:data:`_DECIDED`); 0 decides every item.

    The results arrive with the run's limits already applied (:meth:`ExecutionActor._execute_one`
    enforces ``max_bytes`` on every result it returns), so they are not checked again here.

    Returns: an Arrow table with SCORE_SCHEMA, one row per item, same order. An item whose
    scoring raises is stored ``inconclusive`` with reason ``compare_error`` and the exception in
    ``pred_error`` (:func:`polysql_ray.comparison.verdict.scoring_error`); the batch goes on.
    """
    import pyarrow as pa

    from polysql_ray.comparison.normalize import canonical_scope
    from polysql_ray.lazy import arrow_without_pandas
    from polysql_ray.store.schema import SCORE_SCHEMA

    arrow_without_pandas()  # a Ray worker of the run: once per process (polysql_ray.lazy)
    results = ray.get(list(result_refs)) if result_refs else []
    now = dt.datetime.now(dt.timezone.utc)
    rows = []
    memo: dict[int, tuple | None] = {}

    def content(i: int) -> tuple | None:  # a gold result is named once for the batch's items
        if i not in memo:
            memo[i] = results[i].content_key()
        return memo[i]

    policy_id = (policy.name, policy.fingerprint()) if reuse else None
    with canonical_scope():  # a gold result compared with many predictions is canonicalised once
        for it in items:
            try:
                rows.append(_score_row(it, results, policy, now,
                                       reuse=(reuse, content, policy_id) if reuse else None))
            except Exception as exc:  # noqa: BLE001 - one item never aborts the batch (or the sweep)
                rows.append(_score_row(it, results, policy, now, error=exc))
    return pa.Table.from_pylist(rows, schema=SCORE_SCHEMA)


def _score_row(it: dict, results: list, policy, now: dt.datetime, error: BaseException | None = None,
               reuse=None) -> dict:
    """The SCORE_SCHEMA row of one item (:func:`score_batch`); with ``error``, the row of an item
    whose scoring raised it (the verdict :func:`~polysql_ray.comparison.verdict.scoring_error`).
    ``reuse``: ``(size, content, policy_id)`` of :func:`score_batch`'s verdicts kept across
    items (:data:`_DECIDED`), or None."""
    from polysql_ray.comparison.prepare import executed_sql
    from polysql_ray.comparison.verdict import Pair, decide, rows_of, scoring_error
    from polysql_ray.engines.registry import default_dialect

    gold = results[it["_gold"]] if it["_gold"] is not None else None
    probe = results[it["_probe"]] if it["_probe"] is not None else None
    pred = results[it["_pred"]] if it["_pred"] is not None else None
    ties = results[it["_ties_probe"]] if it.get("_ties_probe") is not None else None
    pred_probe = results[it["_pred_probe"]] if it.get("_pred_probe") is not None else None
    pred_ties = results[it["_pred_ties_probe"]] if it.get("_pred_ties_probe") is not None else None
    t0 = time.perf_counter()
    structural = it["_structural"]
    if error is None:
        gold_dialect = it.get("_gold_dialect") or default_dialect(it["source_engine"])
        pred_dialect = default_dialect(it["target_engine"])
        pair = Pair(executed_sql(it["gold_sql"], gold_dialect, policy),
                    executed_sql(it["pred_sql"] or "", pred_dialect, policy),
                    gold_dialect, pred_dialect, it["source_engine"], it["target_engine"])
        key = _decided_key(it, reuse[1], reuse[2], pair) if reuse else None
        try:
            v = _DECIDED.get(key) if key is not None else None
        except TypeError:  # a shape with an unhashable part: decided, not kept
            key = v = None
        if v is not None:
            _DECIDED.move_to_end(key)
        else:
            v = decide(it["_gen_status"], gold, probe, pred, it["_shape"], policy, None,  # limits: by the actor
                       gold_error=it["_gold_error"], proven=structural == "equivalent", pair=pair, ties_probe=ties,
                       pred_shape=it.get("_pred_shape"), pred_probe=pred_probe, pred_ties_probe=pred_ties)
            if key is not None:
                _DECIDED[key] = v
                while len(_DECIDED) > reuse[0]:
                    _DECIDED.popitem(last=False)
    else:
        v = scoring_error(error)
    score_s = time.perf_counter() - t0
    row = {k: v_ for k, v_ in it.items() if not k.startswith("_")}
    pred_error = pred.error if pred is not None else None
    row.update(
        gold_status=(gold.status.value if gold is not None else "unavailable"),
        gold_error=_nullable_str(it["_gold_error"] or (gold.error if gold is not None else None)),
        pred_status=(pred.status.value if pred is not None
                     else "skipped" if v.basis == "proven" else ExecStatus.EMPTY.value),
        pred_error=_nullable_str(pred_error or v.detail or None),
        correct=v.correct, verdict=v.verdict, reason=v.reason, basis=v.basis,
        flags=",".join(dict.fromkeys((*v.flags, *it.get("_flags", ())))), policy_version=policy.version, policy=policy.name,
        structural=structural, trail=_trail(structural, pred, v),
        gold_rows=rows_of(gold), pred_rows=rows_of(pred),
        gold_exec_s=(gold.elapsed_s if gold is not None else 0.0),
        pred_exec_s=(pred.elapsed_s if pred is not None else 0.0),
        score_s=score_s, scored_at=now,
    )
    return row


def _trail(structural: str, pred, verdict) -> str:
    """Which layers decided, in order: ``structural:<decision>`` then ``execution:<verdict>``."""
    parts = []
    if structural:
        parts.append("structural:" + structural.split(":")[0])
    if pred is not None:
        parts.append(f"execution:{verdict.verdict}")
    return ">".join(parts)
