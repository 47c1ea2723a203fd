"""Suite EX in the pipeline: predictions that pass on the original database are run on every
database of the question's distilled suite (:mod:`polysql_ray.suites`) and scored again.

A prediction is **suite-correct** when it matches the gold on the original database *and* on
every suite database, under the run's comparison policy (the same :func:`decide`, so the same
flags, now recorded per database). Zhong, Yu and Klein (EMNLP 2020, "Semantic Evaluation for
Text-to-SQL with Distilled Test Suites", section 2) define test-suite accuracy this way; here
the same suite is replicated into every target engine, so it is test-suite accuracy per dialect.

Stages (driven by :class:`polysql_ray.pipeline.scheduler.Scheduler` and the driver):

1. :meth:`SuiteStage.prepare` (after replication, before scheduling): build or reuse the suite
   of every SQLite source database of the pending cells (:func:`polysql_ray.suites.suite_for`,
   as Ray tasks, cached under ``suite.dir``), and replicate each suite database into every
   target engine of those cells exactly as a source is replicated (same type decisions, same
   verification). A copy that fails is reported in ``RunStats.errors`` and its predictions get
   ``suite_verdict = unavailable`` (infrastructure, never a model's failure), never skipped.
2. :meth:`SuiteStage.plan` (a batch's score rows just arrived): **early exit**: only rows whose
   ``verdict`` is ``pass`` (and not proven structurally: a proof holds on every database) get
   suite executions; every other row's ``suite_verdict`` is its own ``verdict``, at no cost.
   For each passing row and suite database: the gold (with its probes) on the SQLite suite
   file and the prediction (with its probes) on the copy in the target engine. Executions are
   keyed as every other (:func:`~polysql_ray.pipeline.plan.exec_key`), so a gold's result on a
   suite database is computed once per question and reused by every model and dialect through
   the scheduler's in-flight dedup and LRU (``pipeline.exec_cache_size``), as gold results are.
3. :func:`suite_score` (a Ray task): one :func:`decide` per suite database; the first database
   that fails names ``suite_failed_db``; a database that cannot decide (the gold itself
   ambiguous there, or an inconclusive verdict) is left out and flagged.

Cost (bounded, reported): at most ``suite.size`` x (1 + prediction probes) extra executions per
prediction that passes on the original, plus ``suite.size`` x (1 + gold probes) per question
shared by all cells; the counts are in ``runs/<run_id>/summary.json`` (``suite``) and the
run's end lines. Build and replication are once per seed (cached).

Cell key: :func:`suite_identity` (version and settings) enters every cell key when suites are
on, so scores with and without suites (or under another seed or size) never mix; each row
also stores its suite's content key (``suite_key``, :meth:`polysql_ray.suites.Suite.key`).
"""
from __future__ import annotations

import collections
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import ray

from polysql_ray.errors import root_message
from polysql_ray.pipeline.plan import ExecRequest, exec_key


def settings_of(cfg: dict):
    """The run's :class:`~polysql_ray.suites.SuiteSettings` (``suite.*``)."""
    from polysql_ray.suites import SuiteSettings

    return SuiteSettings.from_config(cfg.get("suite"))


#: Version of the suite scoring rules (:func:`_suite_verdict`): ``gp1`` leaves out, per question,
#: a suite database on which the gold's own text disagrees across the engines while it agrees
#: on the original. Part of the cell key with the suite version.
SUITE_SCORING = "gp1"


def suite_identity(cfg: dict) -> str:
    """What about suites can change a score, for the cell key: "" when ``suite.enabled`` is
    false (cell keys as before suites existed), else the suite version, every setting that
    decides what a seed builds and the scoring rules
    (``|suite-<version>-s<seed>-n<size>-c<candidates>-r<max_rows>-<SUITE_SCORING>``).
    The suite's content follows from these and the source (whose fingerprint is in every
    score key); its content key is stored per row (``suite_key``)."""
    from polysql_ray.suites import SUITE_VERSION

    s = settings_of(cfg)
    if not s.enabled:
        return ""
    return f"|suite-{SUITE_VERSION}-s{s.seed}-n{s.size}-c{s.candidates}-r{s.max_rows}-{SUITE_SCORING}"


