"""The Ray driver: one process plans the whole grid and schedules it.

Stages, in data-flow order (each a function below):

1. :func:`build_grid`     composed config -> datasets (examples), generators, cells
2. :func:`generate`       generators -> predictions (replay/gold in the driver; model
                          generators as one Ray actor pool per model, shared by all cells)
3. :func:`plan_work`      predictions not yet in the store -> work items + unique executions
4. :func:`replicate`      each (source database, target engine) copy, as Ray tasks, verified
5. :func:`execute_and_score`  execution actors per engine with bounded concurrency and
                          driver-side backpressure; Arrow scoring tasks; rows stream into the
                          results store as each batch finishes.

All SQL runs inside :class:`polysql_ray.pipeline.actors.ExecutionActor`, i.e. inside an engine
sandbox (read-only, one statement, engine-side timeout, row cap).
"""
from __future__ import annotations

import collections
import datetime as dt
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import ray

from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.engines.base import Limits
from polysql_ray.errors import server_hint
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.pipeline.plan import Cell, ExecRequest, WorkItem, exec_key
from polysql_ray.pipeline.progress import Progress
from polysql_ray.pipeline.structural import StructuralJob
from polysql_ray.store.parquet import BufferedWriter, ResultsStore, cell_key, score_key, storable_text

log = logging.getLogger("polysql_ray")

SCHEDULING_KEYS = ("actors", "num_cpus", "num_gpus", "resources")


class ConfigError(ValueError):
    """The composed configuration cannot be run; the message names the key to fix."""


@dataclass
class Grid:
    """What the composed config asks for."""

    datasets: dict[str, list[Example]]
    sources: dict[str, list[SourceDatabase]]
    models: list[dict]
    generators: dict[str, Any]
    dialects: list[str]
    levels: list[str]
    cells: list[Cell]
    shapes: dict = field(default_factory=dict)  # (gold_sql, dialect) -> GoldShape, parsed once per run
    policy: Any = None  # the run's ComparisonPolicy, built once (build_grid) and passed as the object


@dataclass
class RunStats:
    """Figures of one run (printed at the end, used by benchmarks)."""

    run_id: str
    cells: int = 0
    items_total: int = 0
    items_skipped: int = 0
    items_scored: int = 0
    exec_requested: dict = field(default_factory=lambda: collections.Counter())
    exec_unique: dict = field(default_factory=lambda: collections.Counter())
    engine_s: dict = field(default_factory=lambda: collections.defaultdict(float))
    replicas: int = 0
    replicas_reused: int = 0
    failed_replicas: set = field(default_factory=set)
    errors: list = field(default_factory=list)
    proven: int = 0
    generation: Any = None
    unavailable: dict = field(default_factory=lambda: collections.Counter())  # engine -> rows left
    unavailable_examples: dict = field(default_factory=dict)  # engine -> one error message
    exec_retries: int = 0       # executions repeated while a server was unavailable
    crashed: int = 0            # executions isolated after killing their engine process
    actor_failures: int = 0     # execution batches lost with their actor and resubmitted
    quarantined: list = field(default_factory=list)
    replicate_s: float = 0.0
    wall_s: float = 0.0
    stage_s: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- 1. the grid

def _as_list(value, default) -> list:
    if value is None:
        return [default]
    return list(value)


