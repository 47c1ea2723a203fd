"""Composable equivalence checks (evaldata style) and the one-case public API.

A :class:`Check` maps one :class:`Case` (gold SQL, predicted SQL, where to run them) to an
:class:`EquivalenceResult` with a ``verdict`` (``pass``/``fail``/``inconclusive``) and a
``basis``: ``proven`` (structure, :mod:`polysql_ray.comparison.ast`), ``observed`` (dual
execution, PolySQL arXiv 2605.07796 section 3) or ``judged`` (an LLM judge).

* :class:`AstCheck` - structural proof: ``pass`` or ``inconclusive``, never ``fail``; runs no SQL.
* :class:`ResultSetEquivalence` - gold on the source engine, prediction on the target engine,
  :func:`polysql_ray.comparison.result_set.compare`; ``pass``/``fail`` with a diff;
  ``inconclusive`` when the gold fails or is non-deterministic.
* :class:`Judge` - a callable ``prompt -> text`` decides; PASS/FAIL parsed robustly.
* :class:`FirstDecisive` - members in order, first ``pass``/``fail`` wins, with a trail.
* :func:`observed_equivalence`, :func:`judged_equivalence`, :func:`score_sql`.

Example (runs as a doctest; the textbook pair is proven without executing anything)::

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
"""
from __future__ import annotations

import importlib
import os
import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import pyarrow as pa
import sqlglot
from sqlglot import exp

from polysql_ray.comparison.ast import AstEquivalence
from polysql_ray.engines.base import Engine, ExecStatus, ExecutionResult, Limits

#: Engine name -> sqlglot dialect of the SQL it runs.
ENGINE_DIALECTS: dict[str, str] = {
    "sqlite": "sqlite", "duckdb": "duckdb", "postgres": "postgres", "mysql": "mysql",
    "clickhouse": "clickhouse",
}

