"""Error taxonomy: rule-based classes from the stored verdicts, plus an optional LLM-judge hook.

Rule-based classes (:data:`RULES`, first matching rule wins) come from ``verdict``,
``pred_status`` and ``reason`` (vocabulary: :mod:`polysql_ray.store.schema`,
:class:`polysql_ray.engines.base.ExecStatus`). Each class belongs to a *family* so the
PolySQL split (paper: 61% logical vs 8% syntactic failures) can be reported:
``dialect_syntax``, ``schema``, ``execution`` (runtime, timeout, too large /
rejected), ``logical`` (wrong result), ``generation`` (no SQL), ``other``.

The judge hook (:func:`judge_error_class`) asks a caller-supplied ``judge(prompt) -> str``
callable for one of :data:`JUDGE_LABELS`, decided in that order (the first that applies), and
parses the free-text answer with :func:`parse_judge_label`.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import duckdb

from .load import SCORES_TABLE, sql_list


@dataclass(frozen=True)
class TaxonomyRule:
    """One rule: a row is in ``label`` when any given field matches one of its values.

    Attributes:
        label: class name stored in reports.
        family: coarse family (:data:`FAMILIES`: ``dialect_syntax``, ``schema``, ``execution``, ``logical`` ...).
        verdicts: matching ``verdict`` values.
        reasons: matching ``reason`` values (the part before any ``:``).
        pred_statuses: matching ``pred_status`` values.
    """

    label: str
    family: str
    verdicts: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    pred_statuses: tuple[str, ...] = ()


#: Failure families in report order (rule-based and judge-based classes both map onto them).
FAMILIES: tuple[str, ...] = ("logical", "schema", "dialect_syntax", "execution", "generation",
                             "invalid_evaluation", "other")

#: Ordered rules; the first match wins; ``other`` catches the rest.
RULES: tuple[TaxonomyRule, ...] = (
    TaxonomyRule("gold_error", "excluded", verdicts=("gold_error",)),
    TaxonomyRule("correct", "none", verdicts=("pass",)),
    TaxonomyRule("no_sql", "generation", reasons=("no_sql", "missing", "pred_empty"),
                 pred_statuses=("empty",)),
    TaxonomyRule("unavailable", "excluded", reasons=("pred_unavailable",),
                 pred_statuses=("unavailable",)),
    TaxonomyRule("timeout", "execution", reasons=("pred_timeout",), pred_statuses=("timeout",)),
    TaxonomyRule("dialect_syntax_error", "dialect_syntax", reasons=("pred_syntax",),
                 pred_statuses=("syntax",)),
    TaxonomyRule("schema_linking_error", "schema", reasons=("pred_schema",),
                 pred_statuses=("schema",)),
    TaxonomyRule("runtime_error", "execution", reasons=("pred_runtime",),
                 pred_statuses=("runtime",)),
    TaxonomyRule("too_large_or_rejected", "execution",
                 reasons=("pred_too_large", "pred_rejected"),
                 pred_statuses=("too_large", "rejected")),
    TaxonomyRule("wrong_row_count", "logical", reasons=("row_count",)),
    TaxonomyRule("wrong_column_count", "logical", reasons=("column_count",)),
    TaxonomyRule("wrong_order", "logical", reasons=("order",)),
    TaxonomyRule("wrong_values", "logical", reasons=("values",)),
    TaxonomyRule("inconclusive", "other", verdicts=("inconclusive",)),
    TaxonomyRule("wrong_other", "logical", verdicts=("fail",)),
)
OTHER = TaxonomyRule("other", "other")


def classify_row(verdict: str | None, reason: str | None, pred_status: str | None,
                 rules: Sequence[TaxonomyRule] = RULES) -> TaxonomyRule:
    """The first rule matching one stored row (pure Python twin of :func:`error_class_sql`)."""
    reason_code = (reason or "").split(":", 1)[0]
    for rule in rules:
        if (verdict in rule.verdicts or reason_code in rule.reasons
                or (pred_status or "") in rule.pred_statuses):
            return rule
    return OTHER


def error_class_sql(rules: Sequence[TaxonomyRule] = RULES, field: str = "label") -> str:
    """A DuckDB ``CASE`` expression giving each row's rule ``label`` (or ``family``)."""
    whens = []
    for rule in rules:
        conds = []
        if rule.verdicts:
            conds.append(f"coalesce(verdict, '') IN {sql_list(rule.verdicts)}")
        if rule.reasons:
            conds.append(f"split_part(coalesce(reason, ''), ':', 1) IN {sql_list(rule.reasons)}")
        if rule.pred_statuses:
            conds.append(f"coalesce(pred_status, '') IN {sql_list(rule.pred_statuses)}")
        whens.append(f"WHEN {' OR '.join(conds)} THEN {sql_list([getattr(rule, field)])[1:-1]}")
    return f"CASE {' '.join(whens)} ELSE {sql_list([getattr(OTHER, field)])[1:-1]} END"


