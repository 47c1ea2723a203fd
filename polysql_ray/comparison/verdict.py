"""The one decision path: from (gold result, probe result, predicted result, gold shape,
policy, limits) to one verdict.

:func:`decide` is the single place where a score's ``verdict``, ``correct``, ``reason``,
``basis``, ``flags`` and ``diff`` are decided. The pipeline's Arrow scoring task
(:func:`polysql_ray.pipeline.actors.score_batch`) and the one-case API
(:func:`polysql_ray.comparison.equivalence.score_sql`) both call it, so a case checked in a
user's test gets the verdict the sweep records. Vocabulary (:mod:`polysql_ray.store.schema`):

0. an execution was ``unavailable`` (server unreachable, copy missing) -> ``unavailable``
   with reason ``gold_unavailable`` / ``pred_unavailable``: not a verdict at all; the store
   keeps such rows apart and the next run rescores them;
1. the gold could not run (missing database, gold SQL failing on its own engine, a gold result
   over the limits) -> ``gold_error`` with reason ``gold_<status>``: not the model's fault,
   reported apart;
2. the generator produced no SQL -> ``fail`` with reason ``no_sql`` / ``missing`` /
   ``truncated`` / ``generation_error``;
3. the prediction did not execute -> ``fail`` with reason ``pred_<status>`` (``pred_syntax``,
   ``pred_timeout``, ``pred_too_large`` ...); a timeout stays visible as such;
4. the structural check proved the pair equivalent and the prediction was not run -> ``pass``
   with basis ``proven``;
5. both executed -> :func:`polysql_ray.comparison.result_set.compare` decides ``pass`` /
   ``fail`` with its reason and flags, or ``inconclusive`` for the reasons in
   :data:`INCONCLUSIVE_REASONS` (``compare_error`` when the comparison raised on this item:
   :func:`scoring_error`); engine-semantics flags (:func:`semantic_flags` from the SQL text;
   ``null_order`` kept only where the engines' NULL placement differs in a direction the gold's
   ORDER BY uses; ``empty_aggregate`` from the data) are added;
   a flag listed in ``policy.inconclusive_flags`` turns ``pass``/``fail`` into
   ``inconclusive`` (reason kept, flag recorded).
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, replace

import pyarrow as pa
import sqlglot
from sqlglot import exp

from polysql_ray.comparison.policy import ComparisonPolicy
from polysql_ray.comparison.normalize import canonical_columns, open_scope, seeded, taken
from polysql_ray.comparison.result_set import Comparison, Diff, compare, cut_choice_rows, identical, matches
from polysql_ray.comparison.shape import GoldShape, PredShape, nested_ties
from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.generation.base import GenStatus

#: Comparison reasons that leave the verdict undecidable from the data the evaluator has:
#: ``ties_truncated`` (the gold's LIMIT cut falls in a tie group larger than the probe
#: window, result_set.py) and ``compare_error`` (the comparison raised on this item's values:
#: the evaluator's limit, not evidence about the prediction) -> verdict ``inconclusive``,
#: never ``fail``.
INCONCLUSIVE_REASONS: frozenset[str] = frozenset({"ties_truncated", "compare_error"})

#: Gold flags recorded on every verdict of a gold that ran, a failed prediction's included:
#: ``time_dependent_gold`` (the score is redone on a new UTC date; the sweep also copies the
#: dataset's clock flag, ``datasets/clock.py``, and the one-case API must say the same).
GOLD_FACT_FLAGS: frozenset[str] = frozenset({"time_dependent_gold"})

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
        flags: caveats and ambiguity flags (``ties_at_limit``, ``columns_reordered`` ...).
        diff: what differs (:class:`polysql_ray.comparison.result_set.Diff`), when compared.
        detail: the exception behind reason ``compare_error`` (type and message, at most
            2,000 characters), else empty.
    """

    verdict: str
    reason: str
    basis: str = "observed"
    flags: tuple[str, ...] = ()
    diff: Diff | None = None
    detail: str = ""

    @property
    def correct(self) -> bool:
        """EX credit: True exactly for a ``pass``."""
        return self.verdict == "pass"


@dataclass(frozen=True)
class Pair:
    """The SQL texts and engines of one compared pair (for the engine-semantics flags).

    Attributes:
        gold_sql, pred_sql: the SQL that ran (after :func:`executed_sql`).
        gold_dialect, pred_dialect: their sqlglot dialects.
        gold_engine, pred_engine: engine names (rows of ``engines.registry.SEMANTICS``).
    """

    gold_sql: str = ""
    pred_sql: str = ""
    gold_dialect: str = "sqlite"
    pred_dialect: str = "sqlite"
    gold_engine: str = "sqlite"
    pred_engine: str = "sqlite"