def build_grid(cfg: dict, conf_loader) -> Grid:
    """Resolve the sweep grid from the composed (resolved) config mapping.

    ``conf_loader(group, name) -> dict`` loads ``conf/<group>/<name>.yaml`` for grid entries
    given by name. Errors: :class:`ConfigError` naming the offending key.
    """
    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.datasets.registry import dataset_sources, load_dataset
    from polysql_ray.engines.registry import engine_fingerprint, engine_for_dialect
    from polysql_ray.generation.registry import make_generator

    sweep = cfg.get("sweep") or {}
    ds_cfgs = [conf_loader("dataset", d) if isinstance(d, str) else d
               for d in _as_list(sweep.get("datasets"), cfg.get("dataset"))]
    model_cfgs = [conf_loader("model", m) if isinstance(m, str) else m
                  for m in _as_list(sweep.get("models"), cfg.get("model"))]
    raw = sweep.get("dialects") or cfg.get("dialects") or []
    dialects = [raw] if isinstance(raw, str) else [str(d) for d in raw]  # dialects=sqlite works too
    levels = [str(x) for x in (sweep.get("instruction_levels") or cfg.get("instruction_levels") or ["11"])]
    if not dialects:
        raise ConfigError("no dialects: set dialects=[sqlite,duckdb]")
    for d in dialects:
        try:
            engine_for_dialect(d)
        except KeyError as exc:
            raise ConfigError(f"dialects={dialects}: {exc.args[0]}") from None
    names = [m.get("name") for m in model_cfgs]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise ConfigError(f"every model needs a unique `name`; got {names}")

    policy = ComparisonPolicy.from_config(cfg.get("policy") or {})
    limits_fp = Limits(**(cfg.get("limits") or {})).fingerprint() + replication_fingerprint(cfg)
    datasets, sources = {}, {}
    for dcfg in ds_cfgs:
        examples, srcs = load_dataset(dcfg), dataset_sources(dcfg)
        name = dcfg["name"]
        if name in datasets:
            raise ConfigError(f"dataset {name!r} listed twice in the sweep")
        datasets[name], sources[name] = examples, srcs
    generators = {m["name"]: make_generator(m) for m in model_cfgs}
    cells = []
    for m in model_cfgs:
        gen = generators[m["name"]]
        fp = gen.fingerprint()
        for ds in datasets:
            for dialect in dialects:
                for level in (levels if getattr(gen, "uses_prompts", False) else ["-"]):
                    cells.append(Cell(
                        key=cell_key(m["name"], fp, ds, dialect, level, policy.fingerprint(),
                                     limits_fp + engine_fingerprint(engine_for_dialect(dialect),
                                                                    _engine_settings(cfg, engine_for_dialect(dialect)))),
                        model=m["name"], generator=m.get("generator", "?"), generator_fingerprint=fp,
                        dataset=ds, dialect=dialect, target_engine=engine_for_dialect(dialect),
                        instruction_level=level))
    return Grid(datasets, sources, model_cfgs, generators, dialects, levels, cells, policy=policy)


# ------------------------------------------------------------------------ 2. generation

def generate(grid: Grid, cells: list[Cell], stage=None) -> dict[str, list[Prediction]]:
    """Predictions per cell key, aligned with the cell's dataset examples.

    Args:
        grid: the sweep grid; ``grid.generators`` holds one generator per model for the whole
            run, so a vLLM actor pool is started once and shared by every cell of that model.
        cells: the cells to generate.
        stage: a :class:`polysql_ray.pipeline.generate.GenerationStage` (owns the generations
            store ``<results_dir>/generations`` and the run's generation figures); None runs
            the generators directly, without the store.

    Generators with ``uses_prompts`` (hf, openai, vllm) render each prompt once per cell and
    are called only for prompts not already in the generations store; replay and gold read
    their files. Errors: ``RuntimeError`` when a generator returns a wrong number of
    predictions.
    """
    from polysql_ray.pipeline.generate import GenerationStage

    stage = stage if stage is not None else GenerationStage(None)
    out: dict[str, list[Prediction]] = {}
    for cell in cells:
        out[cell.key] = stage.predictions(grid.generators[cell.model], grid.datasets[cell.dataset],
                                          cell.dataset, cell.dialect, cell.instruction_level)
    return out


# ------------------------------------------------------------------------ 3. planning

