"""Stage 5 of the driver (:mod:`polysql_ray.pipeline.driver`): work items and the unique
executions they need, per chunk of a generated batch, planned once after replication (every
replica location known); warnings for predictions whose text cannot be sent."""
from __future__ import annotations

import sys

from polysql_ray.generation.base import GenStatus
from polysql_ray.pipeline.plan import Cell, ExecRequest, WorkItem, exec_key


class Planner:
    """Work items for one chunk of one cell, planned once (after replication, so every
    replica location is known).

    Args:
        grid: the sweep grid (:class:`~polysql_ray.pipeline.driver.Grid`; ``grid.shapes`` caches the gold analysis per unique gold SQL:
            bounded by the datasets' questions, not by the sweep).
        locations: ``{(dataset, db_id, engine): location}`` of the replicas.
        failed: ``{(dataset, db_id, engine)}`` whose copy failed: their items are left out
            (unscored; a rerun retries them) and counted in :attr:`left_out`.
        limits: the run's :class:`~polysql_ray.engines.base.Limits`: a prediction its
            :meth:`~polysql_ray.engines.base.Limits.refuse_length` refuses is seen by no parser
            here (no policy rewrite, no analysis, no probe); its execution is ``rejected``.

    The location-free half of planning (the policy rewrite and the analysis of each unique
    gold and predicted SQL, :meth:`analyze`) may run before the replicas are known, e.g. while
    the cluster starts (:class:`PlanAhead`); :meth:`locate` adds the replicas' locations.
    """

    def __init__(self, grid, locations: dict, failed: set, limits=None) -> None:
        from polysql_ray.engines.base import Limits

        self.grid, self.failed, self.limits = grid, failed, limits or Limits()
        self.left_out = 0
        self._where: dict[tuple[str, str, str], str | None] = {}
        for ds, srcs in grid.sources.items():
            for src in srcs:
                self._where[(ds, src.db_id, src.engine)] = src.location
        self._where.update(locations)
        self._gold_sql: dict[tuple[str, str], str] = {}
        self._pred_shapes: dict[tuple[str, str], object] = {}

    def locate(self, locations: dict) -> None:
        """Add replica locations (``{(dataset, db_id, engine): location}``, :func:`replicate`'s)."""
        self._where.update(locations)

    def location(self, dataset: str, db_id: str, engine: str) -> str | None:
        """The database copy of ``db_id`` in ``engine`` (the source itself on its own engine)."""
        return self._where.get((dataset, db_id, engine))

    def plan(self, cell: Cell, indices, keys: list[str], preds) \
            -> tuple[list[WorkItem], dict[str, ExecRequest]]:
        """Items for ``indices`` of ``cell`` and the executions they need (by exec key);
        ``preds[i]`` is the Prediction of example ``i`` (a list in example order, or a dict of
        one generated batch)."""
        from polysql_ray.engines.registry import default_dialect

        grid = self.grid
        policy = grid.policies.get(cell.policy, grid.policy)
        examples = grid.datasets[cell.dataset]
        pred_dialect = default_dialect(cell.target_engine)
        requests: dict[str, ExecRequest] = {}
        items: list[WorkItem] = []

        def request(engine: str, location: str, sql: str, db_id: str) -> str:
            key = exec_key(engine, location, sql)
            if key not in requests:
                requests[key] = ExecRequest(key, engine, location, sql, db_id)
            return key

        for i in indices:
            ex, pred = examples[i], preds[i]
            if (cell.dataset, ex.db_id, cell.target_engine) in self.failed:
                self.left_out += 1
                continue
            gold = probe = pr = ties = pred_probe = pred_ties = None
            shape = pred_shape = None
            if ex.gold_error is None:
                shape, gold_sql = self._gold(ex, policy)
                src = ex.database
                gold = request(ex.source_engine, src.location, gold_sql, ex.db_id)
                if getattr(shape, "probe_sql", None):
                    probe = request(ex.source_engine, src.location, shape.probe_sql, ex.db_id)
                if getattr(shape, "ties_probe_sql", None):
                    ties = request(ex.source_engine, src.location, shape.ties_probe_sql, ex.db_id)
                if pred.status is GenStatus.OK and pred.pred_sql.strip():
                    loc = self.location(ex.dataset, ex.db_id, cell.target_engine)
                    if loc is not None and self.limits.refuse_length(pred.pred_sql) is not None:
                        pr = request(cell.target_engine, loc, pred.pred_sql, ex.db_id)  # refused unparsed
                    elif loc is not None:
                        pred_sql, pred_shape = self._pred(pred, pred_dialect, policy)
                        pr = request(cell.target_engine, loc, pred_sql, ex.db_id)
                        if pred_shape.cut_probe_sql and not pred_shape.static:
                            pred_probe = request(cell.target_engine, loc, pred_shape.cut_probe_sql, ex.db_id)
                        if pred_shape.ties_probe_sql and not pred_shape.static:
                            pred_ties = request(cell.target_engine, loc, pred_shape.ties_probe_sql, ex.db_id)
            items.append(WorkItem(keys[i], cell, ex, pred, gold, probe, pr, shape, ties_probe=ties,
                                  pred_shape=pred_shape, pred_probe=pred_probe, pred_ties_probe=pred_ties))
        return items, requests

    def analyze(self, cell: Cell, indices, preds, between=None) -> int:
        """The location-free half of :meth:`plan` for ``indices`` of ``cell``: the policy
        rewrite and analysis of each gold and predicted SQL, into the caches :meth:`plan` reads
        (the same calls, so a planned item is the same whether or not it was analyzed first).
        ``between()``: called before each item; False stops. Returns how many were done."""
        from polysql_ray.engines.registry import default_dialect

        policy = self.grid.policies.get(cell.policy, self.grid.policy)
        examples = self.grid.datasets[cell.dataset]
        pred_dialect = default_dialect(cell.target_engine)
        done = 0
        for i in indices:
            if between is not None and not between():
                break
            ex, pred = examples[i], preds[i]
            done += 1
            if ex.gold_error is not None:
                continue
            self._gold(ex, policy)
            if pred.status is GenStatus.OK and pred.pred_sql.strip() and \
                    self.limits.refuse_length(pred.pred_sql) is None:  # what plan() analyzes
                self._pred(pred, pred_dialect, policy)
        return done

    def _pred(self, pred, dialect: str, policy):
        """(executed predicted SQL, :meth:`pred_shape`) of a prediction ``plan`` sends
        (status OK, text within ``limits.max_sql_chars``) under ``policy``."""
        from polysql_ray.comparison.prepare import executed_sql

        pred_sql = executed_sql(pred.pred_sql, dialect, policy)
        return pred_sql, self.pred_shape(pred_sql, dialect)

    def _gold(self, ex, policy):
        """(``analyze_gold`` shape, executed gold SQL) of ``ex`` under ``policy``, once per
        unique (gold SQL, dialect, ``policy.distinct``) (``policy.distinct`` rewrites it)."""
        from polysql_ray.comparison.prepare import executed_sql
        from polysql_ray.comparison.shape import analyze_gold

        shapes = self.grid.shapes
        sk = (ex.gold_sql, ex.gold_dialect, policy.distinct)
        if sk not in shapes:
            gold_sql = executed_sql(ex.gold_sql, ex.gold_dialect, policy)
            shapes[sk] = analyze_gold(gold_sql, ex.gold_dialect)
            self._gold_sql[sk] = gold_sql
        return shapes[sk], self._gold_sql[sk]

    def pred_shape(self, pred_sql: str, dialect: str):
        """:func:`~polysql_ray.comparison.shape.analyze_prediction` of a prediction, once per
        unique (SQL, dialect) of the run (models and instruction levels repeat SQL)."""
        from polysql_ray.comparison.shape import analyze_prediction

        key = (pred_sql, dialect)
        if key not in self._pred_shapes:
            if len(self._pred_shapes) >= 100_000:  # bounded: a sweep's distinct SQL can be large
                self._pred_shapes.clear()
            self._pred_shapes[key] = analyze_prediction(pred_sql, dialect)
        return self._pred_shapes[key]