#: Engine name -> (module, class) implementing :class:`polysql_ray.engines.base.Engine`.
ENGINE_CLASSES: dict[str, tuple[str, str]] = {
    "sqlite": ("polysql_ray.engines.sqlite", "SqliteEngine"),
    "duckdb": ("polysql_ray.engines.duckdb", "DuckDBEngine"),
    "postgres": ("polysql_ray.engines.postgres", "PostgresEngine"),
    "mysql": ("polysql_ray.engines.mysql", "MySQLEngine"),
}

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
        verdict: ``pass`` | ``fail`` | ``inconclusive``.
        basis: ``proven`` | ``observed`` | ``judged``.
        explanation: human-readable reason (starts with a reason code).
        diff: for observed results: ``missing_rows``/``extra_rows`` (counts, multiset),
            ``missing_sample``/``extra_sample`` (up to 5 rows each), ``gold_columns``/
            ``pred_columns`` (count), ``gold_types``/``pred_types`` (Arrow type strings),
            ``comparison`` (reason, flags, diff of :mod:`result_set`); else None.
        trail: for composed checks, one dict per member that ran: ``check``, ``verdict``,
            ``basis``, ``explanation``.
    """

    verdict: str
    basis: str
    explanation: str
    diff: dict | None = None
    trail: list[dict] = field(default_factory=list)

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

def load_engine(name: str) -> Engine:
    """Instantiate the engine registered under ``name`` in :data:`ENGINE_CLASSES`.

    Raises:
        KeyError: unknown engine name; ImportError: its module is not available.
    """
    module_name, cls = ENGINE_CLASSES[name]
    module = importlib.import_module(module_name)
    if hasattr(module, cls):
        return getattr(module, cls)()
    for obj in vars(module).values():  # tolerate another class name in the engine module
        if isinstance(obj, type) and getattr(obj, "name", None) == name and hasattr(obj, "execute"):
            return obj()
    raise ImportError(f"no engine class named {name!r} in {module_name}")


def read_sqlite_schema(path: str) -> dict[str, dict[str, str]] | None:
    """``{table: {column: declared_type}}`` of a SQLite file, opened read-only; None if absent.

    Reads catalog metadata only (``PRAGMA table_info``), never user SQL.
    """
    if not path or not os.path.isfile(path):
        return None
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = [r[0] for r in con.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table','view')")]
            return {t: {r[1]: r[2] or "" for r in con.execute(
                f"PRAGMA table_info(\"{t.replace(chr(34), chr(34) * 2)}\")")} for t in tables}
        finally:
            con.close()
    except sqlite3.Error:
        return None


def _rows(table: pa.Table) -> list[tuple]:
    cols = [c.to_pylist() for c in table.columns]
    return list(zip(*cols)) if cols else []


def _row_key(row: tuple) -> tuple:
    out = []
    for v in row:
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, float):
            v = round(v, 5)
            if v == int(v):
                v = int(v)
        out.append(repr(v))
    return tuple(out)


def result_diff(gold: pa.Table, pred: pa.Table, samples: int = SAMPLE_ROWS) -> dict:
    """Multiset row difference and column/type differences of two result sets.

    Rows are compared by value with floats rounded to 5 decimals and booleans as 0/1 (a
    summary for people; the verdict itself comes from ``result_set.compare``).

    Returns:
        dict with ``missing_rows``, ``extra_rows`` (int counts: gold rows absent from the
        prediction, predicted rows absent from the gold), ``missing_sample``, ``extra_sample``
        (lists of row tuples), ``gold_columns``, ``pred_columns`` (int), ``gold_types``,
        ``pred_types`` (lists of Arrow type strings).
    """
    g_rows, p_rows = _rows(gold), _rows(pred)
    g_count = Counter(_row_key(r) for r in g_rows)
    p_count = Counter(_row_key(r) for r in p_rows)
    missing, extra = g_count - p_count, p_count - g_count
    missing_sample = [r for r in g_rows if _row_key(r) in missing][:samples]
    extra_sample = [r for r in p_rows if _row_key(r) in extra][:samples]
    return {
        "missing_rows": sum(missing.values()), "extra_rows": sum(extra.values()),
        "missing_sample": missing_sample, "extra_sample": extra_sample,
        "gold_columns": gold.num_columns, "pred_columns": pred.num_columns,
        "gold_types": [str(t) for t in gold.schema.types],
        "pred_types": [str(t) for t in pred.schema.types],
    }


def _fallback_compare(gold: pa.Table, pred: pa.Table, gold_sql: str, gold_dialect: str):
    """Used only while ``result_set.compare`` is unavailable: bag, or list under a top-level
    ORDER BY; returns ``(match, reason, flags, diff)``."""
    ordered = False
    try:
        ordered = bool(sqlglot.parse_one(gold_sql, read=gold_dialect).args.get("order"))
    except Exception:
        pass
    g, p = [_row_key(r) for r in _rows(gold)], [_row_key(r) for r in _rows(pred)]
    if gold.num_columns != pred.num_columns:
        return False, "column_count", (), None
    match = g == p if ordered else Counter(g) == Counter(p)
    return match, ("match" if match else ("row_order" if Counter(g) == Counter(p) else "rows")), \
        ("fallback_compare",), None


# ----------------------------------------------------------------------------- checks

class AstCheck:
    """Structural proof (:class:`polysql_ray.comparison.ast.AstEquivalence`).

    ``pass`` with basis ``proven`` when the canonical forms match, else ``inconclusive``;
    never ``fail`` (a structural difference says nothing about results). Executes no SQL; for
    cross-dialect cases the schema is read from a SQLite gold database file when not given.
    """

    name = "ast"

    def __init__(self, checker: AstEquivalence | None = None) -> None:
        self.checker = checker or AstEquivalence()

    def check(self, case: Case) -> EquivalenceResult:
        """See class docstring."""
        schema = case.schema
        if schema is None and case.gold_dialect != case.pred_dialect and case.gold_engine == "sqlite":
            schema = read_sqlite_schema(case.gold_location)
        r = self.checker.check(case.gold_sql, case.gold_dialect, case.pred_sql, case.pred_dialect,
                               schema=schema)
        if r.equivalent:
            return EquivalenceResult("pass", "proven", f"structurally equivalent: {r.reason}")
        return EquivalenceResult("inconclusive", "proven", f"structure: {r.reason}")


class ResultSetEquivalence:
    """Dual execution: gold on its engine, prediction on its engine, result sets compared.

    Args:
        engines: optional ``{engine_name: Engine}`` to use (else :func:`load_engine`, closed
            after each case).
        policy: a :class:`polysql_ray.comparison.policy.ComparisonPolicy` (default policy if None).
        limits: :class:`Limits` (timeout seconds, row cap) for every execution.

    Verdicts: ``inconclusive`` when the gold is non-deterministic (random/now/LIMIT without
    ORDER BY ...) or fails to run (``gold_<status>``); ``fail`` when the prediction fails
    (``pred_<status>``) or the result sets differ; ``pass`` when they match. ``diff`` is
    :func:`result_diff` plus the comparison's reason/flags/diff.
    """

    name = "result_set"

    def __init__(self, engines: Mapping[str, Engine] | None = None, policy=None,
                 limits: Limits | None = None) -> None:
        self.engines = dict(engines or {})
        self.policy = policy
        self.limits = limits or Limits()
        self._ast = AstEquivalence()

    def _engine(self, name: str, opened: list) -> Engine:
        if name in self.engines:
            return self.engines[name]
        eng = load_engine(name)
        opened.append(eng)
        return eng

    def check(self, case: Case) -> EquivalenceResult:
        """See class docstring."""
        nondet = self._ast.nondeterministic_reason(case.gold_sql, case.gold_dialect)
        if nondet:
            return EquivalenceResult("inconclusive", "observed", f"gold_nondeterministic: {nondet}")
        opened: list = []
        try:
            try:
                gold_engine = self._engine(case.gold_engine, opened)
                pred_engine = self._engine(case.pred_engine, opened)
            except (KeyError, ImportError) as e:
                return EquivalenceResult("inconclusive", "observed", f"engine_unavailable: {e}")
            gold = gold_engine.execute(case.gold_location, case.gold_sql, self.limits)
            if not gold.ok:
                return EquivalenceResult("inconclusive", "observed",
                                         f"gold_{gold.status.value}: {gold.error}")
            pred = pred_engine.execute(case.pred_location or case.gold_location, case.pred_sql,
                                       self.limits)
            if not pred.ok:
                return EquivalenceResult("fail", "observed", f"pred_{pred.status.value}: {pred.error}")
            match, reason, flags, cmp_diff = self._compare(case, gold, gold_engine)(gold.table, pred.table)
            diff = result_diff(gold.table, pred.table)
            diff["comparison"] = {"reason": reason, "flags": list(flags), "diff": cmp_diff}
            return EquivalenceResult("pass" if match else "fail", "observed",
                                     f"{reason}" + (f" (flags: {', '.join(flags)})" if flags else ""),
                                     diff=diff)
        finally:
            for eng in opened:
                eng.close()

    def _compare(self, case: Case, gold: ExecutionResult, gold_engine: Engine):
        """``(gold_table, pred_table) -> (match, reason, flags, diff)`` via result_set.compare."""
        try:
            result_set = importlib.import_module("polysql_ray.comparison.result_set")
        except ImportError:
            return lambda g, p: _fallback_compare(g, p, case.gold_sql, case.gold_dialect)
        policy = self.policy
        if policy is None:
            from polysql_ray.comparison.policy import ComparisonPolicy
            policy = ComparisonPolicy()
        shape, probe = None, None
        try:
            from polysql_ray.comparison.shape import analyze_gold
            shape = analyze_gold(case.gold_sql, case.gold_dialect)
            if getattr(shape, "probe_sql", None):
                pr = gold_engine.execute(case.gold_location, shape.probe_sql, self.limits)
                probe = pr.table if pr.ok else None
        except ImportError:
            pass

        def run(g, p):
            c = result_set.compare(g, p, shape, policy, probe=probe)
            return c.match, c.reason, tuple(getattr(c, "flags", ()) or ()), getattr(c, "diff", None)
        return run


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
        schema = read_sqlite_schema(case.gold_location) if case.gold_engine == "sqlite" else None
        schema = case.schema or schema
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
                         limits: Limits | None = None) -> FirstDecisive:
    """``FirstDecisive([AstCheck(), ResultSetEquivalence(engines, policy, limits)])``."""
    return FirstDecisive([AstCheck(), ResultSetEquivalence(engines, policy, limits)])


def judged_equivalence(judge: Callable[[str], str], **judge_kwargs: Any) -> FirstDecisive:
    """``FirstDecisive([AstCheck(), Judge(judge, **judge_kwargs)])``; ``judge(prompt) -> str``."""
    return FirstDecisive([AstCheck(), Judge(judge, **judge_kwargs)])


def score_sql(gold_sql: str, pred_sql: str, *, database: str, engine: str = "sqlite",
              pred_engine: str | None = None, pred_database: str | None = None,
              question: str | None = None, policy=None,
              limits: Limits | None = None) -> EquivalenceResult:
    """Score one prediction against its gold SQL: structural proof first, else dual execution.

    Args:
        gold_sql: gold SQL in ``engine``'s dialect.
        pred_sql: predicted SQL in ``pred_engine``'s dialect.
        database: location of the gold database (SQLite file path, or DuckDB file path when
            ``engine="duckdb"``).
        engine: source engine name (``sqlite`` | ``duckdb`` | ``postgres`` | ``mysql``).
        pred_engine: target engine name (default: ``engine``).
        pred_database: location of the replica on ``pred_engine`` (default: ``database``).
        question: the natural-language question (recorded, used by judges).
        policy: comparison policy (default :class:`ComparisonPolicy`).
        limits: per-query sandbox limits (default :class:`Limits`).

    Returns:
        :class:`EquivalenceResult` with ``trail``; ``basis == "proven"`` means nothing ran.
        Usable in a pytest suite: ``assert score_sql(gold, pred, database=path).passed``.
    """
    pred_engine = pred_engine or engine
    case = Case(gold_sql=gold_sql, pred_sql=pred_sql,
                gold_dialect=ENGINE_DIALECTS.get(engine, engine),
                pred_dialect=ENGINE_DIALECTS.get(pred_engine, pred_engine),
                gold_engine=engine, pred_engine=pred_engine, gold_location=database,
                pred_location=pred_database or database, question=question)
    return observed_equivalence(policy=policy, limits=limits).check(case)