def plan_work(grid: Grid, cells: list[Cell], stored: set[str], predictions_for, replica_location,
              stats: RunStats) -> tuple[list[WorkItem], dict[str, ExecRequest]]:
    """Work items for every (cell, question) not yet stored, and the unique executions.

    ``predictions_for(cell) -> list[Prediction]`` is called only for cells with pending items,
    so a rerun of a finished sweep generates nothing.
    ``replica_location(dataset, db_id, engine) -> str | None`` gives each copy's location.
    """
    from polysql_ray.comparison.prepare import executed_sql
    from polysql_ray.comparison.shape import analyze_gold
    from polysql_ray.engines.registry import default_dialect

    shapes = grid.shapes  # planning runs twice (before/after replication): parse each gold once
    requests: dict[str, ExecRequest] = {}
    items: list[WorkItem] = []

    def request(engine: str, location: str, sql: str, db_id: str) -> str:
        key = exec_key(engine, location, sql)
        if key not in requests:
            requests[key] = ExecRequest(key, engine, location, sql, db_id)
        return key

    for cell in cells:
        examples = grid.datasets[cell.dataset]
        # a clock-dependent gold (datasets.clock, any dataset) is keyed by the clock value it
        # reads, so a score computed under another clock value is never reused
        keys = [score_key(cell.key, ex.question_id if not ex.extra.get("clock")
                          else f"{ex.question_id}@{ex.extra['clock']}") for ex in examples]
        pending = [i for i, k in enumerate(keys) if k not in stored]
        stats.items_total += len(examples)
        stats.items_skipped += len(examples) - len(pending)
        if not pending:
            continue
        preds = predictions_for(cell)
        for i in pending:
            ex, pred = examples[i], preds[i]
            gold = probe = pr = ties = None
            shape = None
            if ex.gold_error is None:
                gold_sql = executed_sql(ex.gold_sql, ex.gold_dialect, grid.policy)  # policy.distinct
                sk = (gold_sql, ex.gold_dialect)
                if sk not in shapes:
                    shapes[sk] = analyze_gold(gold_sql, ex.gold_dialect)
                shape = shapes[sk]
                src = ex.database
                gold = request(ex.source_engine, src.location, gold_sql, ex.db_id)
                if getattr(shape, "probe_sql", None):
                    probe = request(ex.source_engine, src.location, shape.probe_sql, ex.db_id)
                if getattr(shape, "ties_probe_sql", None):
                    ties = request(ex.source_engine, src.location, shape.ties_probe_sql, ex.db_id)
                if pred.status is GenStatus.OK and pred.pred_sql.strip():
                    loc = replica_location(ex.dataset, ex.db_id, cell.target_engine)
                    if loc is not None:
                        pr = request(cell.target_engine, loc, executed_sql(
                            pred.pred_sql, default_dialect(cell.target_engine), grid.policy), ex.db_id)
            items.append(WorkItem(keys[i], cell, ex, pred, gold, probe, pr, shape, ties_probe=ties))
    return items, requests


# ------------------------------------------------------------------------ 4. replication

def replication_fingerprint(cfg: dict) -> str:
    """What about the replicas can change a score: the type mode and the type-map and
    replication versions (part of every cell key, so a run on other replicas never reuses
    these scores)."""
    from polysql_ray.replication.base import REPLICATION_VERSION
    from polysql_ray.replication.typemap import TYPE_MAP_VERSION

    types = (cfg.get("replication") or {}).get("types", "declared")
    return f"|repl-{types}-tm{TYPE_MAP_VERSION}-r{REPLICATION_VERSION}"


@ray.remote
def _replicate_task(source: SourceDatabase, engine: str, replicas_dir: str, settings: dict | None,
                    source_settings: dict | None, types: str = "declared"):
    from polysql_ray.replication.pernode import Recipe, replicate_locked

    t0 = time.perf_counter()  # under the node's build lock: an actor may rebuild it there too
    replica = replicate_locked(Recipe(source, engine, replicas_dir, types), settings, source_settings)
    return replica, time.perf_counter() - t0


def replicate(grid: Grid, items: list[WorkItem], cfg: dict, progress: Progress, stats: RunStats):
    """Ensure a verified copy of every source database needed by ``items`` in every target
    engine other than its source engine. Returns ``{(dataset, db_id, engine): location}``.

    Copies whose manifest matches are reused (seconds). A copy that fails (dead server,
    data that does not verify) is reported in ``stats.errors`` with the database, engine and
    the engine's own message; the driver then leaves exactly the work that needed it
    unscored (a rerun retries it) and scores everything else.
    """
    from polysql_ray.replication.sources import prepare

    for ds in sorted({it.cell.dataset for it in items}):  # install sources (run's settings)
        for src in grid.sources[ds]:
            prepare(src, _server_settings(cfg, src.engine))
    needed: dict[tuple[str, str, str], SourceDatabase] = {}
    for cell in {it.cell for it in items}:
        for src in grid.sources[cell.dataset]:
            if src.exists and src.engine != cell.target_engine:
                needed[(src.dataset, src.db_id, cell.target_engine)] = src
    locations: dict[tuple[str, str, str], str] = {}
    if not needed:
        return locations
    rdir = os.path.abspath(cfg["replication"]["dir"])
    task = progress.add("replicate", len(needed))
    refs = {}
    for (ds, db, engine), src in sorted(needed.items()):
        refs[_replicate_task.options(num_cpus=0.5).remote(
            src, engine, rdir, _server_settings(cfg, engine), _server_settings(cfg, src.engine),
            cfg["replication"].get("types", "declared"))] = (ds, db, engine)
    t0 = time.perf_counter()
    pending = list(refs)
    errors = []
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        key = refs[done[0]]
        try:
            replica, _ = ray.get(done[0])
            locations[key] = replica.location
            stats.replicas_reused += bool(replica.reused)
        except Exception as exc:  # noqa: BLE001 — reported with the database named
            stats.failed_replicas.add(key)
            errors.append(f"replicating {key[0]}/{key[1]} into {key[2]} failed: {_root_message(exc)}"
                          f"{server_hint(key[2], str(exc))}")
        progress.advance(task)
    stats.replicas = len(locations)
    stats.replicate_s = time.perf_counter() - t0
    stats.errors.extend(_fold(errors))
    return locations


