"""From (generation status, gold execution, predicted execution) to one verdict.

This is the single place where a score's ``verdict``, ``correct``, ``reason`` and ``basis``
are decided (vocabulary in :mod:`polysql_ray.store.schema`):

0. an execution was ``unavailable`` (server unreachable, copy missing) -> ``unavailable``
   with reason ``gold_unavailable`` / ``pred_unavailable``: not a verdict at all; the store
   keeps such rows apart and the next run rescores them;
1. the gold could not run (missing database, gold SQL failing on its own engine)
   -> ``gold_error`` with reason ``gold_<status>``: not the model's fault, reported apart;
2. the generator produced no SQL -> ``fail`` with reason ``no_sql`` / ``missing`` / ``truncated``
   / ``generation_error``;
3. the prediction did not execute -> ``fail`` with reason ``pred_<status>`` (``pred_syntax``,
   ``pred_schema``, ``pred_timeout`` ...); a timeout stays visible as such (EX is reported
   with and without timeouts, evaluation-notes section 4);
4. both executed -> the result-set comparison of :mod:`polysql_ray.comparison.result_set`
   decides ``pass`` / ``fail`` with its reason code and flags, or ``inconclusive`` for the
   reasons in :data:`INCONCLUSIVE_REASONS`.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult
from polysql_ray.generation.base import GenStatus

#: Comparison reasons that leave the verdict undecidable from the data the evaluator has:
#: ``ties_truncated`` (the gold's LIMIT cut falls in a tie group larger than the probe
#: window, result_set.py) -> verdict ``inconclusive``, never ``fail``.
INCONCLUSIVE_REASONS: frozenset[str] = frozenset({"ties_truncated"})

_GEN_REASON = {
    GenStatus.NO_SQL: "no_sql",
    GenStatus.MISSING: "missing",
    GenStatus.TRUNCATED: "truncated",
    GenStatus.ERROR: "generation_error",
}


@dataclass(frozen=True)
class Verdict:
    """One decided score.

    Attributes:
        verdict: ``pass`` | ``fail`` | ``inconclusive`` | ``gold_error`` | ``unavailable``.
        reason: reason code (see module docstring).
        basis: ``observed`` (dual execution), ``proven`` (structure) or ``judged``.
        flags: caveats from the comparison (``ties_at_limit`` ...).
    """

    verdict: str
    reason: str
    basis: str = "observed"
    flags: tuple[str, ...] = ()

    @property
    def correct(self) -> bool:
        """EX credit: True exactly for a ``pass``."""
        return self.verdict == "pass"


def decide(gen_status: GenStatus | str, gold: ExecutionResult | None, pred: ExecutionResult | None,
           compare_fn, gold_error: str | None = None, proven: bool = False) -> Verdict:
    """Decide the verdict of one prediction.

    Args:
        gen_status: the generator's status for this prediction.
        gold: gold execution on the source engine (None when the gold could not be run).
        pred: predicted execution on the target engine (None when there was no SQL to run).
        compare_fn: ``(gold_table, pred_table) -> Comparison`` (``match``, ``reason``, ``flags``),
            usually ``functools.partial(result_set.compare, shape=..., policy=..., probe=...)``.
        gold_error: a message when the example's gold cannot run at all (missing database).
        proven: the structural check proved the prediction equivalent to the gold; when the
            prediction was therefore not executed (``pred`` None) the verdict is a ``pass``
            with basis ``proven`` (the gold still has to run: a failing gold stays a gold error).
    """
    for side, res in (("gold", gold), ("pred", pred)):
        if res is not None and res.status is ExecStatus.UNAVAILABLE:
            # infrastructure (server down, replica missing), never the model's failure:
            # stored apart and rescored by the next run
            return Verdict("unavailable", f"{side}_unavailable")
    if gold_error is not None or gold is None:
        return Verdict("gold_error", "gold_unavailable" if gold is None else f"gold_{gold.status.value}")
    if gold.status is not ExecStatus.OK:
        return Verdict("gold_error", f"gold_{gold.status.value}")
    gen_status = GenStatus(gen_status)
    if gen_status is not GenStatus.OK:
        return Verdict("fail", _GEN_REASON[gen_status])
    if pred is None:
        return Verdict("pass", "match", "proven") if proven else Verdict("fail", "no_sql")
    if pred.status is not ExecStatus.OK:
        return Verdict("fail", f"pred_{pred.status.value}")
    cmp = compare_fn(gold.table, pred.table)
    if cmp.reason in INCONCLUSIVE_REASONS:
        return Verdict("inconclusive", cmp.reason, "observed", tuple(cmp.flags))
    return Verdict("pass" if cmp.match else "fail", cmp.reason, "observed", tuple(cmp.flags))


def rows_of(result: ExecutionResult | None) -> int:
    """Row count of a result set, -1 when there is none."""
    return result.table.num_rows if (result is not None and isinstance(result.table, pa.Table)) else -1
