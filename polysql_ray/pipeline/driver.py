"""The Ray driver: one process streams the sweep grid through a pipeline of bounded stages.

Stages, in data-flow order (the sections of this module, in the same order; :func:`run` is
their composition):

1. :func:`build_grid`     composed config -> datasets (examples), generators, cells
2. :func:`pending_work`   which (cell, question) pairs the store lacks, read cell group by
                          cell group (a finished sweep stops here: nothing generated, no Ray)
3. :func:`~polysql_ray.pipeline.replicate.replicate` each (source database, target engine) copy the pending cells need
                          (cells x sources: known before any prediction), as Ray tasks, verified
4. generation             :class:`polysql_ray.pipeline.generate.GenerationFeed`: model
                          generators (openai/hf/vllm) run in one thread per model, cells in
                          grid order, ``pipeline.generation_prefetch_cells`` ahead of the
                          consumer, starting during replication; each cell's predictions are
                          handed over batch by batch (``pipeline.generation_batch_size``), as
                          each batch is stored; replay/gold on demand
5. :class:`~polysql_ray.pipeline.planner.Planner` per chunk of a generated batch (``pipeline.plan_chunk_items``): work items and
                          their executions, planned once; the structural check where it pays
                          (:func:`polysql_ray.pipeline.structural.proves_before`)
6. :func:`schedule`       :class:`polysql_ray.pipeline.scheduler.Scheduler`: executions on
                          per-engine actors, Arrow scoring tasks, store writes flushed by rows
                          and seconds
7. :func:`summarize`      the store compacted, the EX table, ``runs/<run_id>/summary.json``

With ``suite.enabled`` (suite EX), :mod:`polysql_ray.pipeline.suite_stage` builds and copies
the distilled suites after stage 3 and the scheduler runs the predictions that pass on the
original on them before their rows are stored (stage 6); nothing changes when it is off.

The Ray cluster itself (start or join, lean head, reaper, fit checks, shutdown) is
:mod:`polysql_ray.pipeline.cluster`.

Execution and scoring of a cell start with its first generated batch, before the cell (or the
sweep) has finished generating: the stage clock shows ``execute[<engine>]`` and ``score``
starting before ``generate[<model>]`` ends. A generator that fails lets the work already
planned finish and be stored before the run stops.

The driver keeps at most ``pipeline.max_pending_items`` items between planning and their
stored row (it waits on the scheduler before planning more), plus one cell's predictions per
model generator being consumed and ``generation_prefetch_cells`` more per model: its memory
does not grow with the sweep. It holds ObjectRefs, never result sets. Gold results and other
identical executions are run once while any item needs them and then kept in a bounded LRU of
ObjectRefs (``pipeline.exec_cache_size``; see :mod:`polysql_ray.pipeline.scheduler`). The
end-of-run EX table is aggregated by DuckDB over a column subset of the store
(:func:`polysql_ray.pipeline.summary.ex_table`); stage timestamps go to
``runs/<run_id>/summary.json``.

All SQL runs inside :class:`polysql_ray.pipeline.actors.ExecutionActor`, i.e. inside an engine
sandbox (read-only, one statement, engine-side timeout, row cap).
"""
from __future__ import annotations

import collections
import datetime as dt
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.engines.base import Limits
from polysql_ray.errors import ConfigError
from polysql_ray.generation.base import GeneratorUnavailable, Prediction
from polysql_ray.pipeline.cluster import (  # noqa: F401 (init_ray, ray_init_kwargs: re-exported)
    RunCluster, check_fits, init_ray, ray_init_kwargs,
)
from polysql_ray.pipeline.plan import Cell
from polysql_ray.pipeline.planner import MalformedWarnings, PlanAhead, Planner
from polysql_ray.pipeline.progress import Progress
from polysql_ray.pipeline.replicate import replicate, replicate_task, replication_fingerprint
from polysql_ray.pipeline.settings import engine_settings_of, server_settings
from polysql_ray.pipeline.structural import StructuralJob
from polysql_ray.store.parquet import ResultsStore, cell_key, score_key


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
    policy: Any = None  # the run's first ComparisonPolicy, built once (build_grid) and passed as the object
    policies: dict = field(default_factory=dict)  # name -> ComparisonPolicy of every cell (policies=[...])
    identities: dict = field(default_factory=dict)  # engine -> engine_identity, read at run start
    source_fps: dict = field(default_factory=dict)  # (dataset, db_id) -> source content fingerprint