def _root_message(exc: BaseException) -> str:
    """The engine's own message on one line (every line kept: the first names host and port)."""
    cause = getattr(exc, "cause", None)
    lines = [ln.strip() for ln in str(cause if cause is not None else exc).strip().splitlines() if ln.strip()]
    return " ".join(lines)[:600]


def _fold(errors: list[str], keep: int = 3) -> list[str]:
    """Many databases failing for one reason (a dead server) read as one error, not nineteen."""
    by_engine: dict[str, list[str]] = collections.defaultdict(list)
    for e in errors:
        by_engine[e.split(" into ", 1)[1].split(" ", 1)[0]].append(e)
    out = []
    for engine, errs in sorted(by_engine.items()):
        out.extend(errs[:keep])
        if len(errs) > keep:
            out.append(f"... and {len(errs) - keep} more databases into {engine}")
    return out


def _server_settings(cfg: dict, engine: str) -> dict | None:
    """Connection settings of a server engine (None for embedded engines, whose location is a file)."""
    from polysql_ray.engines.registry import engine_spec

    return None if engine_spec(engine).embedded else _engine_settings(cfg, engine)


def _engine_settings(cfg: dict, engine: str) -> dict:
    settings = dict((cfg.get("engines") or {}).get(engine) or {})
    for k in SCHEDULING_KEYS:
        settings.pop(k, None)
    return settings


# ----------------------------------------------------------------- 5. execution and scoring