@dataclass(frozen=True)
class _Ops:
    """What one SQL text contains, for the engine-semantics flags (all False when unreadable)."""

    div: bool = False          # a ``/``
    like: bool = False         # a LIKE
    aggregate: bool = False    # SUM/MIN/MAX/AVG (empty input: NULL or 0)
    string_number: bool = False  # a comparison of a numeric-looking string literal ('5') or of a
                                 # string literal with a number literal
    desc: tuple[bool, ...] | None = None  # directions of the top-level ORDER BY keys (True: DESC)


_CMP = (exp.EQ, exp.NEQ, exp.LT, exp.GT, exp.LTE, exp.GTE)


def _numeric_text(node: exp.Expression) -> bool:
    if not (isinstance(node, exp.Literal) and node.is_string):
        return False
    try:
        float(node.this)
    except (TypeError, ValueError):
        return False
    return True


def _string_number(tree: exp.Expression) -> bool:
    for cmp in tree.find_all(*_CMP, exp.In):
        sides = [cmp.this, *(cmp.expressions if isinstance(cmp, exp.In) else [cmp.expression])]
        if any(_numeric_text(x) for x in sides):
            return True
        if any(isinstance(x, exp.Literal) and x.is_string for x in sides) and \
                any(isinstance(x, exp.Literal) and x.is_number for x in sides):
            return True
    return False


@functools.lru_cache(maxsize=20_000)
def _operators(sql: str, dialect: str) -> _Ops:
    """:class:`_Ops` of ``sql``; all False when unreadable (no flag). Cached per unique (SQL,
    dialect) in each scoring worker: a gold is parsed once for every prediction compared with
    it, not once per item."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:  # noqa: BLE001 - unreadable SQL raises no flag
        return _Ops()
    if tree is None:
        return _Ops()
    order = tree.args.get("order")
    return _Ops(div=tree.find(exp.Div) is not None, like=tree.find(exp.Like) is not None,
                aggregate=tree.find(exp.Sum, exp.Min, exp.Max, exp.Avg) is not None,
                string_number=_string_number(tree),
                desc=None if order is None else tuple(bool(o.args.get("desc")) for o in order.expressions))


def semantic_flags(pair: Pair) -> tuple[str, ...]:
    """Flags for SQL whose meaning differs between the gold's and the prediction's engine
    (engine facts: :data:`polysql_ray.engines.registry.SEMANTICS`, one per dialect):

    * ``integer_division``: a ``/`` in either query, and the engines disagree on ``int / int``;
    * ``collation``: a ``LIKE`` in either query, and the engines disagree on case-insensitive
      LIKE. (A case-insensitive ``=`` — MySQL's default collations — is flagged from the data
      instead, when the two results are equal only case-insensitively: flagging every string
      literal on MySQL would mark a fifth of all items.)
    * ``string_number``: either query compares a numeric-looking string literal (``age = '30'``)
      or a string literal with a number literal, and the engines convert differently
      (``Semantics.string_number``: SQLite affinity, MySQL numbers, BigQuery an error ...).

    (``null_order`` and ``empty_aggregate`` need the data: :func:`decide`.) Same engine, unknown
    engine or unreadable SQL: no flag.
    """
    from polysql_ray.engines.registry import SEMANTICS

    if not reads_pred_text(pair):  # one engine's semantics (or an unknown engine): no flag
        return ()
    g, p = SEMANTICS.get(pair.gold_engine), SEMANTICS.get(pair.pred_engine)
    ops = (_operators(pair.gold_sql, pair.gold_dialect), _operators(pair.pred_sql, pair.pred_dialect))
    flags = []
    if g.integer_division != p.integer_division and any(o.div for o in ops):
        flags.append("integer_division")
    if g.ci_like != p.ci_like and any(o.like for o in ops):
        flags.append("collation")
    if g.string_number != p.string_number and any(o.string_number for o in ops):
        flags.append("string_number")
    return tuple(flags)


def reads_pred_text(pair: Pair | None) -> bool:
    """Whether :func:`decide` reads the predicted SQL's text (``pair.pred_sql``) beyond what
    ``pred_shape`` and the results carry: only for :func:`semantic_flags` and the
    ``empty_aggregate`` check, which both ask this first: two known engines of different
    semantics (:data:`~polysql_ray.engines.registry.SEMANTICS`). A verdict on one engine's semantics is a
    function of the results, the shapes, the gold side of ``pair`` and the policy, whatever
    the prediction's text (``pipeline.actors`` reuses it across predictions with identical
    results)."""
    from polysql_ray.engines.registry import SEMANTICS

    if pair is None:
        return False
    g, p = SEMANTICS.get(pair.gold_engine), SEMANTICS.get(pair.pred_engine)
    return not (g is None or p is None or g == p)


def _same_null_order(pair: Pair | None) -> bool:
    """Both engines place NULLs alike in every direction the gold's top-level ORDER BY uses
    (``Semantics.nulls_asc``/``nulls_desc``; both directions when the gold is unreadable): a
    DESC key on SQLite and DuckDB puts NULLs last on both, an ASC key does not."""
    from polysql_ray.engines.registry import SEMANTICS

    if pair is None:
        return False
    g, p = SEMANTICS.get(pair.gold_engine), SEMANTICS.get(pair.pred_engine)
    if g is None or p is None:
        return False
    directions = _operators(pair.gold_sql, pair.gold_dialect).desc or (False, True)
    return all(g.nulls(d) == p.nulls(d) for d in set(directions))


def _zero_filled(t: pa.Table) -> pa.Table:
    """``t`` with NULL (and NaN) in numeric columns replaced by 0 of the column's type (an
    all-NULL column of no type, e.g. SQLite's ``sum()`` over no rows, becomes integer 0s)."""
    import pyarrow.compute as pc

    cols = []
    for c in t.columns:
        if pa.types.is_null(c.type):
            c = pa.array([0] * len(c), pa.int64())
        elif pa.types.is_integer(c.type) or pa.types.is_floating(c.type) or pa.types.is_decimal(c.type):
            zero = pa.array([0]).cast(c.type)[0]
            if pa.types.is_floating(c.type):
                c = pc.if_else(pc.is_nan(c), zero, c)
            c = pc.fill_null(c, zero)
        cols.append(c)
    return pa.Table.from_arrays(cols, names=t.column_names)