@dataclass
class RunStats:
    """Figures of one run (printed at the end, used by benchmarks)."""

    run_id: str
    cells: int = 0
    items_total: int = 0
    items_skipped: int = 0
    items_scored: int = 0
    exec_requested: dict = field(default_factory=lambda: collections.Counter())  # engine -> item needs
    exec_unique: dict = field(default_factory=lambda: collections.Counter())     # engine -> executions run
    exec_reused: int = 0        # needs met by an execution already run or running (LRU, in flight)
    verdicts_reused: int = 0    # items whose verdict was an identical earlier item's (not rescored)
    batches_scored_in_driver: int = 0  # scoring batches the waiting driver scored itself
    planned_ahead: int = 0      # items analyzed while the cluster started (planner.PlanAhead)
    exec_repeated: int = 0      # executions of a key this run had already executed (evicted from
                                # the LRU, needed again); tracked for the first 1M unique keys
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
    clock: Any = None           # StageClock: first start / last end per stage (runs/<id>/summary.json)
    suite: Any = None           # SuiteStage when suite.enabled (its figures: summary.json "suite")


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
    from polysql_ray.datasets.registry import dataset_sources, load_dataset
    from polysql_ray.engines.registry import engine_fingerprint, engine_for_dialect, identity_fingerprint
    from polysql_ray.extras import check_installed, engine_part
    from polysql_ray.generation.registry import make_generator
    from polysql_ray.pipeline.suite_stage import suite_identity

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
    from polysql_ray.datasets.base import name_problem

    for n in names:  # a model name is a folder of the store (scores/<dataset>/<model>/)
        if name_problem(n):
            raise ConfigError(f"model.name={n!r} cannot name a folder ({name_problem(n)}): "
                              f"use letters, digits, '_', '-' or '.'")
    # optional engines and generators installed? one line naming the extra, before any work
    check_installed({**{engine_part(engine_for_dialect(d), engine_settings_of(cfg, engine_for_dialect(d))):
                        f"dialects=[{d}]" for d in dialects},
                     **{("generator", str(m.get("generator"))): f"model {m.get('name')}" for m in model_cfgs}})

    from polysql_ray.comparison.policy import load_policies
    from polysql_ray.config import CONF_DIR

    try:
        policies = {p.name: p for p in load_policies(cfg, CONF_DIR / "policy")}
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    policy = next(iter(policies.values()))
    # suite_identity: "" when suites are off (cell keys unchanged), else the suite version and settings
    limits_fp = Limits(**(cfg.get("limits") or {})).fingerprint() + replication_fingerprint(cfg) + suite_identity(cfg)
    datasets, sources = {}, {}
    for dcfg in ds_cfgs:
        examples, srcs = load_dataset(dcfg), dataset_sources(dcfg)
        name = dcfg["name"]
        if name in datasets:
            raise ConfigError(f"dataset {name!r} listed twice in the sweep")
        datasets[name], sources[name] = examples, srcs
    identities, source_fps = run_identities(cfg, dialects, sources)
    generators = {m["name"]: make_generator(m) for m in model_cfgs}
    for m in model_cfgs:  # prediction files out of line: one line now, before Ray starts
        gen, only = generators[m["name"]], m.get("dialects")
        if callable(getattr(gen, "check", None)):
            for ds, examples in datasets.items():
                gen.check(examples, [d for d in dialects if not only or d in only])
    cells = []
    for m in model_cfgs:
        gen = generators[m["name"]]
        fp = gen.fingerprint()
        only = m.get("dialects")  # a model whose SQL is written for some dialects only
        for ds in datasets:
            for dialect in dialects:
                if only and dialect not in only:
                    continue
                engine = engine_for_dialect(dialect)
                # the servers the cell's SQL meets, as read at run start: target and sources
                served = "|id-" + "+".join(identity_fingerprint(identities[e]) for e in
                                           [engine, *sorted({src.engine for src in sources[ds]})])
                for level in (levels if getattr(gen, "uses_prompts", False) else ["-"]):
                    # one cell per policy, adjacent: the later policies' items find every
                    # execution of the first in flight or in the LRU (nothing runs twice)
                    for pol in policies.values():
                        cells.append(Cell(
                            key=cell_key(m["name"], fp, ds, dialect, level, pol.fingerprint(),
                                         limits_fp + engine_fingerprint(engine, engine_settings_of(cfg, engine))
                                         + served),
                            model=m["name"], generator=m.get("generator", "?"), generator_fingerprint=fp,
                            dataset=ds, dialect=dialect, target_engine=engine,
                            instruction_level=level, policy=pol.name))
    return Grid(datasets, sources, model_cfgs, generators, dialects, levels, cells, policy=policy,
                policies=policies, identities=identities, source_fps=source_fps)