def execute_and_score(items: list[WorkItem], requests: dict[str, ExecRequest], cfg: dict, store: ResultsStore,
                      progress: Progress, stats: RunStats, run_id: str, policy) -> None:
    """Run every unique execution once on its engine's actors and score items in Arrow
    batches as soon as their executions are done, writing each batch to the store.

    Backpressure: at most ``pipeline.max_inflight_exec`` batches per actor and
    ``pipeline.max_inflight_score`` scoring tasks are in flight; the driver holds only
    ObjectRefs and small metadata, never result sets.
    """
    from polysql_ray.pipeline.actors import ExecutionActor, score_batch
    from polysql_ray.replication.pernode import recipes_for

    pcfg = cfg["pipeline"]
    exec_bs, score_bs = int(pcfg["exec_batch_size"]), int(pcfg["score_batch_size"])
    limits = dict(cfg["limits"])

    _warn_malformed(items)
    # order work so that score batches complete early: group by dataset and database
    items = sorted(items, key=lambda it: (it.cell.dataset, it.example.db_id, it.example.position, it.cell.key))
    batches = [items[i:i + score_bs] for i in range(0, len(items), score_bs)]
    waiting_on: dict[str, list[int]] = collections.defaultdict(list)
    users: collections.Counter = collections.Counter()
    missing = [0] * len(batches)
    queues: dict[str, collections.deque] = collections.defaultdict(collections.deque)
    enqueued: set[str] = set()
    for b, batch in enumerate(batches):
        deps = {d for it in batch for d in it.deps}
        missing[b] = len(deps)
        users.update(deps)
        for d in sorted(deps):
            waiting_on[d].append(b)
            if d not in enqueued:
                enqueued.add(d)
                queues[requests[d].engine].append(requests[d])

    engines = sorted(queues)
    actors: dict[str, list] = {}
    recipes = recipes_for(requests, items, os.path.abspath(cfg["replication"]["dir"]),
                          cfg["replication"].get("types", "declared"))
    for engine in engines:
        ecfg = (cfg.get("engines") or {}).get(engine) or {}
        n = max(1, int(ecfg.get("actors", 1)))
        # a dead actor (killed, OOM, an engine crash) is restarted and its in-flight batches are
        # retried by Ray; what still fails is split into single statements below
        cls = ray.remote(ExecutionActor).options(num_cpus=float(ecfg.get("num_cpus", 0.5)),
                                                 num_gpus=float(ecfg.get("num_gpus", 0) or 0),
                                                 resources=dict(ecfg.get("resources") or {}),
                                                 max_restarts=-1, max_task_retries=ACTOR_TASK_RETRIES)
        settings = _engine_settings(cfg, engine)
        if recipes.get(engine):  # embedded replicas: rebuilt on a node that lacks them
            settings["_replica_recipes"] = recipes[engine]
        actors[engine] = [cls.remote(engine, settings, limits, float(pcfg.get("unavailable_retry_s", 120)))
                          for _ in range(n)]
    _check_fits(cfg, engines)
    max_exec = int(pcfg["max_inflight_exec"])
    max_score = int(pcfg["max_inflight_score"])

    ref_of: dict[str, Any] = {}
    exec_inflight: dict[Any, tuple[str, int, list[str]]] = {}
    inflight_per_actor: dict[tuple[str, int], int] = collections.Counter()
    score_inflight: dict[Any, int] = {}
    ready: collections.deque[int] = collections.deque(b for b in range(len(batches)) if missing[b] == 0)
    ptasks = {e: progress.add(f"execute [{e}]", len(queues[e])) for e in engines}
    stask = progress.add("score", len(items))
    rr = collections.Counter()
    singles: dict[str, collections.deque] = collections.defaultdict(collections.deque)
    attempts: collections.Counter = collections.Counter()
    alone: set[tuple[str, int]] = set()  # actors running one suspect statement by itself

    def submit_exec() -> None:
        for engine in engines:
            q, one = queues[engine], singles[engine]
            pool = actors[engine]
            while q or one:
                if one:  # a suspect runs alone on an idle actor, so a crash blames only it
                    idle = [i for i in range(len(pool)) if inflight_per_actor[(engine, i)] == 0]
                    if not idle:
                        break
                    a, reqs = idle[0], [one.popleft()]
                    alone.add((engine, a))
                else:
                    free = [i for i in range(len(pool)) if (engine, i) not in alone]
                    if not free:
                        break
                    a = min(free, key=lambda i: inflight_per_actor[(engine, i)])
                    if inflight_per_actor[(engine, a)] >= max_exec:
                        break
                    reqs = [q.popleft() for _ in range(min(exec_bs, len(q)))]
                refs = pool[a].execute_batch.options(num_returns=len(reqs) + 1).remote(
                    [(r.location, r.sql) for r in reqs])
                refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
                for r, ref in zip(reqs, refs[:-1]):
                    ref_of[r.key] = ref
                exec_inflight[refs[-1]] = (engine, a, [r.key for r in reqs])
                inflight_per_actor[(engine, a)] += 1
                rr[engine] += 1

    def submit_scores() -> None:
        while ready and len(score_inflight) < max_score:
            b = ready.popleft()
            batch = batches[b]
            deps = sorted({d for it in batch for d in it.deps})
            index = {d: i for i, d in enumerate(deps)}
            metas = [_item_meta(it, index, run_id) for it in batch]
            ref = score_batch.options(num_cpus=float(pcfg.get("score_num_cpus", 0.25))).remote(
                metas, [ref_of[d] for d in deps], policy, limits)
            score_inflight[ref] = b

    def exec_failed(engine: str, keys: list[str], exc: BaseException) -> list[str]:
        """An execution batch failed although Ray restarted its actor and retried it: split it
        into single statements, so a statement that crashes its engine process is isolated;
        a single statement that failed :data:`CRASH_ATTEMPTS` times is recorded as its own
        runtime failure. Returns the keys now settled."""
        from polysql_ray.engines.base import ExecStatus, ExecutionResult

        stats.actor_failures += 1
        settled = []
        for k in keys:
            attempts[k] += len(keys) == 1  # only a statement that failed alone is blamed
            if len(keys) > 1 or attempts[k] < CRASH_ATTEMPTS:
                singles[engine].append(requests[k])
                continue
            stats.crashed += 1
            log.warning("isolated an execution that killed the %s engine process %d times: %s",
                        engine, attempts[k], _root_message(exc)[:200])
            ref_of[k] = ray.put(ExecutionResult.failure(
                ExecStatus.RUNTIME, f"the {engine} engine process died running this statement "
                f"({attempts[k]} attempts): {_root_message(exc)[:300]}"))
            settled.append(k)
        return settled

    submit_exec()
    submit_scores()
    try:
        with BufferedWriter(store, int(pcfg.get("flush_rows", 1))) as writer:
            while exec_inflight or score_inflight or ready:
                waitable = list(exec_inflight) + list(score_inflight)
                done, _ = ray.wait(waitable, num_returns=1, timeout=5.0)
                for ref in done:
                    if ref in exec_inflight:
                        engine, a, keys = exec_inflight.pop(ref)
                        inflight_per_actor[(engine, a)] -= 1
                        alone.discard((engine, a))
                        try:
                            st = ray.get(ref)
                        except ray.exceptions.RayError as exc:
                            keys = exec_failed(engine, keys, exc)
                        else:
                            stats.engine_s[engine] += st["engine_s"]
                            stats.exec_retries += st.get("retries", 0)
                            progress.advance(ptasks[engine], st["n"])
                        for k in keys:
                            for b in waiting_on.pop(k, ()):
                                missing[b] -= 1
                                if missing[b] == 0:
                                    ready.append(b)
                    else:
                        b = score_inflight.pop(ref)
                        table = ray.get(ref)
                        writer.add(table)
                        _count_unavailable(table, stats)
                        stats.items_scored += table.num_rows
                        progress.advance(stask, table.num_rows)
                        # release result sets no later batch needs
                        for d in {d for it in batches[b] for d in it.deps}:
                            users[d] -= 1
                            if users[d] == 0:
                                ref_of.pop(d, None)
                        batches[b] = []
                submit_exec()
                submit_scores()
    finally:
        for pool in actors.values():
            for a in pool:
                ray.kill(a)