@ray.remote
def _build_task(db_id: str, source: str, gold_sqls: list[str], cache_dir: str, dataset: str, settings, policy):
    from polysql_ray.suites import suite_for

    return suite_for(db_id, source, settings.seed, settings.size, gold_sqls, cache_dir, dataset=dataset,
                     settings=settings, policy=policy)


@dataclass
class SuiteJob:
    """The suite phase of one scored batch: the rows' table, per suite row its metadata, and
    the executions they need (by exec key)."""

    table: pa.Table
    metas: list[dict]
    requests: dict[str, ExecRequest]
    batch: int                       # the scheduler batch whose rows these are


@dataclass
class SuiteStage:
    """Suites of the run's source databases and their copies (module docstring).

    Attributes:
        suites: ``{(dataset, db_id): Suite}``.
        copies: ``{(dataset, db_id, engine): [location or None per suite database]}``
            (None: that copy failed; the SQLite engine uses the suite files themselves).
        stats: figures for ``summary.json``: suites built/reused, build and replication
            seconds, rows run on the suite, executions requested / unique per engine.
    """

    policy: Any
    suites: dict = field(default_factory=dict)
    copies: dict = field(default_factory=dict)
    sources: dict = field(default_factory=dict)      # (dataset, db_name) -> SourceDatabase of a suite db
    stats: dict = field(default_factory=lambda: {
        "suites": 0, "suites_reused": 0, "suite_databases": 0, "build_s": 0.0, "replicate_s": 0.0,
        "copies": 0, "copies_failed": 0, "rows": 0, "rows_on_suite": 0, "rows_proven": 0,
        "exec_requested": collections.Counter(), "exec_unique": collections.Counter()})
    _gold_sql: dict = field(default_factory=dict)
    #: ``{(dataset, db_id, engine): location}`` of the original databases' replicas (the
    #: driver's), for the gold's own cross-engine check on the original (:func:`_suite_verdict`)
    originals: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ 1. build, replicate
    @classmethod
    def prepare(cls, cfg: dict, grid, cells, progress, run_stats, replicate_task, server_settings,
                originals: dict | None = None):
        """Build (or reuse) the suites of the cells' SQLite source databases and copy each
        suite database into every target engine of those cells (module docstring, stage 1).

        Args:
            replicate_task: the driver's replication Ray task (same copy, same verification).
            server_settings: ``(cfg, engine) -> settings | None`` of the driver.
            originals: ``{(dataset, db_id, engine): location}`` of the original replicas.
        Returns: the stage, or None when ``suite.enabled`` is false.
        """
        from polysql_ray.datasets.example import SourceDatabase
        from polysql_ray.suites.spec import suite_sources

        settings = settings_of(cfg)
        if not settings.enabled:
            return None
        stage = cls(grid.policy, originals=dict(originals or {}))
        cache = os.path.abspath(settings.dir or os.path.join(os.path.dirname(cfg["replication"]["dir"]), "suites"))
        t0 = time.perf_counter()
        wanted: dict[tuple[str, str], tuple[str, list[str]]] = {}
        for ds in sorted({c.dataset for c in cells}):
            for db, inputs in suite_sources(grid.datasets[ds]).items():
                wanted[(ds, db)] = inputs
        skipped = sorted({(c.dataset, ex.db_id) for c in cells for ex in grid.datasets[c.dataset]
                          if ex.source_engine != "sqlite"})
        if skipped:
            print(f"polysql_ray: warning: suites are built from SQLite sources only; {len(skipped)} "
                  f"database(s) ({skipped[0][0]}/{skipped[0][1]} ...) get no suite verdict", file=sys.stderr)
        task = progress.add("suites", len(wanted))
        refs = {_build_task.options(num_cpus=0.5).remote(db, path, golds, cache, ds, settings, grid.policy): (ds, db)
                for (ds, db), (path, golds) in sorted(wanted.items())}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ds, db = refs[done[0]]
            try:
                suite = ray.get(done[0])
            except Exception as exc:  # noqa: BLE001 - reported with the database named
                run_stats.errors.append(f"building the suite of {ds}/{db} failed: {root_message(exc)}; "
                                        f"its questions get no suite verdict")
                progress.advance(task)
                continue
            stage.suites[(ds, db)] = suite
            stage.stats["suites"] += 1
            stage.stats["suites_reused"] += bool(suite.figures.get("reused"))
            stage.stats["suite_databases"] += len(suite.databases)
            progress.advance(task)
        stage.stats["build_s"] = round(time.perf_counter() - t0, 3)
        # 1b: every suite database into every target engine the cells need (not SQLite: the file is the source)
        t0 = time.perf_counter()
        rdir = os.path.abspath(cfg["replication"]["dir"])
        types = cfg["replication"].get("types", "declared")
        jobs = {}
        for cell in cells:
            for (ds, db), suite in stage.suites.items():
                if ds != cell.dataset:
                    continue
                key = (ds, db, cell.target_engine)
                if cell.target_engine == "sqlite":
                    stage.copies[key] = [d.path for d in suite.databases]
                    continue
                for k, d in enumerate(suite.databases):
                    src = SourceDatabase(f"{ds}_suite", d.name, "sqlite", d.path)
                    stage.sources[(ds, d.name)] = src
                    jobs.setdefault((ds, db, cell.target_engine, k), src)
        task = progress.add("replicate suites", len(jobs))
        refs = {replicate_task.options(num_cpus=0.5).remote(src, engine, rdir, server_settings(cfg, engine), None,
                                                            types): (ds, db, engine, k)
                for (ds, db, engine, k), src in sorted(jobs.items())}
        for (ds, db, engine, k) in jobs:
            stage.copies.setdefault((ds, db, engine), [None] * len(stage.suites[(ds, db)].databases))
        errors = []
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ds, db, engine, k = refs[done[0]]
            try:
                replica, _ = ray.get(done[0])
                stage.copies[(ds, db, engine)][k] = replica.location
                stage.stats["copies"] += 1
            except Exception as exc:  # noqa: BLE001 - reported, never skipped silently
                stage.stats["copies_failed"] += 1
                errors.append(f"replicating suite database {ds}/{jobs[(ds, db, engine, k)].db_id} into {engine} "
                              f"failed: {root_message(exc)}; its passing predictions are suite-unavailable")
            progress.advance(task)
        run_stats.errors.extend(errors[:5] + ([f"... and {len(errors) - 5} more suite copies"] if len(errors) > 5
                                              else []))
        stage.stats["replicate_s"] = round(time.perf_counter() - t0, 3)
        return stage

    def replica_triples(self) -> list[tuple]:
        """``(SourceDatabase, engine, location)`` of every suite copy, for the per-node recipes."""
        out = []
        for (ds, db, engine), locs in self.copies.items():
            if engine == "sqlite":
                continue
            for d, loc in zip(self.suites[(ds, db)].databases, locs):
                if loc is not None:
                    out.append((self.sources[(ds, d.name)], engine, loc))
        return out

    # ------------------------------------------------------------------ 2. plan (early exit)
    def plan(self, table: pa.Table, items: list, batch: int) -> tuple[pa.Table, SuiteJob | None]:
        """The suite phase of one scored batch (``table``: its rows, in the order of ``items``).

        Returns ``(table, None)`` with the suite columns filled when no row passes on the
        original (or none has a suite), else ``(table, job)``: the job's executions must run
        and :func:`suite_score` completes the rows."""
        from polysql_ray.comparison.prepare import executed_sql
        from polysql_ray.comparison.shape import analyze_prediction
        from polysql_ray.engines.registry import default_dialect
        from polysql_ray.generation.base import GenStatus

        verdicts = table.column("verdict").to_pylist()
        bases = table.column("basis").to_pylist()
        cols = {c: [None] * table.num_rows for c in ("suite_key", "suite_verdict", "suite_failed_db",
                                                    "suite_reason", "suite_flags", "suite_dbs")}
        metas, requests = [], {}

        def request(engine: str, location: str, sql: str | None, db: str) -> str | None:
            if not sql:
                return None
            key = exec_key(engine, location, sql)
            if key not in requests:
                requests[key] = ExecRequest(key, engine, location, sql, db)
            return key

        for i, it in enumerate(items):
            ex, cell = it.example, it.cell
            suite = self.suites.get((cell.dataset, ex.db_id))
            if suite is None:
                continue  # no suite for this database: no suite verdict (null, not counted)
            self.stats["rows"] += 1
            cols["suite_key"][i] = suite.key()
            cols["suite_dbs"][i] = 0
            cols["suite_failed_db"][i] = ""
            if verdicts[i] != "pass":  # early exit: not correct on the original, not suite-correct
                cols["suite_verdict"][i], cols["suite_reason"][i], cols["suite_flags"][i] = verdicts[i], "original", ""
                continue
            if bases[i] == "proven" or it.pred is None:  # a sound proof holds on every database
                self.stats["rows_proven"] += 1
                cols["suite_verdict"][i], cols["suite_reason"][i], cols["suite_flags"][i] = "pass", "proven", ""
                continue
            locs = self.copies.get((cell.dataset, ex.db_id, cell.target_engine))
            if locs is None or any(loc is None for loc in locs):
                cols["suite_verdict"][i], cols["suite_reason"][i], cols["suite_flags"][i] = \
                    "unavailable", "suite_copy_failed", ""
                continue
            self.stats["rows_on_suite"] += 1
            sk = (ex.gold_sql, ex.gold_dialect)
            if sk not in self._gold_sql:
                gsql = executed_sql(ex.gold_sql, ex.gold_dialect, self.policy)
                # the gold's own determinism facts: its LIMIT cut widened, to tell a suite
                # database on which the gold itself is ambiguous (ties at its cut)
                self._gold_sql[sk] = (gsql, analyze_prediction(gsql, ex.gold_dialect))
            gold_sql, gold_ps = self._gold_sql[sk]
            pred_sql = executed_sql(it.prediction.pred_sql, default_dialect(cell.target_engine), self.policy)
            ps = it.pred_shape
            # the gold's own text on the target (the gold model's prediction): where it agrees with
            # the gold on the original but not on a suite database, that database's values make the
            # engines disagree, and it is left out for this question (_suite_verdict)
            cross = cell.target_engine != ex.source_engine
            gold_as_pred = executed_sql(ex.gold_sql, default_dialect(cell.target_engine), self.policy) \
                if cross else None
            orig_loc = self.originals.get((cell.dataset, ex.db_id, cell.target_engine)) if cross else None
            orig = (request(ex.source_engine, ex.database.location, gold_sql, ex.db_id),
                    request(ex.source_engine, ex.database.location, getattr(it.shape, "probe_sql", None), ex.db_id),
                    request(cell.target_engine, orig_loc, gold_as_pred, ex.db_id)) if orig_loc else None
            dbs = []
            for d, loc in zip(suite.databases, locs):
                dbs.append((d.name,
                            request(ex.source_engine, d.path, gold_sql, d.name),
                            request(ex.source_engine, d.path, getattr(it.shape, "probe_sql", None), d.name),
                            request(ex.source_engine, d.path, getattr(it.shape, "ties_probe_sql", None), d.name),
                            request(cell.target_engine, loc, pred_sql, d.name),
                            request(cell.target_engine, loc, ps.cut_probe_sql if ps is not None and not ps.static
                                    else None, d.name),
                            request(cell.target_engine, loc, ps.ties_probe_sql if ps is not None and not ps.static
                                    else None, d.name),
                            request(ex.source_engine, d.path, gold_ps.cut_probe_sql if not gold_ps.static else None,
                                    d.name),
                            request(cell.target_engine, loc, gold_as_pred, d.name) if orig else None))
            metas.append({"row": i, "dbs": dbs, "shape": it.shape, "pred_shape": ps, "gold_shape": gold_ps,
                          "gen_status": GenStatus(it.prediction.status).value,
                          "pair": (gold_sql, pred_sql, ex.gold_dialect, default_dialect(cell.target_engine),
                                   ex.source_engine, cell.target_engine),
                          "orig": orig,
                          "gold_pair": (gold_sql, gold_as_pred, ex.gold_dialect, default_dialect(cell.target_engine),
                                        ex.source_engine, cell.target_engine) if orig else None})
        for c, vals in cols.items():
            idx = table.schema.get_field_index(c)
            table = table.set_column(idx, table.schema.field(c), pa.array(vals, table.schema.field(c).type))
        if not metas:
            return table, None
        return table, SuiteJob(table, metas, requests, batch)

    def count(self, req: ExecRequest, new: bool) -> None:
        """Count a suite execution the scheduler was asked for (``new``: it will run)."""
        self.stats["exec_requested"][req.engine] += 1
        if new:
            self.stats["exec_unique"][req.engine] += 1

    def summary(self) -> dict:
        """The stage's figures (``summary.json`` ``suite``)."""
        out = dict(self.stats)
        out["exec_requested"] = dict(out["exec_requested"])
        out["exec_unique"] = dict(out["exec_unique"])
        return out