def run_identities(cfg: dict, dialects: list[str], sources: dict) -> tuple[dict, dict]:
    """What the run's SQL will meet, read now (run start): ``{engine: engine_identity}`` for
    every target engine of ``dialects`` and every source engine of ``sources``, and
    ``{(dataset, db_id): source content fingerprint}``
    (:func:`polysql_ray.replication.sources.source_fingerprint`). Both enter the score keys:
    a server with another version or result-changing setting, or a fixed source, is rescored."""
    from polysql_ray.engines.registry import engine_for_dialect, engine_identity
    from polysql_ray.replication.sources import source_fingerprint

    engines = sorted({engine_for_dialect(d) for d in dialects} | {s.engine for ss in sources.values() for s in ss})
    identities = {e: engine_identity(e, engine_settings_of(cfg, e)) for e in engines}
    fps = {(ds, s.db_id): source_fingerprint(s, server_settings(cfg, s.engine))
           for ds, ss in sources.items() for s in ss}
    return identities, fps


def identity_warnings(grid: Grid) -> list[str]:
    """One line per target engine whose server setting is known to break name resolution for
    a source of the sweep: table names case-sensitive on the server (MySQL/MariaDB
    ``lower_case_table_names=0``) while the source resolves them in any case (SQLite), so gold
    SQL written as ``FROM Singer`` for table ``singer`` fails there (Spider gold on MariaDB:
    70% instead of 96%). Each line names the fix."""
    from polysql_ray.engines.registry import engine_spec

    out = []
    for engine in sorted({c.target_engine for c in grid.cells}):
        ident = grid.identities.get(engine) or {}
        lctn = (ident.get("settings") or {}).get("lower_case_table_names")
        rules = engine_spec(engine).identifiers
        if lctn is None or rules is None or rules.tables_ci is not None or rules.case_insensitive("table", int(lctn)):
            continue
        srcs = sorted({s.engine for c in grid.cells if c.target_engine == engine for s in grid.sources[c.dataset]
                       if (engine_spec(s.engine).identifiers or rules).case_insensitive("table")})
        if srcs:
            out.append(f"{engine} ({ident.get('product')} {ident.get('version')} at {ident.get('endpoint', '?')}) "
                       f"runs with lower_case_table_names={lctn}: table names are case-sensitive there but "
                       f"not on the {'/'.join(srcs)} source, so SQL such as `FROM Singer` for table singer fails "
                       f"(Spider gold ~70% instead of ~96%); restart the server with --lower-case-table-names=1 "
                       f"and rerun (scores under the new setting are keyed apart and rescored)")
    return out


# ----------------------------------------------------------------------- 2. pending work