def error_taxonomy(
    con: duckdb.DuckDBPyConnection, by: Sequence[str] = ("model", "dialect"),
    rules: Sequence[TaxonomyRule] = RULES,
) -> list[dict]:
    """Count rule-based error classes per group among rows that count in EX and are wrong.

    Args:
        con: connection prepared by :func:`polysql_ray.statistics.load.load_scores`.
        by: group columns.

    Returns:
        Dicts sorted by group, then class label: group columns, ``error_class``, ``family``,
        ``count`` and ``share`` (fraction of the group's failures, i.e. of the wrong,
        non-excluded rows).
    """
    cols = "".join(f"{c}, " for c in by)
    part = f"PARTITION BY {', '.join(by)}" if by else ""
    rows = con.execute(
        f"""
        SELECT {cols} error_class, family, count(*) AS count,
               count(*) / sum(count(*)) OVER ({part}) AS share
        FROM (SELECT *, {error_class_sql(rules)} AS error_class,
                        {error_class_sql(rules, 'family')} AS family
              FROM {SCORES_TABLE} WHERE NOT excluded AND NOT is_pass)
        GROUP BY {cols} error_class, family
        ORDER BY {cols} error_class
        """
    ).fetchall()
    names = [*by, "error_class", "family", "count", "share"]
    return [dict(zip(names, r)) for r in rows]


# ----------------------------------------------------------------------------- judge hook

#: Judge labels in decision order: the judge picks the first that applies, and when the
#: parsed answer names several, the earliest in this order wins.
JUDGE_LABELS: tuple[str, ...] = (
    "schema_linking_error",
    "filtering_error",
    "aggregation_error",
    "dialect_error",
    "invalid_evaluation",
)

#: Normalised phrases naming each label. Strong phrases are the label itself; weak phrases
#: are only used when no strong phrase is found.
#: Family of each judge label (the paper's logic-before-syntax split: schema linking is its own
#: family; filtering and aggregation are logical).
JUDGE_FAMILY: dict[str, str] = {
    "schema_linking_error": "schema", "filtering_error": "logical",
    "aggregation_error": "logical", "dialect_error": "dialect_syntax",
    "invalid_evaluation": "invalid_evaluation", "unparsed": "other",
}

_STRONG = {
    "schema_linking_error": ("schema linking error", "schema link error", "schemalinking error"),
    "filtering_error": ("filtering error", "filter error"),
    "aggregation_error": ("aggregation error", "aggregate error"),
    "dialect_error": ("dialect error", "dialect specific error", "dialect syntax error"),
    "invalid_evaluation": ("invalid evaluation", "evaluation is invalid", "evaluation invalid"),
}
_WEAK = {
    "schema_linking_error": ("schema linking", "schema error", "schema"),
    "filtering_error": ("filtering", "filter"),
    "aggregation_error": ("aggregation", "aggregate"),
    "dialect_error": ("dialect issue", "dialect mismatch", "dialect specific", "wrong dialect"),
    "invalid_evaluation": ("invalid", "false negative", "actually correct"),
}
_NEGATION = re.compile(r"\b(not|no|isn t|isnt|is not|without|rather than|instead of|never|nor)\b")
_MARKER = re.compile(
    r"\b(final answer|answer|label|category|classification|error class|error type|class|verdict)"
    r"\s*:(.*)$"
)


def _normalise(text: str) -> str:
    """Lower-case; every character except letters, digits, ':' and newline becomes a space."""
    text = re.sub(r"[^a-z0-9:\n]+", " ", text.lower())
    return "\n".join(" ".join(line.split()) for line in text.split("\n"))