# ------------------------------------------------------------------------ 3. suite scoring

@ray.remote
def suite_score(job: SuiteJob, keys: list[str], result_refs: list, policy) -> pa.Table:
    """Complete the suite columns of ``job.table``'s passing rows (module docstring, stage 3).

    Args:
        job: the :class:`SuiteJob` (``metas[*]["dbs"]``: per suite database its name and the
            exec keys of gold, gold probe, gold ties probe, prediction, prediction probes).
        keys, result_refs: the exec keys of ``job.requests`` and their ObjectRefs (same order).
        policy: the run's ComparisonPolicy.
    Returns: the table with ``suite_verdict``/``suite_failed_db``/``suite_reason``/
    ``suite_flags``/``suite_dbs`` set on every row of ``job.metas``.
    """
    from polysql_ray.lazy import arrow_without_pandas

    arrow_without_pandas()  # a Ray worker of the run (polysql_ray.lazy)
    results = dict(zip(keys, ray.get(list(result_refs)) if result_refs else []))
    table = job.table
    cols = {c: table.column(c).to_pylist() for c in ("suite_verdict", "suite_failed_db", "suite_reason",
                                                     "suite_flags", "suite_dbs")}
    for m in job.metas:
        try:
            verdict, failed, reason, flags, n = _suite_verdict(m, results, policy)
        except Exception as exc:  # noqa: BLE001 - one item never aborts the batch
            verdict, failed, reason, flags, n = "inconclusive", "", f"compare_error: {type(exc).__name__}", "", 0
        i = m["row"]
        cols["suite_verdict"][i], cols["suite_failed_db"][i], cols["suite_reason"][i] = verdict, failed, reason
        cols["suite_flags"][i], cols["suite_dbs"][i] = flags, n
    for c, vals in cols.items():
        idx = table.schema.get_field_index(c)
        table = table.set_column(idx, table.schema.field(c), pa.array(vals, table.schema.field(c).type))
    return table