def score_keys(grid: Grid, cell: Cell) -> list[str]:
    """The store key of every (cell, question), in example order. A clock-dependent gold
    (``datasets.clock``, any dataset) is keyed by the clock value it reads, so a score
    computed under another clock value is never reused; every key carries the content
    fingerprint of the question's source database (``grid.source_fps``), so a fixed source
    is rescored."""
    fps = grid.source_fps
    return [score_key(cell.key, (ex.question_id if not ex.extra.get("clock") else f"{ex.question_id}@{ex.extra['clock']}")
                      + f"@src-{fps.get((cell.dataset, ex.db_id), '')}") for ex in grid.datasets[cell.dataset]]


#: Questions whose stored keys :func:`pending_work` asks the store for at a time.
PENDING_GROUP_ITEMS = 100_000
#: ``pending_work`` value of a cell whose every question is pending (no index list is held).
ALL = None


def pending_work(grid: Grid, store: ResultsStore, stats: RunStats, group_items: int) -> dict[str, tuple | None]:
    """Which (cell, question) pairs are not in the store yet, read cell group by cell group.

    Args:
        group_items: the store is asked for the keys of consecutive cells totalling about
            this many questions at a time (memory: one group's stored keys).

    Returns:
        ``{cell key: ALL | (example index, ...)}`` for the cells with pending work only
        (:data:`ALL`: every question of the cell is pending, the usual case of a new sweep,
        held without an index list). Counts ``items_total``/``items_skipped`` into ``stats``.
    """
    pending: dict[str, tuple | None] = {}
    group: list[Cell] = []
    size = 0

    def check(cells: list[Cell]) -> None:
        stored = store.existing_keys([c.key for c in cells]) if cells else set()
        for c in cells:
            keys = score_keys(grid, c)
            todo = tuple(i for i, k in enumerate(keys) if k not in stored)
            stats.items_total += len(keys)
            stats.items_skipped += len(keys) - len(todo)
            if len(todo) == len(keys):
                pending[c.key] = ALL
            elif todo:
                pending[c.key] = todo

    for cell in grid.cells:
        group.append(cell)
        size += len(grid.datasets[cell.dataset])
        if size >= group_items:
            check(group)
            group, size = [], 0
    check(group)
    return pending


# ------------------------------------------------------------------------ 3. replication

# :func:`polysql_ray.pipeline.replicate.replicate` (its own module), called by :func:`run`.


# ------------------------------------------------------------------------- 4. generation

# :class:`polysql_ray.pipeline.generate.GenerationFeed` (its own module): started by :func:`run`
# before replication, consumed cell by cell by :func:`schedule`.


# --------------------------------------------------------------------------- 5. planning

# :class:`polysql_ray.pipeline.planner.Planner` (its own module): built by :func:`run` after
# replication, used by :func:`schedule` per chunk of a generated batch.


# ------------------------------------------------------------------------- 6. scheduling