class MalformedWarnings:
    """One line per prediction whose text has no UTF-8 encoding (a lone surrogate), for the
    first ``show`` of the run; it is refused by the sandbox (``rejected``) and stored escaped;
    :meth:`close` prints how many more there were."""

    def __init__(self, show: int = 3) -> None:
        self.show, self.seen = show, 0

    def check(self, items: list[WorkItem]) -> None:
        """Warn (stderr) for the predictions of ``items`` with malformed text; counts them."""
        from polysql_ray.engines.guard import malformed_text

        for it in items:
            msg = malformed_text(it.prediction.pred_sql) if it.prediction.pred_sql else None
            if not (msg and "surrogate" in msg):
                continue
            self.seen += 1
            if self.seen <= self.show:
                print(f"polysql_ray: warning: prediction {it.example.question_id!r} of model "
                      f"{it.cell.model!r}: {msg}; scored as rejected, stored escaped", file=sys.stderr)

    def close(self) -> None:
        """Print how many malformed predictions were not shown (one line, stderr)."""
        if self.seen > self.show:
            print(f"polysql_ray: warning: ... and {self.seen - self.show} more predictions with malformed text",
                  file=sys.stderr)


#: The interpreter's thread switch interval while :class:`PlanAhead` runs beside ``ray.init``.
SWITCH_INTERVAL_S = 0.0005


