"""Composable equivalence checks (evaldata style) and the one-case public API.

A :class:`Check` maps one :class:`Case` (gold SQL, predicted SQL, where to run them) to an
:class:`EquivalenceResult` with a ``verdict`` (``pass``/``fail``/``inconclusive``/
``gold_error``) and a ``basis``: ``proven`` (structure, :mod:`polysql_ray.comparison.ast`),
``observed`` (dual execution, PolySQL arXiv 2605.07796 section 3) or ``judged`` (an LLM judge).

* :class:`AstCheck` - structural proof: ``pass`` or ``inconclusive``, never ``fail``; runs no SQL.
* :class:`ResultSetEquivalence` - the pipeline's procedure for one case: structural proof
  (optional), gold and its probe on the source engine, prediction on the target engine, then
  :func:`polysql_ray.comparison.verdict.decide` - the same decision function the sweep's
  scoring tasks call, so verdict, reason, flags and diff are identical to the sweep's.
* :class:`Judge` - a callable ``prompt -> text`` decides; PASS/FAIL parsed robustly.
* :class:`FirstDecisive` - members in order, first ``pass``/``fail`` wins, with a trail.
* :func:`observed_equivalence`, :func:`judged_equivalence`, :func:`score_sql`.

Engines and their dialects come from :mod:`polysql_ray.engines.registry`; cross-dialect
replicas from :func:`polysql_ray.replication.base.replicate`.

Example (runs as a doctest; the textbook pair is proven without executing the prediction)::

    >>> import sqlite3, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "shop.sqlite")
    >>> con = sqlite3.connect(path)
    >>> _ = con.execute("CREATE TABLE orders (id INTEGER, amount INTEGER)")
    >>> _ = con.executemany("INSERT INTO orders VALUES (?, ?)", [(1, 10), (2, 20), (3, None)])
    >>> con.commit(); con.close()
    >>> r = score_sql("SELECT amount + 1 FROM orders", "select 1 + AMOUNT from Orders", database=path)
    >>> (r.verdict, r.basis)
    ('pass', 'proven')
    >>> r = score_sql("SELECT id FROM orders WHERE amount > 15",
    ...               "SELECT id FROM orders WHERE amount < 15", database=path)
    >>> (r.verdict, r.basis, r.diff["missing_rows"], r.diff["extra_rows"])
    ('fail', 'observed', 1, 1)
    >>> r = score_sql("SELECT id, amount FROM orders", "SELECT amount, id FROM orders", database=path,
    ...               dialect="duckdb", replicas_dir=tempfile.mkdtemp())
    >>> (r.verdict, r.reason, r.flags)
    ('pass', 'match', ('columns_reordered',))
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import pyarrow as pa

from polysql_ray.comparison.ast import AstEquivalence
from polysql_ray.engines.base import Engine, ExecutionResult, Limits

SAMPLE_ROWS = 5


@dataclass(frozen=True)
class Case:
    """One gold/prediction pair and where to run it.

    Attributes:
        gold_sql: gold SQL text in ``gold_dialect``.
        pred_sql: predicted SQL text in ``pred_dialect``.
        gold_dialect, pred_dialect: sqlglot dialect names.
        gold_engine, pred_engine: engine names (``sqlite``, ``duckdb`` ...).
        gold_location, pred_location: engine locators (file path / database name).
        question: natural-language question (for the judge), optional.
        schema: ``{table: {column: declared_type}}`` exact names, optional (read from a SQLite
            gold database when needed and absent).
    """

    gold_sql: str
    pred_sql: str
    gold_dialect: str = "sqlite"
    pred_dialect: str = "sqlite"
    gold_engine: str = "sqlite"
    pred_engine: str = "sqlite"
    gold_location: str = ""
    pred_location: str = ""
    question: str | None = None
    schema: Mapping[str, Mapping[str, str]] | None = None


@dataclass
class EquivalenceResult:
    """Outcome of a check.

    Attributes:
        verdict: ``pass`` | ``fail`` | ``inconclusive`` | ``gold_error`` (the gold itself did
            not run: not the prediction's fault).
        basis: ``proven`` | ``observed`` | ``judged``.
        explanation: human-readable reason (starts with a reason code).
        diff: for observed results: ``missing_rows``/``extra_rows`` (counts, multiset),
            ``missing_sample``/``extra_sample`` (up to 3 rows each), ``column_mapping``
            (predicted column per gold column), ``gold_columns``/``pred_columns`` (count),
            ``gold_types``/``pred_types`` (Arrow type strings); else None.
        trail: for composed checks, one dict per member that ran: ``check``, ``verdict``,
            ``basis``, ``explanation``.
        reason: the reason code of :func:`polysql_ray.comparison.verdict.decide` (``match``,
            ``values``, ``pred_syntax``, ``gold_runtime`` ...), empty for judged/AST results.
        flags: flags of the decision (``columns_reordered``, ``ties_at_limit`` ...).
    """

    verdict: str
    basis: str
    explanation: str
    diff: dict | None = None
    trail: list[dict] = field(default_factory=list)
    reason: str = ""
    flags: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """True for ``pass``."""
        return self.verdict == "pass"


@runtime_checkable
class Check(Protocol):
    """Anything that decides one :class:`Case`. ``name`` appears in trails."""

    name: str

    def check(self, case: Case) -> EquivalenceResult:
        """Decide the case; must not raise for bad SQL or a missing database."""
        ...


# ----------------------------------------------------------------------------- helpers

def load_engine(name: str, **settings) -> Engine:
    """Instantiate engine ``name`` from :mod:`polysql_ray.engines.registry` (``settings``
    override its defaults: a server's host, port, user ...).

    Raises:
        KeyError: unknown engine name; ImportError: its driver module is not available.
    """
    from polysql_ray.engines.registry import make_engine

    return make_engine(name, **settings)


def read_source_schema(engine: str, location: str,
                       settings: Mapping | None = None) -> dict[str, dict[str, str]] | None:
    """``{table: {column: declared_type}}`` (exact source names) of a source database, read by
    its engine's replication reader (``replication.base.read_catalog``: the one schema model
    that replication and prompts read, for SQLite, DuckDB, MySQL and PostgreSQL sources).

    Reads catalog metadata only, never user SQL. Returns None when the source is absent,
    unreadable or holds no table, or its engine has no reader (the structural check then needs no schema or
    answers ``unknown``).

    Args:
        engine: source engine name (``sqlite``, ``duckdb``, ``mysql``, ``postgres``).
        location: its ``SourceDatabase.location`` (file path, MySQL database,
            PostgreSQL ``[<database>/]<schema>``).
        settings: connection settings of a server source (``engines.<engine>``).
    """
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.registry import engine_spec
    from polysql_ray.replication.base import ReplicationError, read_catalog

    try:
        if not location or (engine_spec(engine).embedded and not os.path.isfile(location)):
            return None
        tables = read_catalog(SourceDatabase("-", Path(location).stem, engine, location),
                              dict(settings) if settings else None)
    except (KeyError, ImportError, ReplicationError):
        return None
    return {t.name: {c.name: c.declared_type for c in t.columns} for t in tables} or None


def read_sqlite_schema(path: str) -> dict[str, dict[str, str]] | None:
    """:func:`read_source_schema` of an SQLite file (None if absent)."""
    return read_source_schema("sqlite", path)


def _rows(table: pa.Table) -> list[tuple]:
    from polysql_ray.comparison.normalize import python_values

    cols = [python_values(c) for c in table.columns]
    return list(zip(*cols)) if cols else []


def result_diff(gold: pa.Table | None, pred: pa.Table | None, diff=None) -> dict:
    """The diff of a decided comparison as a plain dict (see :class:`EquivalenceResult`).

    Args:
        gold, pred: the two result sets (None when absent).
        diff: the decision's :class:`polysql_ray.comparison.result_set.Diff` (None: counts only).
    """
    out: dict[str, Any] = {"missing_rows": 0, "extra_rows": 0, "missing_sample": [], "extra_sample": [],
                           "column_mapping": []}
    if diff is not None:
        out.update(missing_rows=diff.missing_rows, extra_rows=diff.extra_rows,
                   missing_sample=list(diff.missing_sample), extra_sample=list(diff.extra_sample),
                   column_mapping=list(diff.column_mapping), first_order_mismatch=diff.first_order_mismatch)
    for side, t in (("gold", gold), ("pred", pred)):
        out[f"{side}_columns"] = t.num_columns if t is not None else 0
        out[f"{side}_types"] = [str(x) for x in t.schema.types] if t is not None else []
    return out


# ----------------------------------------------------------------------------- checks

class AstCheck:
    """Structural proof (:class:`polysql_ray.comparison.ast.AstEquivalence`).

    ``pass`` with basis ``proven`` when the canonical forms match, else ``inconclusive``;
    never ``fail`` (a structural difference says nothing about results). Executes no SQL; for
    cross-dialect cases the schema is read from the gold's source database when not given
    (:func:`read_source_schema`, any source engine with a replication reader).

    Args:
        checker: the structural checker (default :class:`AstEquivalence`).
        engine_settings: ``{engine: settings}`` for reading a server source's schema.
    """

    name = "ast"

    def __init__(self, checker: AstEquivalence | None = None,
                 engine_settings: Mapping[str, Mapping] | None = None) -> None:
        self.checker = checker or AstEquivalence()
        self.engine_settings = dict(engine_settings or {})

    def check(self, case: Case) -> EquivalenceResult:
        """See class docstring."""
        schema = case.schema
        if schema is None and case.gold_dialect != case.pred_dialect:
            schema = read_source_schema(case.gold_engine, case.gold_location,
                                        self.engine_settings.get(case.gold_engine))
        r = self.checker.check(case.gold_sql, case.gold_dialect, case.pred_sql, case.pred_dialect,
                               schema=schema)
        if r.equivalent:
            return EquivalenceResult("pass", "proven", f"structurally equivalent: {r.reason}")
        return EquivalenceResult("inconclusive", "proven", f"structure: {r.reason}")


class ResultSetEquivalence:
    """One case exactly as the pipeline scores it.

    Steps: (1) with ``structural``, the sound structural check on the SQL that runs; (2) the
    gold and, when its shape needs one, the probe (:mod:`polysql_ray.comparison.shape`) on the
    gold engine; (3) the prediction on its engine unless proven; (4)
    :func:`polysql_ray.comparison.verdict.decide` with the policy object and the limits.

    Args:
        engines: optional ``{engine_name: Engine}`` to use (else :func:`load_engine`, closed
            after each case).
        policy: a :class:`polysql_ray.comparison.policy.ComparisonPolicy` (default policy if None).
        limits: :class:`Limits` (timeout seconds, row cap, result bytes) for every execution.
        structural: run the structural proof first (as ``pipeline.structural_check=prove``).
        engine_settings: ``{engine_name: settings}`` for engines loaded here (server hosts ...).

    Verdicts: ``gold_error`` when the gold fails (``gold_<status>``); ``fail`` when the
    prediction fails (``pred_<status>``) or the result sets differ; ``pass`` when they match
    (basis ``proven`` when the structure proved it); ``inconclusive`` where the decision says so.
    ``diff`` is :func:`result_diff`.
    """

    name = "result_set"

    def __init__(self, engines: Mapping[str, Engine] | None = None, policy=None,
                 limits: Limits | None = None, structural: bool = False,
                 engine_settings: Mapping[str, Mapping] | None = None) -> None:
        from polysql_ray.comparison.policy import ComparisonPolicy

        self.engines = dict(engines or {})
        self.policy = policy if policy is not None else ComparisonPolicy()
        self.limits = limits or Limits()
        self.structural = structural
        self.engine_settings = dict(engine_settings or {})

    def _engine(self, name: str, opened: list) -> Engine:
        if name in self.engines:
            return self.engines[name]
        eng = load_engine(name, **dict(self.engine_settings.get(name) or {}))
        opened.append(eng)
        return eng

    def _run(self, engine: Engine, location: str, sql: str) -> ExecutionResult:
        return self.limits.enforce(engine.execute(location, sql, self.limits))

    def check(self, case: Case) -> EquivalenceResult:
        """See class docstring."""
        from polysql_ray.comparison.prepare import executed_sql
        from polysql_ray.comparison.shape import analyze_gold, analyze_prediction
        from polysql_ray.comparison.verdict import Pair, decide

        pol = self.policy
        gold_sql = executed_sql(case.gold_sql, case.gold_dialect, pol)
        # longer than limits.max_sql_chars: seen by no parser, refused by the engine (rejected),
        # as in the sweep (pipeline.planner.Planner)
        too_long = self.limits.refuse_length(case.pred_sql) is not None
        pred_sql = case.pred_sql if too_long else executed_sql(case.pred_sql, case.pred_dialect, pol)
        proven = False
        if self.structural and pred_sql.strip() and not too_long:
            proven = AstCheck(engine_settings=self.engine_settings).check(
                replace(case, gold_sql=gold_sql, pred_sql=pred_sql)).verdict == "pass"
        opened: list = []
        try:
            try:
                gold_engine = self._engine(case.gold_engine, opened)
                pred_engine = self._engine(case.pred_engine, opened)
            except (KeyError, ImportError) as e:
                return EquivalenceResult("inconclusive", "observed", f"engine_unavailable: {e}",
                                         reason="engine_unavailable")
            shape = analyze_gold(gold_sql, case.gold_dialect)
            if _missing_source(case.gold_engine, case.gold_location):
                # as in the pipeline (a dataset's missing database, e.g. Spider's wta_1): the gold
                # cannot run, a gold error, not the model's failure nor an engine outage
                v = decide("ok" if pred_sql.strip() else "no_sql", None, None, None, shape, pol,
                           self.limits, gold_error=f"source database missing: {case.gold_location}")
                return EquivalenceResult(v.verdict, v.basis, f"{v.reason}: source database missing: "
                                         f"{case.gold_location}", None, reason=v.reason, flags=v.flags)
            gold = self._run(gold_engine, case.gold_location, gold_sql)
            probe = self._run(gold_engine, case.gold_location, shape.probe_sql) \
                if (gold.ok and shape.probe_sql) else None
            ties = self._run(gold_engine, case.gold_location, shape.ties_probe_sql) \
                if (gold.ok and shape.ties_probe_sql) else None
            pred = pred_shape = pred_probe = pred_ties = None
            if gold.ok and pred_sql.strip() and not proven:
                where = case.pred_location or case.gold_location
                pred = self._run(pred_engine, where, pred_sql)
                pred_shape = None if too_long else analyze_prediction(pred_sql, case.pred_dialect)  # as the planner
                if pred.ok and pred_shape is not None and not pred_shape.static:
                    pred_probe = self._run(pred_engine, where, pred_shape.cut_probe_sql) \
                        if pred_shape.cut_probe_sql else None
                    pred_ties = self._run(pred_engine, where, pred_shape.ties_probe_sql) \
                        if pred_shape.ties_probe_sql else None
            v = decide("ok" if pred_sql.strip() else "no_sql", gold, probe, pred, shape, pol, self.limits,
                       proven=proven, pair=Pair(gold_sql, pred_sql, case.gold_dialect, case.pred_dialect,
                                                case.gold_engine, case.pred_engine), ties_probe=ties,
                       pred_shape=pred_shape, pred_probe=pred_probe, pred_ties_probe=pred_ties)
            err = (gold.error if not gold.ok else pred.error if (pred is not None and not pred.ok) else None)
            expl = v.reason + (f" (flags: {', '.join(v.flags)})" if v.flags else "") + (f": {err}" if err else "")
            diff = result_diff(gold.table, pred.table if pred is not None else None, v.diff) \
                if v.basis == "observed" and gold.ok else None
            return EquivalenceResult(v.verdict, v.basis, expl, diff, reason=v.reason, flags=v.flags)
        finally:
            for eng in opened:
                eng.close()


_VERDICT_LABEL = re.compile(r"verdict\W{0,5}(pass|fail)\b", re.IGNORECASE)
_VERDICT_WORD = re.compile(r"\b(PASS|FAIL)(?:ED|ES)?\b")
_NEGATED = re.compile(r"\b(?:not|doesn't|does not|cannot)\s+(?:a\s+)?pass\b", re.IGNORECASE)


def parse_judgement(text: str) -> str | None:
    """``pass``/``fail`` from a judge's answer, None when it does not say clearly.

    Order: the last ``VERDICT: PASS|FAIL`` label (any case, markdown allowed); else the last
    upper-case PASS/FAIL word, unless the text also negates a pass ("does not pass"), which
    counts as FAIL only when no PASS/FAIL word follows it.
    """
    if not text:
        return None
    labels = _VERDICT_LABEL.findall(text)
    if labels:
        return labels[-1].lower()
    words = _VERDICT_WORD.findall(text)
    if words:
        return words[-1].lower()
    lowered = text.strip().lower()
    if _NEGATED.search(text):
        return "fail"
    first = re.match(r"\W*(pass|fail|yes|no)\b", lowered)
    if first:
        return {"yes": "pass", "no": "fail"}.get(first.group(1), first.group(1))
    return None


class Judge:
    """An LLM judge: ``judge(prompt) -> answer``; the answer's PASS/FAIL is the verdict.

    The prompt holds the question, the schema (SQLite ``CREATE`` statements when the gold
    database is a SQLite file), both SQL texts with their dialects and, when both can run,
    up to 5 sample rows of each result. An unclear answer or a raising judge gives
    ``inconclusive``. Basis ``judged``.

    Args:
        judge: ``callable(prompt: str) -> str`` (a generator backend).
        sampler: optional :class:`ResultSetEquivalence`-like object whose engines produce the
            samples (default: one with the default engines); ``samples=False`` disables samples.
    """

    name = "judge"

    def __init__(self, judge: Callable[[str], str], samples: bool = True,
                 engines: Mapping[str, Engine] | None = None, limits: Limits | None = None) -> None:
        self.judge = judge
        self.samples = samples
        self.engines = dict(engines or {})
        self.limits = limits or Limits(timeout_s=10.0, row_cap=1000)

    def _sample(self, engine_name: str, location: str, sql: str) -> str:
        opened = []
        try:
            eng = self.engines.get(engine_name) or load_engine(engine_name)
            if engine_name not in self.engines:
                opened.append(eng)
            r = eng.execute(location, sql, self.limits)
        except Exception as e:  # sampling is best effort; the judge still decides
            return f"(not executed: {type(e).__name__})"
        finally:
            for e2 in opened:
                e2.close()
        if not r.ok:
            return f"(execution {r.status.value}: {(r.error or '')[:200]})"
        rows = _rows(r.table)
        return f"{len(rows)} rows; first {min(len(rows), SAMPLE_ROWS)}: {rows[:SAMPLE_ROWS]!r}"

    def build_prompt(self, case: Case) -> str:
        """The judge prompt for ``case`` (see class docstring)."""
        parts = ["You judge whether a predicted SQL query answers a question exactly like the "
                 "gold SQL query (same result on every database state).",
                 f"Question: {case.question or '(not given)'}"]
        schema = case.schema or read_source_schema(case.gold_engine, case.gold_location)
        if schema:
            parts.append("Schema:\n" + "\n".join(
                f"TABLE {t} ({', '.join(f'{c} {ty}'.strip() for c, ty in cols.items())})"
                for t, cols in schema.items()))
        parts.append(f"Gold SQL ({case.gold_dialect}):\n{case.gold_sql}")
        parts.append(f"Predicted SQL ({case.pred_dialect}):\n{case.pred_sql}")
        if self.samples and case.gold_location:
            parts.append("Gold result: " + self._sample(case.gold_engine, case.gold_location, case.gold_sql))
            parts.append("Predicted result: " + self._sample(
                case.pred_engine, case.pred_location or case.gold_location, case.pred_sql))
        parts.append("Answer with one line 'VERDICT: PASS' or 'VERDICT: FAIL'.")
        return "\n\n".join(parts)

    def check(self, case: Case) -> EquivalenceResult:
        """See class docstring."""
        try:
            answer = self.judge(self.build_prompt(case))
        except Exception as e:
            return EquivalenceResult("inconclusive", "judged", f"judge_error: {type(e).__name__}: {e}")
        decision = parse_judgement(answer or "")
        if decision is None:
            return EquivalenceResult("inconclusive", "judged", f"judge_unclear: {(answer or '')[:200]}")
        return EquivalenceResult(decision, "judged", f"judge said {decision.upper()}")


class FirstDecisive:
    """Run members in order; return the first ``pass``/``fail``, else the last result.

    The returned result's ``trail`` lists every member that ran (``check``, ``verdict``,
    ``basis``, ``explanation``), in order. An empty member list is a ``ValueError``.
    """

    name = "first_decisive"

    def __init__(self, members: Sequence[Check]) -> None:
        if not members:
            raise ValueError("FirstDecisive needs at least one member")
        self.members = list(members)

    def check(self, case: Case) -> EquivalenceResult:
        """See class docstring."""
        trail: list[dict] = []
        result = None
        for member in self.members:
            result = member.check(case)
            trail += [{"check": getattr(member, "name", type(member).__name__),
                       "verdict": result.verdict, "basis": result.basis,
                       "explanation": result.explanation}]
            if result.verdict in ("pass", "fail"):
                break
        return replace(result, trail=trail)


def observed_equivalence(engines: Mapping[str, Engine] | None = None, policy=None,
                         limits: Limits | None = None,
                         engine_settings: Mapping[str, Mapping] | None = None) -> FirstDecisive:
    """``FirstDecisive([ResultSetEquivalence(..., structural=True)])``: the pipeline's own
    procedure for one case (structural proof, then dual execution, one decision function)."""
    return FirstDecisive([ResultSetEquivalence(engines, policy, limits, structural=True,
                                               engine_settings=engine_settings)])


def judged_equivalence(judge: Callable[[str], str], **judge_kwargs: Any) -> FirstDecisive:
    """``FirstDecisive([AstCheck(), Judge(judge, **judge_kwargs)])``; ``judge(prompt) -> str``."""
    return FirstDecisive([AstCheck(), Judge(judge, **judge_kwargs)])


def _missing_source(engine: str, location: str | None) -> bool:
    """True when an embedded engine's source database file does not exist (the datasets'
    loaders mark such examples ``gold_error``; the one-case API follows them)."""
    from polysql_ray.engines.registry import engine_spec

    try:
        return engine_spec(engine).embedded and not (location and os.path.isfile(location))
    except KeyError:
        return False


def score_sql(gold_sql: str, pred_sql: str, *, database: str, engine: str = "sqlite",
              dialect: str | None = None, pred_engine: str | None = None,
              pred_database: str | None = None, replicas_dir: str | os.PathLike | None = None,
              engine_settings: Mapping[str, Mapping] | None = None, dataset: str = "score_sql",
              question: str | None = None, policy=None, limits: Limits | None = None) -> EquivalenceResult:
    """Score one prediction against its gold SQL exactly as a sweep would.

    The gold runs on the source database; the prediction runs on a verified replica of the same
    data in the target dialect's engine, built (or reused when its manifest matches) by
    :func:`polysql_ray.replication.base.replicate`; the verdict comes from
    :func:`polysql_ray.comparison.verdict.decide`, the function the pipeline's scoring tasks use.

    Args:
        gold_sql: gold SQL in ``engine``'s dialect.
        pred_sql: predicted SQL written for ``dialect``.
        database: location of the source database (SQLite/DuckDB file path, or a server
            database name for ``engine="mysql"``).
        engine: source engine name (``sqlite`` | ``duckdb`` | ``postgres`` | ``mysql``).
        dialect: target dialect (``sqlite`` | ``duckdb`` | ``postgres`` | ``mysql``); default:
            the source engine's own dialect (no replica).
        pred_engine: deprecated spelling of the target (an engine name); ``dialect`` wins.
        pred_database: an existing replica's location on the target engine (skips replication).
        replicas_dir: folder for replicas and their manifests (default
            ``~/.cache/polysql_ray/replicas``); a matching replica is reused.
        engine_settings: ``{engine: settings}`` for server engines (host, port, user ...).
        dataset: dataset name under which the replica is stored (server replicas are named by
            dataset and database id).
        question: the natural-language question (recorded for judges).
        policy: comparison policy object (default :class:`ComparisonPolicy`).
        limits: per-query sandbox limits (default :class:`Limits`).

    Returns:
        :class:`EquivalenceResult` (``verdict``, ``reason``, ``flags``, ``diff``, ``trail``);
        ``basis == "proven"`` means the prediction did not need to run. Usable in a pytest
        suite: ``assert score_sql(gold, pred, database=path, dialect="duckdb").passed``.

    Errors: ``KeyError`` for an unknown dialect or engine;
    :class:`polysql_ray.replication.base.ReplicationError` when the replica cannot be built.
    """
    from polysql_ray.engines.registry import default_dialect, engine_for_dialect

    target = engine_for_dialect(dialect) if dialect else (pred_engine or engine)
    location = pred_database
    if location is None and target != engine:
        location = _replica(database, engine, target, replicas_dir, engine_settings or {}, dataset)
    case = Case(gold_sql=gold_sql, pred_sql=pred_sql, gold_dialect=default_dialect(engine),
                pred_dialect=default_dialect(target), gold_engine=engine, pred_engine=target,
                gold_location=database, pred_location=location or database, question=question)
    return observed_equivalence(policy=policy, limits=limits, engine_settings=engine_settings).check(case)


def _replica(database: str, engine: str, target: str, replicas_dir, engine_settings: Mapping, dataset: str) -> str:
    """Location of a verified copy of ``database`` in ``target`` (built or reused)."""
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.registry import engine_spec
    from polysql_ray.replication.base import replicate

    embedded = engine_spec(engine).embedded
    location = str(Path(database).resolve()) if embedded else str(database)
    rdir = Path(replicas_dir) if replicas_dir else Path.home() / ".cache" / "polysql_ray" / "replicas"
    # the copy a sweep (or an earlier call) made of this very source in this folder: reused
    # under its own (dataset, db_id), whatever name this call was given
    known = _replica_of(rdir, target, engine, location)
    if known is not None:
        dataset, db_id = known
    else:
        db_id = Path(database).stem if embedded else _server_db_id(str(database))
    src = SourceDatabase(dataset=dataset, db_id=db_id, engine=engine, location=location,
                         exists=os.path.isfile(database) if embedded else True)
    settings = None if engine_spec(target).embedded else dict(engine_settings.get(target) or {})
    source_settings = None if embedded else dict(engine_settings.get(engine) or {})
    return replicate(src, target, rdir, settings=settings, source_settings=source_settings).location


def _server_db_id(location: str) -> str:
    """A folder-safe db_id for a server source named ``database[/schema]`` (a PostgreSQL
    location names both; the slash would nest the manifest's folder)."""
    return re.sub(r"[^0-9A-Za-z_.-]", "_", location)


def _replica_of(replicas_dir: Path, target: str, engine: str, location: str) -> tuple[str, str] | None:
    """``(dataset, db_id)`` of the copy in ``target`` whose manifest under ``replicas_dir``
    records ``location`` on ``engine`` as its source (the pipeline's replica of it), else None.
    Whether that copy is still current is :func:`polysql_ray.replication.base.replicate`'s
    decision (its reuse key), as in a sweep."""
    import json

    root = replicas_dir / target
    if not root.is_dir():
        return None
    for mf in sorted(root.glob("*/*/manifest.json")):
        try:
            doc = json.loads(mf.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("source_engine") == engine and doc.get("source_location") == location \
                and doc.get("dataset") and doc.get("db_id"):
            return str(doc["dataset"]), str(doc["db_id"])
    return None