def schedule(cfg: dict, grid: Grid, cells: list[Cell], pending: dict, feed, planner: Planner,
             locations: dict, store: ResultsStore, progress: Progress, stats: RunStats, run_id: str,
             clock, window: int, chunk: int, mode: str, suite=None) -> None:
    """Plan, execute and score every pending (cell, question) of ``cells``, in grid order, and
    store each scored batch (:class:`~polysql_ray.pipeline.scheduler.Scheduler`).

    Args:
        pending: :func:`pending_work`'s ``{cell key: ALL | indices}``.
        feed: the run's :class:`~polysql_ray.pipeline.generate.GenerationFeed`.
        locations: :func:`replicate`'s replica locations (embedded replicas are given to the
            execution actors as recipes: an actor rebuilds a copy its node lacks).
        window: at most this many items between planning and their stored row
            (``pipeline.max_pending_items``).
        chunk: items planned at a time (``pipeline.plan_chunk_items``).
        mode: ``pipeline.structural_check``.
        suite: the run's :class:`~polysql_ray.pipeline.suite_stage.SuiteStage` (suite EX) or None.
    """
    from polysql_ray.pipeline.scheduler import Scheduler
    from polysql_ray.pipeline.structural import proves_before
    from polysql_ray.replication.pernode import recipes_for

    pcfg = cfg["pipeline"]
    # embedded replicas: an execution actor rebuilds a copy its node lacks
    recipes = recipes_for([(src, eng, loc) for (ds, db, eng), loc in locations.items()
                           for src in grid.sources[ds] if src.db_id == db]
                          + (suite.replica_triples() if suite is not None else []),
                          os.path.abspath(cfg["replication"]["dir"]),
                          cfg["replication"].get("types", "declared"))

    def engine_settings(c: dict, engine: str) -> dict:
        settings = engine_settings_of(c, engine)
        if recipes.get(engine):
            settings["_replica_recipes"] = recipes[engine]
        return settings

    warnings = MalformedWarnings()
    with Scheduler(cfg, store, progress, stats, run_id, grid.policy, clock,
                   engine_settings=engine_settings, suite=suite, policies=grid.policies) as sched:
        sched.start_engines(run_engines(grid, cells))  # their processes start while the first chunk is planned
        for cell in cells:
            keys = score_keys(grid, cell)
            wanted = pending_of(pending, cell)
            prove = proves_before(mode, cell.target_engine, cfg)
            last = False
            while not last:  # the cell's predictions, batch by batch as they are generated
                indices, preds, last = _next_batch(feed, cell, sched, progress)
                todo = [i for i in indices if wanted is None or i in wanted]
                by_index = dict(zip(indices, preds))
                for start in range(0, len(todo), chunk):
                    items, requests = planner.plan(cell, todo[start:start + chunk], keys, by_index)
                    warnings.check(items)
                    job = (StructuralJob(mode, int(pcfg["score_batch_size"]),
                                         grid.policies.get(cell.policy, grid.policy), cfg).submit(items)
                           if prove else None)
                    sched.wait_below(window - len(items))
                    sched.add(items, requests, job)
                    sched.poll()  # what finished while this chunk was planned: actors never wait on planning
                del preds, by_index
            del keys
        sched.drain()
    warnings.close()


def run_engines(grid: Grid, cells: list[Cell]) -> list[str]:
    """The engines whose execution actors ``cells`` need: their target engines and their
    datasets' source engines (sorted)."""
    return sorted({c.target_engine for c in cells} | {src.engine for c in cells for src in grid.sources[c.dataset]})


def pending_of(pending: dict, cell: Cell) -> set[int] | None:
    """The question indices of ``cell`` still to score (:func:`pending_work`), None for all."""
    return None if pending[cell.key] is ALL else set(pending[cell.key])


def _next_batch(feed, cell: Cell, sched, progress: Progress) -> tuple[list[int], list[Prediction], bool]:
    """The next generated batch of ``cell`` (:meth:`GenerationFeed.take`). While the model
    generates it, the work already planned keeps executing and scoring. A generator that fails
    (:class:`~polysql_ray.generation.base.GeneratorUnavailable`: its engines are gone) first
    lets the planned work finish and be stored (its predictions are stored: none of it is
    lost), then raises."""
    try:
        got = feed.take(cell, timeout=0)
        while got is None:
            progress.tick()  # the log shows a run waiting on its generator
            if sched.busy():
                sched.step(timeout=0.2)
            got = feed.take(cell, timeout=0 if sched.busy() else 0.5)
        return got
    except GeneratorUnavailable:
        sched.drain()
        raise


# ---------------------------------------------------------------------------- 7. summary

def summarize(store: ResultsStore, grid: Grid, stats: RunStats, t_start: float):
    """The EX table of every cell of the grid (an Arrow table, aggregated by DuckDB from the
    compacted store) and ``runs/<run_id>/summary.json``; sets ``stats.wall_s``."""
    from polysql_ray.pipeline.summary import ex_table, write_run_summary

    t0 = time.perf_counter()
    table = ex_table(store, [c.key for c in grid.cells])
    stats.stage_s["ex_table"] = time.perf_counter() - t0
    stats.wall_s = time.perf_counter() - t_start
    write_run_summary(store, stats)
    return table


