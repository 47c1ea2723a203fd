"""Streaming execution and scoring: work items in, score rows out, in a bounded window.

:class:`Scheduler` is fed work items chunk by chunk (:meth:`Scheduler.add`) and keeps them
moving through three stages, all asynchronous on Ray:

1. **structural** (optional, :mod:`polysql_ray.pipeline.structural`): a chunk whose items the
   mode proves waits for its proof tasks; proven predictions lose their execution;
2. **execution**: every unique (engine, database copy, SQL) runs once on the engine's
   execution actors (bounded concurrency: ``engines.<name>.actors`` actors with at most
   ``pipeline.max_inflight_exec`` batches of ``pipeline.exec_batch_size`` each);
3. **scoring**: a batch of ``pipeline.score_batch_size`` items is scored by one Arrow task as
   soon as all its executions are done (at most ``pipeline.max_inflight_score`` in flight:
   by default one per CPU of the cluster left after the driver and the embedded engines'
   actors, :func:`inflight_scores`; none where no CPU is left: the driver scores every batch);
   while the driver waits with every execution done and every slot taken, it scores a ready
   batch itself (``pipeline.driver_scores``; the same functions, so the same rows:
   :meth:`Scheduler._driver_idle`);
   rows go to the results store through a writer that flushes by rows and by seconds.

Memory. The driver holds at most :attr:`Scheduler.pending` items (the caller keeps it under
``pipeline.max_pending_items`` with :meth:`Scheduler.wait_below`), their batches, and
ObjectRefs: never a result set (results live in Ray's object store, fetched only by the
scoring tasks).

Reuse of executions (the "computed once" rule). Executions are keyed by
:func:`polysql_ray.pipeline.plan.exec_key`. A key is run once while it is queued or running
(every batch that needs it waits on the same execution) and, once done, its ObjectRef stays
in a bounded LRU (``pipeline.exec_cache_size`` entries, most recently used kept). Sweeps
iterate model by model over the same questions, so a gold result (and its probes) is found in
the LRU by every later cell that needs it; an entry evicted and needed again is executed again
(correct, only slower). ``RunStats.exec_reused`` counts the executions saved this way.

Reuse of verdicts. The verdict of an item is a function of its question, its gold and
predicted SQL, the executions it reads and the policy (:func:`verdict_signature`). An item
whose signature matches an item already scored this run (a bounded LRU,
``pipeline.verdict_cache_size`` entries; 0 turns it off) is not sent to a scoring task: its
row is the earlier row's verdict columns under its own metadata, with ``score_s`` 0.0.
Signatures name the executions by their ObjectRef, not their exec key, so an execution
evicted from the LRU and run again (possibly with another result) never shares a verdict.
Models agree on many questions (the realistic benchmark: 59% of its 20,412 items repeat an
earlier item's (question, SQL); the four real shared sets 3%), and every instruction level or
policy-free rerun of a cell repeats them. ``RunStats.verdicts_reused`` counts them.

Suite EX (``suite.enabled``; :mod:`polysql_ray.pipeline.suite_stage`). With a ``suite`` stage,
a scored batch is not written at once: :meth:`SuiteStage.plan` fills the suite columns of the
rows that do not pass on the original (early exit) and returns the executions the passing
rows need on the suite databases; those run through the same queues, dedup and LRU as any
execution (a gold's result on a suite database is computed once per question), as a second
batch whose "scoring" is :func:`~polysql_ray.pipeline.suite_stage.suite_score`; then the rows
are written. Without a suite stage nothing here changes.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import time
from typing import Any

import ray

from polysql_ray.errors import root_message
from polysql_ray.pipeline.plan import ExecRequest, WorkItem
from polysql_ray.store.parquet import BufferedWriter

log = logging.getLogger("polysql_ray")

#: Ray retries of an execution batch whose actor died (the actor itself restarts without limit).
ACTOR_TASK_RETRIES = 1
#: A single statement whose execution killed its actor this many times is a runtime failure.
CRASH_ATTEMPTS = 2
#: Unique execution keys remembered to count repeated executions (~60 MB of hashes at most).
TRACKED_KEYS = 1_000_000


def inflight_scores(setting: int | str, cluster_cpus: float, busy_cores: int = 0) -> int:
    """Scoring tasks kept in flight (``pipeline.max_inflight_score``): an integer as given;
    ``auto``: one per CPU of the cluster left after ``busy_cores`` (the driver and the execution
    actors of embedded engines, each of which keeps about one core busy with its engine's child
    process), possibly none. Each task in flight holds a Ray worker process (~220 MiB RSS once
    the comparison modules are loaded), and a scoring task is CPU-bound, so tasks beyond the
    free cores add memory and no throughput. ``0`` (``auto`` where no CPU is left, e.g. 2 CPUs
    with one SQLite actor): no scoring task, the driver scores every batch itself once its
    executions are done (:meth:`Scheduler._driver_idle`): on the realistic sweep on 2 CPUs the
    same wall as one scoring task (29.6 vs 29.1 s), 1.4 s less CPU and 229 MiB less memory (831
    vs 1,060 MiB; benchmarks/bench_realistic.py), and one process a debugger can follow.
    Errors: ValueError for anything else (config validation names the key)."""
    if str(setting) == "auto":
        return max(0, int(round(cluster_cpus)) - int(busy_cores))
    n = int(setting)
    if n < 0:
        raise ValueError(f"pipeline.max_inflight_score must be auto or >= 0 (got {setting!r})")
    return n


class StageClock:
    """First start and last end (UTC epoch seconds) of each named stage of a run.

    ``start(stage)`` keeps the earliest call, ``end(stage)`` the latest; :meth:`as_dict` gives
    ``{stage: {"first_start": iso, "last_end": iso, "first_start_s": s, "last_end_s": s}}``
    with ``*_s`` in seconds from the run's start. Thread-safe enough for the generation
    threads (each stage name is written by one thread, or under the GIL by the driver).

    Stages of a run: ``replicate``; ``generate[<model>]`` (first cell started, last cell
    generated); ``execute[<engine>]`` (first batch submitted to an actor, last batch done);
    ``structural`` (first proof submitted, last applied); ``score`` (first scoring task
    submitted, last one done).
    """

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.time() if t0 is None else t0
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def start(self, stage: str, at: float | None = None) -> None:
        """Note that ``stage`` started at ``at`` (epoch seconds; default now); the earliest wins."""
        at = time.time() if at is None else at
        if stage not in self.first or at < self.first[stage]:
            self.first[stage] = at

    def end(self, stage: str, at: float | None = None) -> None:
        """Note that ``stage`` ended at ``at`` (epoch seconds; default now); the latest wins."""
        at = time.time() if at is None else at
        if stage not in self.last or at > self.last[stage]:
            self.last[stage] = at

    def as_dict(self) -> dict[str, dict]:
        """The stages in order of first start, in the shape given in the class docstring."""
        import datetime as dt

        def iso(x: float | None) -> str | None:
            return None if x is None else dt.datetime.fromtimestamp(x, dt.timezone.utc).isoformat(
                timespec="milliseconds")

        out = {}
        for stage in sorted(set(self.first) | set(self.last), key=lambda s: self.first.get(s, 0.0)):
            a, b = self.first.get(stage), self.last.get(stage)
            out[stage] = {"first_start": iso(a), "last_end": iso(b),
                          "first_start_s": None if a is None else round(a - self.t0, 3),
                          "last_end_s": None if b is None else round(b - self.t0, 3)}
        return out


class Scheduler:
    """Executes and scores work items added chunk by chunk (module docstring).

    Args:
        cfg: composed config (``pipeline.*``, ``engines.*``, ``limits``).
        store: the results store; rows are written through a
            :class:`~polysql_ray.store.parquet.BufferedWriter` (by rows and seconds).
        progress: :class:`polysql_ray.pipeline.progress.Progress`.
        stats: the run's ``RunStats`` (counters updated in place).
        run_id: stored in every row.
        policy: the run's ComparisonPolicy object.
        policies: ``{name: ComparisonPolicy}``: each batch is scored under its cell's policy
            (``Cell.policy``; a batch holds one cell's items); ``policy`` when absent.
        clock: the run's :class:`StageClock` (``execute[<engine>]``, ``score``, ``structural``).

    Use as a context manager: on exit the writer is flushed and the actors are killed.
    Errors: :class:`polysql_ray.errors.ConfigError` (via ``check_fits``) when an
    engine's actors cannot fit the cluster.
    """

    def __init__(self, cfg: dict, store, progress, stats, run_id: str, policy, clock: StageClock,
                 check_fits=None, engine_settings=None, suite=None,
                 policies: dict | None = None) -> None:
        pcfg = cfg["pipeline"]
        self.cfg, self.progress, self.stats, self.run_id, self.policy, self.clock = \
            cfg, progress, stats, run_id, policy, clock
        self.policies = dict(policies or {})  # cell.policy -> ComparisonPolicy (else ``policy``)
        self._ran: set[int] = set()  # hashes of the exec keys run so far (_note_run)
        self.exec_bs, self.score_bs = int(pcfg["exec_batch_size"]), int(pcfg["score_batch_size"])
        self.max_exec = int(pcfg["max_inflight_exec"])
        self._score_setting = pcfg.get("max_inflight_score", "auto")
        self._cluster_cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.max_score = inflight_scores(self._score_setting, self._cluster_cpus, 1)  # the driver's core
        self.score_cpus = float(pcfg.get("score_num_cpus", 0.25))
        self.limits = dict(cfg["limits"])
        self.cache_size = max(0, int(pcfg.get("exec_cache_size", 20_000)))
        self.writer = BufferedWriter(store, int(pcfg.get("flush_rows", 20_000)), float(pcfg.get("flush_s", 10.0)))
        self._check_fits = check_fits
        self._engine_settings = engine_settings
        self.actors: dict[str, list] = {}
        self.queues: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.singles: dict[str, collections.deque] = collections.defaultdict(collections.deque)
        self.inflight_per_actor: collections.Counter = collections.Counter()
        self.alone: set[tuple[str, int]] = set()   # actors running one suspect statement alone
        self.attempts: collections.Counter = collections.Counter()
        self.exec_inflight: dict[Any, tuple[str, int, list[str]]] = {}
        self.req_of: dict[str, ExecRequest] = {}            # queued or running executions
        self.running: dict[str, Any] = {}                   # exec key -> ref while it runs
        self.waiting_on: dict[str, list[int]] = {}          # exec key -> batches waiting on it
        self.done: collections.OrderedDict[str, Any] = collections.OrderedDict()  # LRU of refs
        self.batches: dict[int, list[WorkItem]] = {}
        self.batch_refs: dict[int, dict[str, Any]] = {}
        self.missing: dict[int, int] = {}
        self.ready: collections.deque[int] = collections.deque()
        self.score_inflight: dict[Any, int] = {}
        self.proving: dict[Any, tuple] = {}                  # proof ref -> (job, items, refs)
        self._next_batch = 0
        self.pending = 0                                     # items added, not yet scored
        self.ptasks: dict[str, int] = {}
        self.stask = progress.add("score", 0)
        self.struct_task: int | None = None
        self.suite = suite                                   # SuiteStage or None (suite EX off)
        self.suite_jobs: dict[int, Any] = {}                 # suite batch -> SuiteJob (its rows wait)
        self.verdict_cache_size = max(0, int(pcfg.get("verdict_cache_size", 20_000)))
        self.verdicts: collections.OrderedDict[tuple, tuple] = collections.OrderedDict()  # LRU
        self.reuse: dict[int, tuple] = {}                    # batch -> (metas, sigs, scored, reused)
        self.driver_scores = bool(pcfg.get("driver_scores", True))  # _driver_idle
        self._waiting = self._here = False

    # -- feeding -------------------------------------------------------------------------
    def add(self, items: list[WorkItem], requests: dict[str, ExecRequest], job=None) -> None:
        """Take a chunk of planned items; ``requests`` maps every exec key of their ``deps``
        to its :class:`ExecRequest`; ``job`` is a submitted
        :class:`polysql_ray.pipeline.structural.StructuralJob` over them (or None)."""
        if not items:
            return
        self.pending += len(items)
        self.progress.grow(self.stask, len(items))
        if job is not None and job.refs:
            if self.struct_task is None:
                self.struct_task = self.progress.add("structural", 0)
            self.progress.grow(self.struct_task, len(job.keys))
            self.clock.start("structural")
            entry = (job, items, requests, set(job.refs))
            for ref in job.refs:
                self.proving[ref] = entry
        else:
            self._enqueue(items, requests)
        self._pump()

    def _enqueue(self, items: list[WorkItem], requests: dict[str, ExecRequest]) -> None:
        for i in range(0, len(items), self.score_bs):
            batch = items[i:i + self.score_bs]
            b = self._next_batch
            self._next_batch += 1
            self.batches[b] = batch
            deps: dict[str, ExecRequest] = {}
            for it in batch:
                for d in it.deps:
                    req = deps[d] = requests[d]
                    self.stats.exec_requested[req.engine] += 1
            self._register(b, deps)

    def _register(self, b: int, deps: dict[str, ExecRequest], count=None) -> None:
        """Batch ``b`` waits on ``deps``: each is reused (done, or running for another batch)
        or queued; ``b`` is ready once none is missing. ``count(req, new)`` (suite batches)
        is told each dependency and whether it will run."""
        self.batch_refs[b], self.missing[b] = {}, 0
        for d, req in deps.items():
            if count is not None:
                self.stats.exec_requested[req.engine] += 1
                count(req, d not in self.done and d not in self.waiting_on)
            if d in self.done:
                self.done.move_to_end(d)
                self.batch_refs[b][d] = self.done[d]
                self.stats.exec_reused += 1
            elif d in self.waiting_on:
                self.waiting_on[d].append(b)
                self.missing[b] += 1
                self.stats.exec_reused += 1
            else:
                self.waiting_on[d] = [b]
                self.missing[b] += 1
                self.req_of[d] = req
                self.stats.exec_unique[req.engine] += 1
                self._note_run(d)
                self._queue(req)
        if self.missing[b] == 0:
            self.ready.append(b)

    def _note_run(self, key: str) -> None:
        """Count an execution of a key this run already executed (``RunStats.exec_repeated``:
        0 when nothing ran twice, e.g. across the policies of ``policies=[...]``); keys are
        remembered by hash, for the first :data:`TRACKED_KEYS` unique ones (bounded memory)."""
        h = hash(key)
        if h in self._ran:
            self.stats.exec_repeated = getattr(self.stats, "exec_repeated", 0) + 1
        elif len(self._ran) < TRACKED_KEYS:
            self._ran.add(h)

    def _queue(self, req: ExecRequest) -> None:
        engine = req.engine
        if engine not in self.actors:
            self._start_engine(engine)
        self.queues[engine].append(req)
        self.progress.grow(self.ptasks[engine], 1)

    def start_engines(self, engines) -> None:
        """Start the execution actors of ``engines`` now rather than at their first execution
        (an actor's process and its engine take about a second to start)."""
        for engine in engines:
            if engine not in self.actors:
                self._start_engine(engine)

    def _start_engine(self, engine: str) -> None:
        from polysql_ray.pipeline.actors import ExecutionActor
        from polysql_ray.pipeline.cluster import engine_actors

        pcfg = self.cfg["pipeline"]
        ecfg = (self.cfg.get("engines") or {}).get(engine) or {}
        n = engine_actors(self.cfg, engine)
        # a dead actor (killed, OOM, an engine crash) is restarted and its in-flight batches are
        # retried by Ray; what still fails is split into single statements (_exec_failed)
        cls = ray.remote(ExecutionActor).options(num_cpus=float(ecfg.get("num_cpus", 0.5)),
                                                 num_gpus=float(ecfg.get("num_gpus", 0) or 0),
                                                 resources=dict(ecfg.get("resources") or {}),
                                                 max_restarts=-1, max_task_retries=ACTOR_TASK_RETRIES)
        from polysql_ray.engines.registry import engine_spec

        spec = engine_spec(engine)  # the registry row: the actor needs no engine module for it
        self.actors[engine] = [cls.remote(engine, self._engine_settings(self.cfg, engine), self.limits,
                                          float(pcfg.get("unavailable_retry_s", 120)), spec)
                               for _ in range(n)]
        if self._check_fits is not None:
            self._check_fits(self.cfg, sorted(self.actors))
        from polysql_ray.engines.registry import engine_class

        embedded = sum(len(pool) for name, pool in self.actors.items()
                       if getattr(engine_class(name), "embedded", False))
        self.max_score = inflight_scores(self._score_setting, self._cluster_cpus, 1 + embedded)
        self.ptasks[engine] = self.progress.add(f"execute [{engine}]", 0)

    # -- driving ---------------------------------------------------------------------------
    def busy(self) -> bool:
        """Work is queued, running, being proven or waiting to be scored."""
        return bool(self.exec_inflight or self.score_inflight or self.ready or self.proving
                    or any(self.queues.values()) or any(self.singles.values()))

    def wait_below(self, limit: int) -> None:
        """Step until at most ``limit`` items are pending (added, not yet scored)."""
        with self._waiting_here():
            while self.pending > limit and self.busy():
                self.step()

    def drain(self) -> None:
        """Step until every added item is scored and written."""
        with self._waiting_here():
            while self.busy():
                self.step()
        self.writer.flush()

    @contextlib.contextmanager
    def _waiting_here(self):
        """The driver waits on the work in flight (it plans nothing): :meth:`_driver_idle`."""
        self._waiting = True
        try:
            yield
        finally:
            self._waiting = False

    def step(self, timeout: float = 5.0) -> None:
        """Wait for one execution, proof or scoring task to finish and handle what finished."""
        self._step(1, timeout)

    def poll(self) -> None:
        """Handle every execution, proof or scoring task already finished, without waiting: the
        driver calls it between the chunks it plans, so that while it plans (the prediction
        analysis is most of its CPU) the actors get new batches and finished ones are scored."""
        self._step(None, 0)

    def _step(self, n: int | None, timeout: float) -> None:
        self._pump()
        waitable = list(self.exec_inflight) + list(self.score_inflight) + list(self.proving)
        if not waitable:
            return
        if self.ready and self._driver_idle():
            timeout = 0  # a ready batch waits: score it here rather than wait on the tasks
        done, _ = ray.wait(waitable, num_returns=n or len(waitable), timeout=timeout)
        for ref in done:
            if ref in self.exec_inflight:
                self._exec_done(ref)
            elif ref in self.score_inflight:
                self._score_done(ref)
            else:
                self._proof_done(ref)
        self.writer.tick()
        self.progress.tick()
        self._pump()

    def _pump(self) -> None:
        self._submit_exec()
        self._submit_scores()

    def _proof_done(self, ref) -> None:
        job, items, requests, refs = self.proving.pop(ref)
        refs.discard(ref)
        if refs:
            return
        self.stats.proven += job.apply(items, self.progress, self.struct_task)
        self.clock.end("structural")
        self._enqueue(items, requests)  # proven predictions dropped their execution from deps

    def _exec_done(self, ref) -> None:
        engine, a, keys = self.exec_inflight.pop(ref)
        self.inflight_per_actor[(engine, a)] -= 1
        self.alone.discard((engine, a))
        try:
            st = ray.get(ref)
        except ray.exceptions.RayError as exc:
            keys = self._exec_failed(engine, keys, exc)
        else:
            self.stats.engine_s[engine] += st["engine_s"]
            self.stats.exec_retries += st.get("retries", 0)
            self.progress.advance(self.ptasks[engine], st["n"])
        self.clock.end(f"execute[{engine}]")
        for k in keys:
            self._settle(k)

    def _settle(self, k: str) -> None:
        """Execution ``k`` is done: hand its ref to the batches waiting on it; keep it in the LRU."""
        self.req_of.pop(k)
        ref = self.running.pop(k)
        for b in self.waiting_on.pop(k, ()):
            self.batch_refs[b][k] = ref
            self.missing[b] -= 1
            if self.missing[b] == 0:
                self.ready.append(b)
        if self.cache_size:
            self.done[k] = ref
            if len(self.done) > self.cache_size:
                self.done.popitem(last=False)

    def _score_done(self, ref) -> None:
        b = self.score_inflight.pop(ref)
        self._finish_score(b, ray.get(ref))

    def _scored(self, b: int, table) -> None:
        """Batch ``b``'s rows are scored (all its items, in order): on to the suite stage or the writer."""
        if b in self.suite_jobs:  # a suite phase is done: its rows are complete
            b = self.suite_jobs.pop(b).batch
        elif self.suite is not None:  # suite EX: passing rows run on the suite first
            table, job = self.suite.plan(table, self.batches[b], b)
            if job is not None:
                sb = self._next_batch
                self._next_batch += 1
                self.suite_jobs[sb] = job
                self._register(sb, job.requests, self.suite.count)
                self._pump()
                return
        self.writer.add(table)
        _count_unavailable(table, self.stats)
        n = len(self.batches.pop(b))
        self.batch_refs.pop(b, None)
        self.missing.pop(b, None)
        self.pending -= n
        self.stats.items_scored += table.num_rows
        self.progress.advance(self.stask, table.num_rows)
        self.clock.end("score")

    def _submit_exec(self) -> None:
        for engine, pool in self.actors.items():
            q, one = self.queues[engine], self.singles[engine]
            while q or one:
                if one:  # a suspect runs alone on an idle actor, so a crash blames only it
                    idle = [i for i in range(len(pool)) if self.inflight_per_actor[(engine, i)] == 0]
                    if not idle:
                        break
                    a, reqs = idle[0], [one.popleft()]
                    self.alone.add((engine, a))
                else:
                    free = [i for i in range(len(pool)) if (engine, i) not in self.alone]
                    if not free:
                        break
                    a = min(free, key=lambda i: self.inflight_per_actor[(engine, i)])
                    if self.inflight_per_actor[(engine, a)] >= self.max_exec:
                        break
                    reqs = [q.popleft() for _ in range(min(self.exec_bs, len(q)))]
                refs = pool[a].execute_batch.options(num_returns=len(reqs) + 1).remote(
                    [(r.location, r.sql) for r in reqs])
                refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
                for r, ref in zip(reqs, refs[:-1]):
                    self.running[r.key] = ref
                self.exec_inflight[refs[-1]] = (engine, a, [r.key for r in reqs])
                self.inflight_per_actor[(engine, a)] += 1
                self.clock.start(f"execute[{engine}]")

    def _submit_scores(self) -> None:
        while self.ready and len(self.score_inflight) < self.max_score:
            self._start_score(self.ready.popleft(), here=False)
        if self.ready and self._driver_idle():
            self._here = True  # one batch per call: _scored may pump again (suite phases)
            try:
                self._start_score(self.ready.popleft(), here=True)
            finally:
                self._here = False

    def _driver_idle(self) -> bool:
        """Whether the driver scores a ready batch itself (``pipeline.driver_scores``): only
        while it waits (:meth:`wait_below`, :meth:`drain`) with every scoring slot taken and no
        execution queued, running or being proven, i.e. when its core and the engines' would
        otherwise idle (the tail of a sweep: the last batches wait for the scoring tasks). With
        no scoring task (``max_inflight_score`` 0, or ``auto`` with no CPU left) it scores every
        ready batch. The same functions score the batch, so its rows are the same."""
        if self._here:
            return False
        if self.max_score == 0:
            return True
        return (self.driver_scores and self._waiting and not self.exec_inflight and not self.proving
                and not any(self.queues.values()) and not any(self.singles.values()))

    def _start_score(self, b: int, here: bool) -> None:
        """Score ready batch ``b``: a Ray task (its ref in :attr:`score_inflight`) or, ``here``,
        in this process, at once (the task's own function on the fetched results)."""
        from polysql_ray.pipeline.actors import score_batch

        if b in self.suite_jobs:  # the suite phase of a scored batch (module docstring)
            from polysql_ray.pipeline.suite_stage import suite_score

            keys = sorted(self.suite_jobs[b].requests)
            args = (self.suite_jobs[b], keys, [self.batch_refs[b][k] for k in keys], self.policy)
            self.batch_refs.pop(b)
            self.missing.pop(b, None)
            self._run_score(suite_score, args, b, here)
            return
        batch, refs = self.batches[b], self.batch_refs[b]
        max_chars = int(self.limits.get("max_sql_chars", 100_000))
        policy = self.policies.get(batch[0].cell.policy, self.policy)  # one cell per batch
        key = policy_key(policy) if self.verdict_cache_size else None
        sigs = [verdict_signature(it, refs, key) if key else None for it in batch]
        reused = {}
        for i, sig in enumerate(sigs):
            if sig is not None and sig in self.verdicts:
                self.verdicts.move_to_end(sig)
                reused[i] = self.verdicts[sig]
        scored = [i for i in range(len(batch)) if i not in reused]
        deps = sorted({d for i in scored for d in batch[i].deps})
        index = {d: i for i, d in enumerate(deps)}
        metas = [_item_meta(it, index, self.run_id, max_chars) for it in batch]
        self.batch_refs[b] = {}  # the scoring task holds the refs now
        self.stats.verdicts_reused = getattr(self.stats, "verdicts_reused", 0) + len(reused)
        self.clock.start("score")
        if not scored:  # every verdict known: the rows are made here, no task
            from polysql_ray.store.schema import SCORE_SCHEMA

            self._scored(b, self._with_reused(SCORE_SCHEMA.empty_table(), metas, sigs, [], reused))
            return
        self.reuse[b] = (metas, sigs, scored, reused)
        self._run_score(score_batch, ([metas[i] for i in scored], [refs[d] for d in deps], policy,
                                      self.verdict_cache_size), b, here)

    def _run_score(self, task, args: tuple, b: int, here: bool) -> None:
        if not here:
            self.score_inflight[task.options(num_cpus=self.score_cpus).remote(*args)] = b
            return
        self.stats.batches_scored_in_driver = getattr(self.stats, "batches_scored_in_driver", 0) + 1
        self._finish_score(b, task._function(*args))

    def _finish_score(self, b: int, table) -> None:
        if b in self.reuse:
            table = self._with_reused(table, *self.reuse.pop(b))
        self._scored(b, table)

    def _with_reused(self, table, metas: list[dict], sigs: list, scored: list[int], reused: dict):
        """The rows of a whole batch in its order: ``table`` (the scored items ``scored``, in
        order) with the rows of the ``reused`` ones (``{position: verdict columns}``); the
        scored rows' verdict columns are remembered under their signatures (LRU)."""
        import pyarrow as pa

        from polysql_ray.store.schema import SCORE_SCHEMA

        if self.verdict_cache_size and scored:
            cols = table.select(list(VERDICT_COLUMNS)).to_pydict()
            for j, i in enumerate(scored):
                if sigs[i] is not None:
                    self.verdicts[sigs[i]] = tuple(cols[c][j] for c in VERDICT_COLUMNS)
                    self.verdicts.move_to_end(sigs[i])
            while len(self.verdicts) > self.verdict_cache_size:
                self.verdicts.popitem(last=False)
        if not reused:
            return table
        import datetime as dt

        now = dt.datetime.now(dt.timezone.utc)
        rows = []
        for i, values in reused.items():
            row = {k: v for k, v in metas[i].items() if not k.startswith("_")}
            row.update(zip(VERDICT_COLUMNS, values))  # flags include the question's own (signature)
            row.update(score_s=0.0, scored_at=now)
            rows.append(row)
        both = pa.concat_tables([table, pa.Table.from_pylist(rows, schema=SCORE_SCHEMA)])
        where = {i: j for j, i in enumerate([*scored, *reused])}
        return both.take(pa.array([where[i] for i in range(len(metas))], pa.int64()))

    def _exec_failed(self, engine: str, keys: list[str], exc: BaseException) -> list[str]:
        """An execution batch failed although Ray restarted its actor and retried it: split it
        into single statements, so a statement that crashes its engine process is isolated;
        a single statement that failed :data:`CRASH_ATTEMPTS` times is recorded as its own
        runtime failure. Returns the keys now settled."""
        from polysql_ray.engines.base import ExecStatus, ExecutionResult

        self.stats.actor_failures += 1
        settled = []
        for k in keys:
            self.attempts[k] += len(keys) == 1  # only a statement that failed alone is blamed
            req = self.req_of[k]
            if len(keys) > 1 or self.attempts[k] < CRASH_ATTEMPTS:
                self.running.pop(k, None)
                self.singles[engine].append(req)
                continue
            self.stats.crashed += 1
            log.warning("isolated an execution that killed the %s engine process %d times: %s",
                        engine, self.attempts[k], root_message(exc)[:200])
            self.running[k] = ray.put(ExecutionResult.failure(
                ExecStatus.RUNTIME, f"the {engine} engine process died running this statement "
                f"({self.attempts[k]} attempts): {root_message(exc)[:300]}"))
            self.attempts.pop(k, None)
            settled.append(k)
        return settled

    # -- context -----------------------------------------------------------------------------
    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.writer.flush()
        finally:
            for pool in self.actors.values():
                for a in pool:
                    ray.kill(a)


#: Score columns decided by the comparison (the rest is the item's own metadata, ``score_s``,
#: ``scored_at`` and the suite columns): what a reused verdict copies (module docstring).
VERDICT_COLUMNS = ("gold_status", "gold_error", "pred_status", "pred_error", "correct", "verdict", "reason",
                   "basis", "flags", "structural", "trail", "policy_version", "policy", "gold_rows",
                   "pred_rows", "gold_exec_s", "pred_exec_s")


def policy_key(policy) -> tuple[str, str]:
    """``(name, fingerprint)`` of a comparison policy: the part of a verdict signature that
    names the rules and version (fingerprint) and the row's ``policy`` column (name); computed
    once per scoring batch (a fingerprint costs ~40 us)."""
    return (policy.name, policy.fingerprint())


def verdict_signature(it: WorkItem, refs: dict, policy: tuple[str, str]) -> tuple | None:
    """What an item's verdict is a function of (module docstring, "Reuse of verdicts"): the
    question (its dataset flags and gold), both SQL texts, generation status, structural
    decision, engines, the policy (:func:`policy_key`: name and fingerprint), and the
    ObjectRef of each execution it reads, by role (``refs``: exec key -> ObjectRef).
    None when an execution has no ref (never reused)."""
    ex, cell, pred = it.example, it.cell, it.prediction
    roles = (it.gold, it.probe, it.ties_probe, it.pred, it.pred_probe, it.pred_ties_probe)
    try:
        ids = tuple(None if k is None else refs[k].binary() for k in roles)
    except (KeyError, AttributeError):
        return None
    return (cell.dataset, ex.question_id, ex.db_id, ex.gold_sql, ex.gold_dialect, ex.gold_error,
            tuple(ex.extra.get("flags", ())), ex.source_engine, cell.target_engine, *policy,
            str(pred.status), _text_key(pred.pred_sql), it.structural, ids)


#: Predicted SQL longer than this is named in a signature by its length and SHA-256, so the LRU
#: of verdicts never holds a generator's megabytes of text (its rows are stored cut anyway).
SIGNATURE_TEXT_CHARS = 4096


def _text_key(sql: str | None):
    """``sql`` itself, or ``(length, sha256)`` past :data:`SIGNATURE_TEXT_CHARS` characters."""
    if sql is None or len(sql) <= SIGNATURE_TEXT_CHARS:
        return sql
    import hashlib

    return (len(sql), hashlib.sha256(sql.encode("utf-8", "surrogatepass")).hexdigest())


def _count_unavailable(table, stats) -> None:
    """Count the rows of a scored batch that could not run (verdict ``unavailable``)."""
    import pyarrow.compute as pc

    mask = pc.fill_null(pc.equal(table.column("verdict"), "unavailable"), False)
    if not pc.any(mask).as_py():
        return
    for row in table.filter(mask).select(["target_engine", "source_engine", "reason", "gold_error",
                                           "pred_error"]).to_pylist():
        engine = row["source_engine"] if row["reason"] == "gold_unavailable" else row["target_engine"]
        stats.unavailable[engine] += 1
        msg = row["gold_error"] if row["reason"] == "gold_unavailable" else row["pred_error"]
        stats.unavailable_examples.setdefault(engine, (msg or "")[:300])


def _item_meta(it: WorkItem, index: dict[str, int], run_id: str, max_sql_chars: int = 100_000) -> dict:
    """Row metadata of one item for :func:`polysql_ray.pipeline.actors.score_batch`; a predicted
    SQL longer than ``max_sql_chars`` is stored cut, with its length (:func:`storable_sql`)."""
    from polysql_ray.generation.base import GenStatus
    from polysql_ray.store.parquet import storable_sql, storable_text

    ex, cell, pred = it.example, it.cell, it.prediction
    return {
        "key": it.key, "cell_key": cell.key, "run_id": run_id, "model": cell.model,
        "generator": cell.generator, "generator_fingerprint": cell.generator_fingerprint,
        "dataset": cell.dataset, "dialect": cell.dialect, "source_engine": ex.source_engine,
        "target_engine": cell.target_engine, "instruction_level": cell.instruction_level,
        "question_id": ex.question_id, "db_id": ex.db_id, "gold_sql": storable_text(ex.gold_sql),
        "pred_sql": storable_sql(pred.pred_sql, max_sql_chars), "gen_status": GenStatus(pred.status).value,
        "_gold": index.get(it.gold), "_probe": index.get(it.probe), "_pred": index.get(it.pred),
        "_ties_probe": index.get(it.ties_probe),
        "_pred_shape": it.pred_shape if it.pred is not None else None,
        "_pred_probe": index.get(it.pred_probe), "_pred_ties_probe": index.get(it.pred_ties_probe),
        "_shape": it.shape, "_gen_status": GenStatus(pred.status).value, "_gold_error": ex.gold_error,
        "_gold_dialect": ex.gold_dialect,
        "_structural": it.structural, "_flags": tuple(ex.extra.get("flags", ())),
    }
