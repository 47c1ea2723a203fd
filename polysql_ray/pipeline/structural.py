"""The structural stage: prove (gold, prediction) pairs equivalent before executing them.

Runs :class:`polysql_ray.comparison.ast.AstEquivalence` (sound: ``equivalent`` or
``unknown``, never "different") as Ray tasks over unique (gold SQL, gold dialect, predicted
SQL, target dialect) pairs, in batches. Modes (``pipeline.structural_check``):

* ``auto``   - (default) ``prove``, but only for predictions whose target engine's execution is
  expensive: :func:`exec_cost_ms` of the engine >= ``pipeline.structural_min_exec_ms``. A
  proof costs about a millisecond of sqlglot per unique pair (parse + normalise), as much as
  executing a Spider query on SQLite or DuckDB, so it pays only before a server or warehouse
  query (PostgreSQL, MySQL, Snowflake, BigQuery); before an embedded engine the prediction is
  simply executed (basis ``observed``);
* ``off``    - nothing runs; every verdict is observed by execution;
* ``prove``  - a proven prediction is not executed (basis ``proven``); the gold still runs, so
  a gold that fails on its own engine is still a gold error;
* ``verify`` - the structural decision is recorded but every prediction is executed too, so the
  store shows whether proof and execution ever disagree (they must not).

The check may prove, it never refutes: an ``unknown`` decision changes nothing, so the modes give
the same verdicts except for a proven prediction that execution would have failed (a proof is
about the two queries, not the engine: e.g. a prediction the target engine would time out on or
reject as too large scores ``pass`` when proven and ``pred_timeout`` when executed).
Every sqlglot canonical form is computed once per unique (SQL, dialect, other dialect, schema)
in each worker process (a bounded LRU, :data:`CANON_CACHE_SIZE`), so a gold shared by many
models and dialects is parsed once, not once per prediction.
"""
from __future__ import annotations

import collections

import ray

from polysql_ray.config import STRUCTURAL_MODES as MODES
from polysql_ray.pipeline.plan import WorkItem

#: Typical cost of one execution in milliseconds, per engine (data, not code): embedded engines
#: answer a Spider query in about a millisecond; servers add a round trip and a fresh session;
#: warehouses add seconds of queueing and a bill. ``engines.<name>.exec_cost_ms`` overrides it.
EXEC_COST_MS: dict[str, float] = {"sqlite": 1.0, "duckdb": 2.0, "clickhouse": 5.0, "postgres": 20.0,
                                  "mysql": 20.0, "snowflake": 500.0, "bigquery": 1000.0}
#: ``auto`` proves before engines at least this expensive (``pipeline.structural_min_exec_ms``).
MIN_EXEC_MS = 10.0
#: Canonical forms kept per worker process (a few hundred bytes each).
CANON_CACHE_SIZE = 20_000


def exec_cost_ms(engine: str, cfg: dict | None = None) -> float:
    """Cost in ms of one execution on ``engine``: ``engines.<engine>.exec_cost_ms`` of the
    composed config when set, else :data:`EXEC_COST_MS`, else 1 ms for an embedded engine and
    100 ms for a server (:func:`polysql_ray.engines.registry.engine_spec`)."""
    from polysql_ray.engines.registry import engine_spec

    override = (((cfg or {}).get("engines") or {}).get(engine) or {}).get("exec_cost_ms")
    if override is not None:
        return float(override)
    if engine in EXEC_COST_MS:
        return EXEC_COST_MS[engine]
    return 1.0 if engine_spec(engine).embedded else 100.0


def proves_before(mode: str, engine: str, cfg: dict | None = None) -> bool:
    """Whether the structural check runs before executions on ``engine`` in ``mode``."""
    if mode == "off":
        return False
    if mode == "auto":
        min_ms = float(((cfg or {}).get("pipeline") or {}).get("structural_min_exec_ms", MIN_EXEC_MS))
        return exec_cost_ms(engine, cfg) >= min_ms
    return True


def _cached_checker():
    """An AstEquivalence whose canonical_key is memoised per worker process (LRU)."""
    global _CHECKER
    if _CHECKER is None:
        from polysql_ray.comparison.ast import AstEquivalence, _Unknown

        class _Cached(AstEquivalence):
            cache: collections.OrderedDict = collections.OrderedDict()
            hits = 0

            def canonical_key(self, sql, dialect, other=None, schema=None, copied_from=None):
                k = (sql, dialect, other, id(schema) if schema is not None else None, copied_from)
                hit = self.cache.get(k)
                if hit is not None:
                    self.cache.move_to_end(k)
                    type(self).hits += 1
                else:
                    try:
                        hit = ("ok", super().canonical_key(sql, dialect, other, schema, copied_from))
                    except _Unknown as e:
                        hit = ("unknown", str(e))
                    self.cache[k] = hit
                    if len(self.cache) > CANON_CACHE_SIZE:
                        self.cache.popitem(last=False)
                if hit[0] == "unknown":
                    raise _Unknown(hit[1])
                return hit[1]

        _CHECKER = _Cached()
    return _CHECKER