def _empty_aggregate(cmp: Comparison, gold: pa.Table, pred: pa.Table, shape: GoldShape,
                     policy: ComparisonPolicy, probe: pa.Table | None, pair: Pair | None) -> bool:
    """Flag ``empty_aggregate``: the results differ in values, the engines disagree on an
    aggregate over no rows (``Semantics.empty_sum_null``: NULL, or ClickHouse's 0 / nan), an
    aggregate appears in either query, and the results are equal once NULL and NaN in numeric
    columns count as 0."""
    from polysql_ray.engines.registry import SEMANTICS

    if pair is None or cmp.match or cmp.reason != "values" or not reads_pred_text(pair):
        return False
    g, p = SEMANTICS.get(pair.gold_engine), SEMANTICS.get(pair.pred_engine)
    if g.empty_sum_null == p.empty_sum_null:
        return False
    if not (_operators(pair.gold_sql, pair.gold_dialect).aggregate
            or _operators(pair.pred_sql, pair.pred_dialect).aggregate):
        return False
    return compare(_zero_filled(gold), _zero_filled(pred), shape, policy, probe).match


def _enforce(res: ExecutionResult | None, limits: Limits | None) -> ExecutionResult | None:
    return res if (res is None or limits is None) else limits.enforce(res)


def decide(gen_status: GenStatus | str, gold: ExecutionResult | None, probe: ExecutionResult | None,
           pred: ExecutionResult | None, shape: GoldShape | None, policy: ComparisonPolicy,
           limits: Limits | None = None, *, gold_error: str | None = None, proven: bool = False,
           pair: Pair | None = None, ties_probe: ExecutionResult | None = None,
           pred_shape: PredShape | None = None, pred_probe: ExecutionResult | None = None,
           pred_ties_probe: ExecutionResult | None = None) -> Verdict:
    """Decide the verdict of one prediction (module docstring).

    Args:
        gen_status: the generator's status for this prediction.
        gold: gold execution on the source engine (None when the gold could not be run).
        probe: execution of ``shape.probe_sql`` on the gold engine (None when not run).
        pred: predicted execution on the target engine (None when there was no SQL to run, or
            when it was proven and skipped).
        shape: :func:`polysql_ray.comparison.shape.analyze_gold` of the gold SQL that ran.
        policy: the run's comparison policy object.
        limits: sandbox limits; a result over ``limits.max_bytes`` counts as ``too_large``.
        gold_error: a message when the example's gold cannot run at all (missing database).
        proven: the structural check proved the prediction equivalent to the gold.
        pair: SQL texts and engines, for :func:`semantic_flags` (None: no such flags).
        ties_probe: execution of ``shape.ties_probe_sql`` on the gold engine; a tie at a nested
            ORDER BY ... LIMIT cut, or a probe that did not run, flags ``nondeterministic_gold``;
            an ungrouped output column with several values in a group flags ``ungrouped_column``.
        pred_shape, pred_probe, pred_ties_probe: the prediction's determinism facts
            (:func:`polysql_ray.comparison.shape.analyze_prediction`) and its two probes on the
            target engine; a prediction whose verdict could differ in another run on the same
            data flags ``nondeterministic_pred`` (:func:`pred_nondeterministic`). An
            ``unavailable`` prediction probe makes the item ``unavailable`` (rescored).
    """
    pred_probes = (("pred", pred_probe), ("pred", pred_ties_probe)) \
        if (pred is not None and pred.status is ExecStatus.OK) else ()  # used only then
    for side, res in (("gold", gold), ("probe", probe), ("probe", ties_probe), ("pred", pred), *pred_probes):
        if res is not None and res.status is ExecStatus.UNAVAILABLE:
            # infrastructure (server down, replica missing), never the model's failure:
            # stored apart and rescored by the next run
            return Verdict("unavailable", f"{'gold' if side == 'probe' else side}_unavailable")
    gold, probe, pred = _enforce(gold, limits), _enforce(probe, limits), _enforce(pred, limits)
    if gold_error is not None or gold is None:
        return Verdict("gold_error", "gold_unavailable" if gold is None else f"gold_{gold.status.value}")
    if gold.status is not ExecStatus.OK:
        return Verdict("gold_error", f"gold_{gold.status.value}")
    shape = shape if shape is not None else GoldShape.unparsed()
    if shape.ties_probe_sql is not None:
        found = nested_ties(ties_probe.table if (ties_probe is not None and ties_probe.ok) else None,
                            shape.nested_cuts)
        shape = replace(shape, flags=tuple(dict.fromkeys(shape.flags + found)))
    gen_status = GenStatus(gen_status)
    # facts about the gold that hold whatever the prediction did (its score is redone on a new
    # date): kept on a failed prediction too, which decides nothing else (no policy applies)
    facts = tuple(f for f in shape.flags if f in GOLD_FACT_FLAGS)
    if gen_status is not GenStatus.OK:
        return Verdict("fail", _GEN_REASON[gen_status], flags=facts)
    if pred is None:
        if proven:
            return _apply_policy(Verdict("pass", "match", "proven", shape.flags), policy)
        return Verdict("fail", "no_sql", flags=facts)
    if pred.status is not ExecStatus.OK:
        return Verdict("fail", f"pred_{pred.status.value}", flags=facts)
    probe_table = probe.table if (probe is not None and probe.ok) else None
    try:
        cmp: Comparison = compare(gold.table, pred.table, shape, policy, probe_table,
                                  pred_constants=pred_shape.constant_columns if pred_shape is not None else ())
    except Exception as exc:  # noqa: BLE001 - one item's values never abort a sweep
        return scoring_error(exc, shape.flags)
    flags = list(cmp.flags)
    if cmp.match and cmp.diff is not None and _scale_decided(gold.table, pred.table, cmp.diff, policy):
        flags.append("decimal_scale")
    if "null_order" in flags and _same_null_order(pair):
        flags.remove("null_order")  # both engines place NULLs alike: not a dialect ambiguity
    if pair is not None:
        flags += semantic_flags(pair)
    try:
        if _empty_aggregate(cmp, gold.table, pred.table, shape, policy, probe_table, pair):
            flags.append("empty_aggregate")
    except Exception as exc:  # noqa: BLE001 - one item's values never abort a sweep
        return scoring_error(exc, tuple(flags))
    try:
        if pred_nondeterministic(cmp, gold.table, pred.table, shape, policy, probe_table, pred_shape,
                                 pred_probe, pred_ties_probe, pair):
            flags.append("nondeterministic_pred")
    except Exception as exc:  # noqa: BLE001 - one item's values never abort a sweep
        return scoring_error(exc, tuple(flags))
    flags = tuple(dict.fromkeys(flags))
    if cmp.reason in INCONCLUSIVE_REASONS:
        return Verdict("inconclusive", cmp.reason, "observed", flags, cmp.diff)
    return _apply_policy(Verdict("pass" if cmp.match else "fail", cmp.reason, "observed", flags, cmp.diff),
                         policy)