#: Ray retries of an execution batch whose actor died (the actor itself restarts without limit).
ACTOR_TASK_RETRIES = 1
#: A single statement whose execution killed its actor this many times is a runtime failure.
CRASH_ATTEMPTS = 2


def _count_unavailable(table, stats: RunStats) -> None:
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


def _check_fits(cfg: dict, engines: list[str]) -> None:
    """Fail fast instead of hanging when the execution actors would reserve every CPU of the
    cluster and leave none for a scoring task, or ask for a custom resource (``engines.<name>.
    resources``) that no node has (Ray would wait forever). Errors: :class:`ConfigError`."""
    have = ray.cluster_resources()
    for e in engines:
        for name, amount in dict(((cfg.get("engines") or {}).get(e) or {}).get("resources") or {}).items():
            if float(have.get(name, 0.0)) < float(amount) - 1e-9:
                raise ConfigError(
                    f"engines.{e}.resources asks for {amount:g} of custom resource {name!r}, but the "
                    f"Ray cluster has {float(have.get(name, 0.0)):g}: start a node with "
                    f"resources={{\"{name}\": N}} or drop engines.{e}.resources")
    total = have.get("CPU", 0.0)
    reserved = sum(max(1, int(((cfg.get("engines") or {}).get(e) or {}).get("actors", 1)))
                   * float(((cfg.get("engines") or {}).get(e) or {}).get("num_cpus", 0.5)) for e in engines)
    need = reserved + float(cfg["pipeline"].get("score_num_cpus", 0.25))
    if need > total + 1e-9:
        raise ConfigError(
            f"execution actors reserve {reserved:g} CPUs and a scoring task needs "
            f"{cfg['pipeline'].get('score_num_cpus', 0.25)}, but the Ray cluster has {total:g}: lower "
            f"engines.<name>.actors / engines.<name>.num_cpus or pipeline.score_num_cpus")


def _warn_malformed(items: list[WorkItem], show: int = 3) -> None:
    """One line per prediction whose text has no UTF-8 encoding (a lone surrogate): it is
    refused by the sandbox (``rejected``) and stored escaped; the run goes on."""
    from polysql_ray.engines.guard import malformed_text

    bad = [(it, msg) for it in items if it.prediction.pred_sql
           for msg in [malformed_text(it.prediction.pred_sql)] if msg and "surrogate" in msg]
    for it, msg in bad[:show]:
        print(f"polysql_ray: warning: prediction {it.example.question_id!r} of model {it.cell.model!r}: "
              f"{msg}; scored as rejected, stored escaped", file=sys.stderr)
    if len(bad) > show:
        print(f"polysql_ray: warning: ... and {len(bad) - show} more predictions with malformed text",
              file=sys.stderr)