_CHECKER = None
#: Schema per SQLite source path (one object per path for the life of the worker: the
#: canonical-form cache keys on its id; bounded by the number of source databases).
_SCHEMAS: dict[str, object] = {}


@ray.remote
def _prove_batch(pairs: list[tuple[str, str, str, str, str | None]]) -> list[str]:
    """``[(gold_sql, gold_dialect, pred_sql, pred_dialect, sqlite_schema_path), ...]`` ->
    ``["equivalent" | "unknown: <reason>", ...]``. Never raises: a checker error is unknown."""
    from polysql_ray.comparison.equivalence import read_sqlite_schema

    checker = _cached_checker()
    out = []
    for gold_sql, gold_dialect, pred_sql, pred_dialect, schema_path in pairs:
        schema = None
        if gold_dialect != pred_dialect and schema_path:
            if schema_path not in _SCHEMAS:  # one schema object per path: id() keys the cache
                _SCHEMAS[schema_path] = read_sqlite_schema(schema_path)
            schema = _SCHEMAS[schema_path]
        try:
            res = checker.check(gold_sql, gold_dialect, pred_sql, pred_dialect, schema=schema)
            out.append("equivalent" if res.decision == "equivalent" else f"unknown: {res.reason}")
        except Exception as exc:  # noqa: BLE001 — soundness: anything odd is "unknown"
            out.append(f"unknown: checker error {type(exc).__name__}")
    return out


class StructuralJob:
    """Structural checks in flight: :meth:`submit` them as Ray tasks (they need no replica, so
    the driver overlaps them with replication), then :meth:`apply` the decisions to the work
    items of the final plan.

    Errors: ``ValueError`` for an unknown mode.
    """

    def __init__(self, mode: str, batch_size: int = 256, policy=None, cfg: dict | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"pipeline.structural_check must be one of {MODES}, got {mode!r}")
        self.mode, self.batch_size, self.policy, self.cfg = mode, batch_size, policy, cfg
        self.keys: list[tuple] = []
        self.refs: list = []
        self.pair_of: dict[str, tuple] = {}

    def submit(self, items: list[WorkItem]) -> "StructuralJob":
        """Start checking every item whose gold can run, whose prediction has SQL and whose
        target engine the mode proves before (:func:`proves_before`)."""
        from polysql_ray.comparison.prepare import executed_sql
        from polysql_ray.engines.registry import default_dialect

        if self.mode == "off":
            return self
        from polysql_ray.engines.base import Limits

        # SQL the sandbox refuses unparsed (rejected, Limits.refuse_length): no proof may pass it first
        limits = Limits(**((self.cfg or {}).get("limits") or {}))
        seen: dict[tuple, None] = {}
        for it in items:
            ex, pred = it.example, it.prediction
            if it.gold is None or pred.status.value != "ok" or not pred.pred_sql.strip() \
                    or limits.refuse_length(pred.pred_sql) is not None:
                continue
            if not proves_before(self.mode, it.cell.target_engine, self.cfg):
                continue
            schema_path = ex.database.location if ex.source_engine == "sqlite" else None
            pred_dialect = default_dialect(it.cell.target_engine)
            gold_sql, pred_sql = ex.gold_sql, pred.pred_sql
            if self.policy is not None:  # prove what runs (policy.distinct may rewrite both)
                gold_sql = executed_sql(gold_sql, ex.gold_dialect, self.policy)
                pred_sql = executed_sql(pred_sql, pred_dialect, self.policy)
            key = (gold_sql, ex.gold_dialect, pred_sql, pred_dialect, schema_path)
            self.pair_of[it.key] = key
            seen.setdefault(key, None)
        self.keys = list(seen)
        self.refs = [_prove_batch.options(num_cpus=0.25).remote(self.keys[i:i + self.batch_size])
                     for i in range(0, len(self.keys), self.batch_size)]
        return self

    def apply(self, items: list[WorkItem], progress=None, task: int | None = None) -> int:
        """Wait for the decisions, set ``item.structural``; in ``prove`` and ``auto`` modes drop
        the prediction's execution for proven items; ``progress.advance(task, n)`` per batch
        when given. Returns the number of items proven. The driver calls it once every ref
        of :attr:`refs` is ready, so it does not block."""
        if self.mode == "off":
            return 0
        decision: dict[tuple, str] = {}
        for n, ref in enumerate(self.refs):
            start = n * self.batch_size
            decision.update(zip(self.keys[start:start + self.batch_size], ray.get(ref)))
            if progress is not None and task is not None:
                progress.advance(task, min(self.batch_size, len(self.keys) - start))
        proven = 0
        for it in items:
            key = self.pair_of.get(it.key)
            if key is None or it.pred is None:
                continue
            it.structural = decision[key]
            if it.structural == "equivalent":
                proven += 1
                if self.mode in ("prove", "auto"):
                    it.pred = it.pred_probe = it.pred_ties_probe = None
                    it.deps = tuple(d for d in (it.gold, it.probe, it.ties_probe) if d is not None)
        return proven