def _scale_decided(gold: pa.Table, pred: pa.Table, diff: Diff, policy: ComparisonPolicy) -> bool:
    """True when a matched column pair was equal only at the DECIMAL scale one engine imposed
    (:func:`polysql_ray.comparison.normalize.rounding_mattered`): flag ``decimal_scale``."""
    from polysql_ray.comparison.normalize import rounding_mattered

    return any(rounding_mattered(gold.column(i), pred.column(j), policy)
               for i, j in enumerate(diff.column_mapping) if j < pred.num_columns)


def pred_nondeterministic(cmp: Comparison, gold: pa.Table, pred: pa.Table, shape: GoldShape,
                          policy: ComparisonPolicy, probe: pa.Table | None, pred_shape: PredShape | None,
                          pred_probe: ExecutionResult | None, pred_ties_probe: ExecutionResult | None,
                          pair: Pair | None) -> bool:
    """True when the prediction's verdict could differ in another run on the same data (flag
    ``nondeterministic_pred``, ``inconclusive`` under the default policy), the prediction-side
    counterpart of ``nondeterministic_gold``:

    * its text is nondeterministic whatever the data (random/uuid, LIMIT without ORDER BY below
      the top level: ``PredShape.static``);
    * a nested ORDER BY ... LIMIT cut falls in a tie on the data, or cannot be probed; or an
      ungrouped output column holds several values in a group on an engine that returns any
      row's value (``Semantics.arbitrary_ungrouped``: MariaDB) - Spider q573/q574 predictions;
    * its own top-level LIMIT cut falls in a tie and some other choice of the tied rows
      (:func:`~polysql_ray.comparison.result_set.cut_choices`, from the cut probe) would be
      judged otherwise than the observed result (``match`` differs), or the choices cannot all
      be checked. A tie whose every choice gets the observed verdict (the same tied rows as the
      gold's, every choice failing, rows alike) is decided as observed: the same every run.
    """
    from polysql_ray.engines.registry import SEMANTICS

    if pred_shape is None:
        return False
    if pred_shape.static:
        return True
    if pred_shape.ties_probe_sql is not None:
        found = nested_ties(pred_ties_probe.table if (pred_ties_probe is not None and pred_ties_probe.ok) else None,
                            pred_shape.nested_cuts)
        if "nondeterministic_gold" in found:
            return True
        sem = SEMANTICS.get(pair.pred_engine) if pair is not None else None
        if "ungrouped_column" in found and sem is not None and sem.arbitrary_ungrouped:
            return True
    if pred_shape.cut_probe_sql is not None and pred_shape.limit is not None:
        table = pred_probe.table if (pred_probe is not None and pred_probe.ok) else None
        got = cut_choice_rows(pred, table, pred_shape.limit, pred_shape.cut_keys, policy)
        if got == "unknown":
            return True
        if got is not None:
            # an alternative identical to the observed result (same types, same values in the same
            # order) is judged as observed: skipped (the premise of result_set.identical); the
            # gold's canonical columns and tie groups are computed once for all alternatives, and
            # each alternative's canonical columns are its rows of the probe rows' (normalize.taken)
            rows, choices = got
            with open_scope():
                canon = canonical_columns(rows, policy)
                for ix in choices:
                    alt = rows.take(pa.array(ix))
                    if identical(alt, pred):
                        continue
                    with seeded(alt, policy, [taken(c, ix, policy) for c in canon]):
                        if matches(gold, alt, shape, policy, probe,
                                   pred_constants=pred_shape.constant_columns) != cmp.match:
                            return True
    return False


def scoring_error(exc: BaseException, flags: tuple[str, ...] = ()) -> Verdict:
    """The verdict of an item whose scoring raised ``exc`` (a value or shape the comparison
    cannot handle): ``inconclusive`` with reason ``compare_error`` and the exception as
    ``detail``. Used by :func:`decide` and by the scoring task for any other per-item failure,
    so one item never aborts its batch (as execution isolates a statement that kills its
    engine)."""
    return Verdict("inconclusive", "compare_error", "observed", tuple(flags),
                   detail=f"{type(exc).__name__}: {exc}"[:2000])


def _apply_policy(v: Verdict, policy: ComparisonPolicy) -> Verdict:
    """``inconclusive`` when ``v`` carries a flag the policy does not let decide a verdict."""
    if v.verdict in ("pass", "fail") and set(v.flags) & policy.undecided_flags():
        return Verdict("inconclusive", v.reason, v.basis, v.flags, v.diff)
    return v


def rows_of(result: ExecutionResult | None) -> int:
    """Row count of a result set, -1 when there is none."""
    return result.table.num_rows if (result is not None and isinstance(result.table, pa.Table)) else -1