def _mentions(text: str, table: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Labels mentioned in ``text`` (normalised) and not preceded closely by a negation."""
    found = []
    for label, phrases in table.items():
        for phrase in phrases:
            for m in re.finditer(rf"(?<![a-z0-9]){re.escape(phrase)}(?![a-z0-9])", text):
                before = " ".join(text[: m.start()].split()[-3:])
                if not _NEGATION.search(before):
                    found.append(label)
                    break
            if label in found:
                break
    return found


def _pick(text: str) -> str | None:
    for table in (_STRONG, _WEAK):
        found = _mentions(text, table)
        if found:
            return min(found, key=JUDGE_LABELS.index)
    return None


def parse_judge_label(output: str) -> str | None:
    """Parse a judge's free-text answer into one of :data:`JUDGE_LABELS`.

    Tolerant of case, punctuation, underscores vs spaces, markdown (``**``, backticks,
    headings, JSON) and extra prose. Order of evidence:

    1. the last line with a marker (``LABEL:``, ``Category:``, ``Final answer:``, a JSON
       ``"label":`` ...) that names a label;
    2. otherwise the whole text: exact label phrases (``schema linking error``), then weaker
       phrases (``filtering``, ``aggregation`` ...).

    Mentions closely preceded by a negation ("not a filtering error") are ignored. When
    several labels remain, the earliest in :data:`JUDGE_LABELS` (the decision order) wins.

    Returns:
        the label, or None when the output names none.
    """
    text = _normalise(output or "")
    for line in reversed(text.split("\n")):
        m = _MARKER.search(line)
        if m:
            label = _pick(m.group(2))
            if label:
                return label
    return _pick(text)


def build_judge_prompt(row: Mapping[str, object]) -> str:
    """The judge prompt for one failed prediction.

    Args:
        row: a store row (``dialect``, ``gold_sql``, ``pred_sql``, ``reason``, ``pred_error``,
            optionally ``question`` and ``db_schema`` supplied by the caller).

    Returns:
        a prompt asking for exactly one label of :data:`JUDGE_LABELS`, checked in order.
    """
    def get(k: str, default: str = "(not available)") -> str:
        v = row.get(k)
        return str(v) if v not in (None, "") else default

    return (
        "You are auditing a text-to-SQL prediction that execution-based evaluation scored as "
        "incorrect.\n"
        f"Target dialect: {get('dialect')}\n"
        f"Question: {get('question')}\n"
        f"Schema: {get('db_schema')}\n"
        f"Gold SQL (source engine):\n{get('gold_sql')}\n"
        f"Predicted SQL ({get('dialect')}):\n{get('pred_sql')}\n"
        f"Evaluation outcome: {get('reason')}; engine error: {get('pred_error', 'none')}\n\n"
        "Classify the error. Check these classes in order and choose the FIRST that applies:\n"
        "1. schema_linking_error: wrong or missing tables/columns, or wrong joins.\n"
        "2. filtering_error: wrong WHERE/HAVING conditions, literals, or comparisons.\n"
        "3. aggregation_error: wrong aggregate function, GROUP BY, DISTINCT or counting.\n"
        "4. dialect_error: the logic is right but syntax, functions or semantics belong to "
        "another SQL dialect.\n"
        "5. invalid_evaluation: the prediction is actually correct or the gold/evaluation "
        "is wrong.\n"
        "Answer with a single final line of the form `LABEL: <class>`."
    )


@dataclass(frozen=True)
class JudgeResult:
    """A judge's classification of one prediction.

    Attributes:
        label: one of :data:`JUDGE_LABELS`, or ``"unparsed"`` when the output named none.
        raw: the judge's raw output.
    """

    label: str
    raw: str


def judge_error_class(row: Mapping[str, object], judge: Callable[[str], str]) -> JudgeResult:
    """Classify one failed prediction with an LLM judge (optional taxonomy hook).

    Args:
        row: see :func:`build_judge_prompt`.
        judge: any callable ``prompt -> answer text`` (a local model, an API client ...).

    Returns:
        :class:`JudgeResult` with the parsed label (``unparsed`` when unrecognisable).
    """
    raw = judge(build_judge_prompt(row))
    return JudgeResult(parse_judge_label(raw) or "unparsed", raw)


# ------------------------------------------------------------------- judge-based taxonomy

#: Folder (under ``results_dir``) of the judge job's verdicts: ``judgements/<judge>.parquet``.
JUDGEMENTS_DIR = "judgements"


def judgement_files(results_dir) -> list:
    """Sorted ``<results_dir>/judgements/*.parquet`` files (empty when the judge never ran)."""
    from pathlib import Path

    root = Path(results_dir) / JUDGEMENTS_DIR
    return sorted(root.glob("*.parquet")) if root.is_dir() else []


def judge_taxonomy(con: duckdb.DuckDBPyConnection, results_dir) -> tuple[list[dict], list[dict]]:
    """Judge-based error families per (judge, model, dialect), and judge vs rule agreement.

    Reads the judge job's files (:data:`JUDGEMENTS_DIR`) and keeps the judgements whose score
    ``key`` is a current failure of the loaded ``scores`` table (a rescored question drops its
    old judgement).

    Returns:
        ``(per_cell, agreement)``. ``per_cell``: dicts sorted by judge, model, dialect, family with
        ``judge, model, dialect, family, count, share`` (share of the judged failures).
        ``agreement``: dicts sorted by judge, rule family, judge family with ``judge,
        rule_family, judge_family, count``. Both empty when the judge job has not run.
    """
    files = judgement_files(results_dir)
    if not files:
        return [], []
    flist = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"
    base = f"""
        SELECT judge, model, dialect, jfamily AS family, {error_class_sql(RULES, 'family')} AS rule_family
        FROM (SELECT j.judge AS judge, j.family AS jfamily, s.model, s.dialect, s.verdict, s.reason,
                     s.pred_status, s.excluded, s.is_pass
              FROM read_parquet({flist}, union_by_name=true) j
              JOIN {SCORES_TABLE} s ON s.key = j.key)
        WHERE NOT excluded AND NOT is_pass"""
    per_cell = con.execute(f"""
        SELECT judge, model, dialect, family, count(*) AS count,
               count(*) / sum(count(*)) OVER (PARTITION BY judge, model, dialect) AS share
        FROM ({base}) GROUP BY judge, model, dialect, family
        ORDER BY judge, model, dialect, family""").fetchall()
    agree = con.execute(f"""
        SELECT judge, rule_family, family AS judge_family, count(*) AS count
        FROM ({base}) GROUP BY judge, rule_family, family
        ORDER BY judge, rule_family, judge_family""").fetchall()
    return ([dict(zip(("judge", "model", "dialect", "family", "count", "share"), r)) for r in per_cell],
            [dict(zip(("judge", "rule_family", "judge_family", "count"), r)) for r in agree])