def _item_meta(it: WorkItem, index: dict[str, int], run_id: str) -> dict:
    ex, cell, pred = it.example, it.cell, it.prediction
    return {
        "key": it.key, "cell_key": cell.key, "run_id": run_id, "model": cell.model,
        "generator": cell.generator, "generator_fingerprint": cell.generator_fingerprint,
        "dataset": cell.dataset, "dialect": cell.dialect, "source_engine": ex.source_engine,
        "target_engine": cell.target_engine, "instruction_level": cell.instruction_level,
        "question_id": ex.question_id, "db_id": ex.db_id, "gold_sql": storable_text(ex.gold_sql),
        "pred_sql": storable_text(pred.pred_sql), "gen_status": GenStatus(pred.status).value,
        "_gold": index.get(it.gold), "_probe": index.get(it.probe), "_pred": index.get(it.pred),
        "_ties_probe": index.get(it.ties_probe),
        "_shape": it.shape, "_gen_status": GenStatus(pred.status).value, "_gold_error": ex.gold_error,
        "_gold_dialect": ex.gold_dialect,
        "_structural": it.structural, "_flags": tuple(ex.extra.get("flags", ())),
    }


# --------------------------------------------------------------------------- the run

def ray_init_kwargs(cfg: dict) -> dict[str, Any]:
    """``ray.init`` arguments: a NEW local cluster (``address="local"``) unless ``ray.address``
    is set, so a run never attaches to a cluster some earlier ``ray start`` left on the
    machine (another user's, another venv's, a stale one). Joining is explicit:
    ``ray.address=auto`` or ``ray.address=ray://host:10001`` (or ``RAY_ADDRESS`` via the
    config's interpolation)."""
    rc = cfg.get("ray") or {}
    kwargs: dict[str, Any] = {"include_dashboard": bool(rc.get("include_dashboard", False)),
                              "log_to_driver": bool(rc.get("log_to_driver", False)),
                              "configure_logging": True, "logging_level": logging.WARNING}
    if rc.get("address"):
        kwargs["address"] = str(rc["address"])
    else:
        kwargs["address"] = "local"
        if rc.get("num_cpus"):
            kwargs["num_cpus"] = int(rc["num_cpus"])
    return kwargs


def init_ray(cfg: dict) -> None:
    """Start the run's own local Ray cluster, or join ``ray.address`` when set
    (:func:`ray_init_kwargs`). A local cluster gets a reaper (:data:`REAPER`): if the driver
    dies without shutting Ray down (``kill -9``), the cluster's processes go with it."""
    if ray.is_initialized():
        return
    kwargs = ray_init_kwargs(cfg)
    ray.init(**kwargs)
    if kwargs["address"] == "local":
        _start_reaper()