# --------------------------------------------------------------------------- the run

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
    """The streaming pipeline (module docstring: stages 1-7), holding the results_dir lock."""
    from polysql_ray.pipeline.generate import GenerationFeed, GenerationStage, close_generators
    from polysql_ray.pipeline.manifest import run_manifest
    from polysql_ray.pipeline.scheduler import StageClock
    from polysql_ray.store.generations import GenerationsStore

    clock = StageClock()
    stats.clock = clock
    pcfg = cfg["pipeline"]
    window = max(1, int(pcfg.get("max_pending_items", 20_000)))
    chunk = max(1, min(window // 2 or 1, int(pcfg.get("plan_chunk_items", 2_000))))
    mode = str(pcfg.get("structural_check", "auto"))
    grid = build_grid(cfg, conf_loader)  # 1
    for line in identity_warnings(grid):
        print(f"polysql_ray: warning: {line}", file=sys.stderr)
    stats.cells = len(grid.cells)
    store.write_run(run_id, run_manifest(cfg, grid, grid.policy), config_yaml)
    gen_stage = GenerationStage(GenerationsStore(cfg["results_dir"], cfg.get("store")))
    stats.generation = gen_stage.stats
    cluster = RunCluster(cfg)
    if any(m.get("generator") == "vllm" for m in grid.models):
        cluster.start()  # vLLM actor pools live on the cluster the driver joins

    t0 = time.perf_counter()
    # 2: stored keys are read for ~100k questions at a time (a few MB of keys; fewer store scans)
    pending = pending_work(grid, store, stats, group_items=max(window, PENDING_GROUP_ITEMS))
    cells = [c for c in grid.cells if c.key in pending]
    stats.stage_s["plan"] = time.perf_counter() - t0
    feed = None
    try:
        with Progress(enabled=bool(cfg.get("progress", True)), console=console) as progress:
            if cells:
                planner = Planner(grid, {}, stats.failed_replicas, Limits(**(cfg.get("limits") or {})))  # 5

                def new_feed():  # 4: model generators start on the first cells while the copies are made
                    return GenerationFeed(gen_stage, grid.generators, grid.datasets, cells,
                                          prefetch=int(pcfg.get("generation_prefetch_cells", 1)), clock=clock,
                                          batch_size=int(pcfg.get("generation_batch_size", 0)),
                                          pending=pending)

                if bool(pcfg.get("plan_ahead", True)) and \
                        not any(getattr(grid.generators[c.model], "uses_prompts", False) for c in cells):
                    # files only (replay, gold): the first batches are analyzed while Ray starts
                    with PlanAhead(new_feed(), planner, cells, lambda c: pending_of(pending, c), window) as feed:
                        cluster.start()
                    stats.planned_ahead = feed.analyzed
                else:
                    cluster.start()
                check_fits(cfg, run_engines(grid, cells),
                           {c.model: grid.generators[c.model] for c in cells})  # pools that will start
                feed = feed or new_feed()
                t0 = time.perf_counter()
                locations = replicate(grid, cells, cfg, progress, stats, clock)  # 3
                stats.stage_s["replicate"] = time.perf_counter() - t0
                # suite EX (off: None): suites built/reused and copied like the sources
                from polysql_ray.pipeline.suite_stage import SuiteStage

                stats.suite = SuiteStage.prepare(cfg, grid, cells, progress, stats, replicate_task, server_settings,
                                                 originals=locations)
                planner.locate(locations)
                t0 = time.perf_counter()
                schedule(cfg, grid, cells, pending, feed, planner, locations, store, progress, stats,
                         run_id, clock, window, chunk, mode, suite=stats.suite)  # 6
                stats.stage_s["execute+score"] = time.perf_counter() - t0
    finally:
        if feed is not None:
            feed.close()
        close_generators(grid.generators)
        # compaction and the EX table need no cluster: the run's own workers (~200 MiB
        # each) are gone before the driver reads the store
        cluster.shutdown()
        t0 = time.perf_counter()
        store.compact()
        stats.stage_s["compact"] = time.perf_counter() - t0
    stats.quarantined = list(store.quarantined)
    stats.stage_s["generate"] = gen_stage.stats.seconds
    return stats, summarize(store, grid, stats, t_start)  # 7