class PlanAhead:
    """A generation feed whose first batches were analyzed (:meth:`Planner.analyze`) while
    the run's cluster started: ``with PlanAhead(...) as feed: cluster.start()``, then ``feed``
    is used as the feed it wraps. A thread takes the cells' batches in order, without waiting
    (``take(timeout=0)``: replay and gold read their files; nothing is generated), holds them
    and analyzes their pending items until the block ends; the driver's own core, idle while
    Ray's processes start, does the parsing the plan would otherwise do after it.

    Only for feeds whose every generator reads files (no ``uses_prompts``): a model generator
    starts only after the cluster's fit check (:func:`~polysql_ray.pipeline.cluster.check_fits`).
    What goes wrong in the thread (a replay file that cannot be read) stops it; the batch is not
    taken, so the driver's own ``take`` meets the same error where it always did.
    """

    def __init__(self, feed, planner: Planner, cells, wanted, limit: int = 20_000) -> None:
        import threading

        # wanted(cell): the cell's pending question indices (a set), None for all of them;
        # limit: it takes no batch once it holds this many predictions (the driver's window,
        # pipeline.max_pending_items: a slow cluster start never reads a whole sweep in)
        self.feed, self.planner, self.cells, self.wanted = feed, planner, list(cells), wanted
        self.limit, self.held = max(1, int(limit)), 0
        self.analyzed = 0
        self._held: dict[str, list] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ahead, daemon=True, name="plan-ahead")

    def __enter__(self) -> "PlanAhead":
        # While the thread parses, each of ray.init's many short system calls waits for the GIL
        # until the thread is made to drop it: a switch interval, 5 ms by default (Ray's start
        # took 2.0-2.3 s instead of 1.3). At 0.5 ms it starts in 1.4 s and the thread analyzes
        # ~11,000 of the realistic sweep's items meanwhile (time.sleep(0) after each item: Ray
        # 1.3-2.3 s, 3,000-9,000 items). Restored when the block ends.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL_S))
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._switch)

    def join(self) -> None:
        """Wait until the thread has taken and analyzed all it can, without stopping it (the
        driver stops it when the cluster is up; a test lets it finish)."""
        self._thread.join()

    def _ahead(self) -> None:
        try:
            for cell in self.cells:
                wanted = self.wanted(cell)
                last = False
                while not last and not self._stop.is_set():
                    if self.held >= self.limit:
                        return
                    got = self.feed.take(cell, timeout=0)
                    if got is None:
                        return
                    self._held.setdefault(cell.key, []).append(got)
                    indices, preds, last = got
                    self.held += len(indices)
                    by_index = dict(zip(indices, preds))
                    self.analyzed += self.planner.analyze(
                        cell, [i for i in indices if wanted is None or i in wanted], by_index, self._between)
                if self._stop.is_set():
                    return
        except Exception:  # noqa: BLE001 - the driver's own take raises it (class docstring)
            return

    def _between(self) -> bool:
        return not self._stop.is_set()

    def take(self, cell, timeout: float | None = None):
        """The wrapped feed's ``take`` (:meth:`GenerationFeed.take`): ``(example indices,
        predictions, last)`` or None, the batches the thread holds for ``cell`` first, in the
        order it took them; raises what the wrapped feed raises."""
        held = self._held.get(cell.key)
        if held:
            got = held.pop(0)
            if not held:
                del self._held[cell.key]
            return got
        return self.feed.take(cell, timeout)

    def close(self) -> None:
        """Close the wrapped feed (its generation threads, :meth:`GenerationFeed.close`)."""
        self.feed.close()