#: Runs beside a driver that started a local cluster: every second it notes the driver's
#: descendant processes (pid + start time, from /proc); once the driver is gone it SIGKILLs the
#: noted ones still alive (raylet, GCS, agents, workers that Ray would otherwise leave behind
#: after ``kill -9`` of the driver). Exits quietly when nothing is left.
REAPER = """
import os, sys, time, signal
from pathlib import Path
driver = int(sys.argv[1])
def stat(pid):
    try:
        f = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        return int(f[1]), f[19]
    except (OSError, ValueError, IndexError):
        return None
def tree():
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = stat(d.name)
            if st:
                kids.setdefault(st[0], []).append((int(d.name), st[1]))
    out, todo = {}, [driver]
    while todo:
        for pid, t0 in kids.get(todo.pop(), []):
            if pid not in out and pid != os.getpid():
                out[pid] = t0
                todo.append(pid)
    return out
seen = {}
while stat(driver) is not None:
    seen.update(tree())
    time.sleep(1.0)
for pid, t0 in seen.items():
    st = stat(pid)
    if st is not None and st[1] == t0:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def _start_reaper() -> None:
    import subprocess

    if not os.path.isdir("/proc"):
        return
    subprocess.Popen([sys.executable, "-c", REAPER, str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)


def run(cfg: dict, conf_loader, config_yaml: str = "", console=None) -> tuple[RunStats, Any]:
    """Run the composed config end to end. Returns (stats, EX table as an Arrow table).

    Finished work is never lost: each scored batch is written (commit by rename) as it
    arrives, so ``kill -9`` loses at most the batch being written; a rerun skips every stored
    key. The run holds the results_dir writer lock throughout (a concurrent run waits).
    Executions that could not run (server down past ``pipeline.unavailable_retry_s``) are
    stored as ``unavailable`` and counted in ``stats.unavailable``; the next run rescores them.
    """
    from polysql_ray.config import validate

    t_start = time.perf_counter()
    validate(cfg)
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]
    stats = RunStats(run_id=run_id)
    store = ResultsStore(cfg["results_dir"], cfg.get("store"))
    with store.lock(run_id):  # one writer per results_dir: concurrent runs never double a key
        return _run_locked(cfg, conf_loader, config_yaml, console, store, stats, run_id, t_start)


def _run_locked(cfg, conf_loader, config_yaml, console, store, stats, run_id, t_start):
    from polysql_ray.pipeline.generate import GenerationStage, close_generators
    from polysql_ray.pipeline.manifest import run_manifest
    from polysql_ray.pipeline.summary import ex_table
    from polysql_ray.store.generations import GenerationsStore

    grid = build_grid(cfg, conf_loader)
    stats.cells = len(grid.cells)
    policy = grid.policy
    store.write_run(run_id, run_manifest(cfg, grid, policy), config_yaml)
    gen_stage = GenerationStage(GenerationsStore(cfg["results_dir"], cfg.get("store")))
    stats.generation = gen_stage.stats
    if any(m.get("generator") == "vllm" for m in grid.models):
        init_ray(cfg)  # vLLM actor pools live on the cluster the driver joins

    t0 = time.perf_counter()
    stored = store.existing_keys([c.key for c in grid.cells])
    predictions: dict[str, list[Prediction]] = {}

    def predictions_for(cell: Cell) -> list[Prediction]:
        if cell.key not in predictions:
            predictions.update(generate(grid, [cell], gen_stage))
        return predictions[cell.key]

    try:
        with Progress(enabled=bool(cfg.get("progress", True)), console=console) as progress:
            locations: dict = {}
            items, requests = plan_work(grid, grid.cells, stored, predictions_for,
                                        lambda ds, db, eng: _location(grid, locations, ds, db, eng), stats)
            stats.stage_s["plan+generate"] = time.perf_counter() - t0
            if items:
                init_ray(cfg)
                t0 = time.perf_counter()
                # structural checks need no replica: they run while the copies are made
                structural = StructuralJob(str(cfg["pipeline"].get("structural_check", "prove")),
                                           int(cfg["pipeline"]["score_batch_size"]), policy).submit(items)
                locations.update(replicate(grid, items, cfg, progress, stats))
                stats.stage_s["replicate"] = time.perf_counter() - t0
                # second planning pass now that replica locations are known (cheap, no generation)
                items, requests = plan_work(grid, grid.cells, stored, predictions_for,
                                            lambda ds, db, eng: _location(grid, locations, ds, db, eng),
                                            RunStats(run_id=run_id))
                if stats.failed_replicas:  # leave that work unscored: a rerun retries it
                    items = [it for it in items if (it.cell.dataset, it.example.db_id, it.cell.target_engine)
                             not in stats.failed_replicas]
                t0 = time.perf_counter()
                stats.proven = structural.apply(items, progress)
                stats.stage_s["structural"] = time.perf_counter() - t0
                requests = _count_requests(items, requests, stats)
                t0 = time.perf_counter()
                execute_and_score(items, requests, cfg, store, progress, stats, run_id, policy)
                stats.stage_s["execute+score"] = time.perf_counter() - t0
    finally:
        close_generators(grid.generators)
        store.compact()
    stats.quarantined = list(store.quarantined)
    stats.stage_s["generate"] = gen_stage.stats.seconds
    stats.wall_s = time.perf_counter() - t_start
    table = ex_table(store, [c.key for c in grid.cells])
    return stats, table


def _count_requests(items: list[WorkItem], requests: dict[str, ExecRequest], stats: RunStats) -> dict[str, ExecRequest]:
    """Keep only executions some item still needs; count requested vs unique per engine."""
    kept: dict[str, ExecRequest] = {}
    for it in items:
        for d in it.deps:
            stats.exec_requested[requests[d].engine] += 1
            if d not in kept:
                kept[d] = requests[d]
                stats.exec_unique[requests[d].engine] += 1
    return kept


def _location(grid: Grid, locations: dict, dataset: str, db_id: str, engine: str) -> str | None:
    for src in grid.sources[dataset]:
        if src.db_id == db_id:
            if src.engine == engine:
                return src.location
            return locations.get((dataset, db_id, engine))
    return None