#: Flags of the gold decided against itself that make a suite database unable to decide the
#: question: the gold's own answer is not determinate there (ties at or across its LIMIT cut).
GOLD_AMBIGUOUS = frozenset({"ties_at_limit", "ties_truncated", "nondeterministic_gold", "nondeterministic_pred"})


def _suite_verdict(meta: dict, results: dict, policy) -> tuple[str, str, str, str, int]:
    """``(suite_verdict, suite_failed_db, suite_reason, suite_flags, databases decided)`` of one
    prediction that passed on the original.

    Per suite database: first the gold against itself (:func:`decide` with the gold as the
    prediction and its own cut probe): where the gold is not a determinate answer there (ties
    at its ``ORDER BY ... LIMIT`` cut, a nested cut in a tie) the database cannot decide this
    question and is left out (flag ``<db>:gold_ambiguous``); so is a database where the gold
    does not run (distillation keeps none such for golds that run on the source) and one where
    the prediction's verdict is ``inconclusive`` (its flags are kept). Across engines, the
    gold's own text on the target (the gold model's prediction) is then decided against the
    gold there: where it passes on the original database but not on this one, the database's
    values make the engines disagree for this question (a disagreement the original lacks,
    which generation avoids for the declared hazards, ``suites/portability.py``, and this
    catches for the rest), so it is left out too (flag ``<db>:gold_unportable``). A prediction is
    suite-correct when no database that decides fails; the first failing database is named.
    An execution that could not run (``unavailable``) makes the row suite-unavailable
    (infrastructure, never the model's failure)."""
    from polysql_ray.comparison.verdict import Pair, decide
    from polysql_ray.engines.base import ExecStatus

    get = lambda k: results.get(k) if k is not None else None  # noqa: E731
    first_fail = None
    flags, n = [], 0
    gold_pair = Pair(*meta["gold_pair"]) if meta.get("gold_pair") else None
    portable = False  # the gold's own text agrees across the engines on the original
    if meta.get("orig"):
        og, op, ogp = (get(k) for k in meta["orig"])
        if og is not None and og.ok and ogp is not None:
            portable = decide("ok", og, op, ogp, meta["shape"], policy, None, pair=gold_pair).verdict == "pass"
    for name, g, p, t, pr, pp, pt, gc, gp in meta["dbs"]:
        gold, pred = get(g), get(pr)
        if any(r is not None and r.status is ExecStatus.UNAVAILABLE
               for r in (gold, pred, get(p), get(t), get(pp), get(pt), get(gc), get(gp))):
            return "unavailable", name, "suite_unavailable", ",".join(flags), n
        if gold is None or not gold.ok:
            flags.append(f"{name}:gold_{gold.status.value if gold is not None else 'missing'}")
            continue
        own = decide("ok", gold, get(p), gold, meta["shape"], policy, None, ties_probe=get(t),
                     pred_shape=meta["gold_shape"], pred_probe=get(gc))
        if own.verdict != "pass" or GOLD_AMBIGUOUS & set(own.flags):
            flags.append(f"{name}:gold_ambiguous")
            continue
        if portable and gp is not None and get(gp) is not None and decide(
                "ok", gold, get(p), get(gp), meta["shape"], policy, None, pair=gold_pair,
                ties_probe=get(t)).verdict != "pass":
            flags.append(f"{name}:gold_unportable")
            continue
        v = decide(meta["gen_status"], gold, get(p), pred, meta["shape"], policy, None, pair=Pair(*meta["pair"]),
                   ties_probe=get(t), pred_shape=meta["pred_shape"], pred_probe=get(pp), pred_ties_probe=get(pt))
        if v.flags:
            flags.append(f"{name}:{'+'.join(v.flags)}")
        if v.verdict not in ("pass", "fail"):
            continue  # this database cannot decide the prediction: left out, flags kept
        n += 1
        if v.verdict == "fail" and first_fail is None:
            first_fail = (name, v.reason)
    if first_fail is not None:
        return "fail", first_fail[0], first_fail[1], ",".join(flags), n
    return "pass", "", "match", ",".join(flags), n
