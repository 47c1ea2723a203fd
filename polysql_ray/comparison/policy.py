"""The versioned result-set comparison policy: one frozen object, Hydra-overridable.

Every score in the results store carries ``policy.version`` and ``policy.fingerprint()``
(``store/schema.py``); changing any field (e.g. ``policy.abs_tol=1e-4`` on the Hydra command
line) changes the fingerprint and therefore the cell key, so results under different policies
never mix. The policy is built **once per run** (``ComparisonPolicy.from_config``) and passed
as this object to every scoring task and to :func:`polysql_ray.comparison.verdict.decide`.

Rules of the default policy (``cmp-5``):

* **Rows**: multiset (bag) comparison unless the gold has a top-level ORDER BY; then rows
  compare in order and rows tied on the ORDER BY keys compare as a multiset. Duplicates count
  (a missing DISTINCT fails).
* **Columns** (``columns: match``): predicted columns are matched to gold columns by content,
  rows kept together (a permuted projection ``SELECT b, a`` for ``SELECT a, b`` is correct;
  flag ``columns_reordered``); extra predicted columns are tolerated (flag
  ``extra_pred_columns_used``), as the PolySQL method prescribes (arXiv 2605.07796, section 3).
  ``columns: positional`` compares gold column i with predicted column i.
* **Numbers** (the one place where "equal" is not identity; implemented once, in
  :func:`polysql_ray.comparison.normalize.close`): two values that are *integers by type*
  (int, bool when ``bool_as_int``, Decimal with scale 0) compare **exactly**, and so does an
  integer gold against a float prediction (equal only within ``abs_tol``, never by ``rel_tol``:
  gold 1000000001 is not 1000000000.0; a float gold keeps the full tolerance); otherwise the
  values are equal iff ``|a - b| <= abs_tol + rel_tol * max(|a|, |b|)`` with both finite
  (NULL only equals NULL; ``inf`` equals only the same-sign ``inf``, so ``SELECT 1e999`` never
  passes a numeric gold; NaN equals NaN only under ``nan_equal``, default true: SQL engines
  that have NaN sort and group all NaNs as one value). Defaults ``abs_tol = 1e-5`` (the PolySQL paper's tolerance) and
  ``rel_tol = 1e-9`` (absorbs float accumulation noise on large magnitudes only: a double sum
  near 1e12 has an ulp of 1.2e-4). A purely relative 1e-5 would accept 123457.0 for 123456.0;
  rounding to fixed digits rejects values straddling a rounding boundary.
* **Type coincidences** (:data:`COINCIDENCES`): two pairs of values that are the same answer
  written with different types, each decided by one knob, ``equal`` | ``flagged`` |
  ``inconclusive``, and flagged (flag of the knob's name) whenever it decides the verdict:

  - ``midnight_timestamp``: a TIMESTAMP at midnight vs a date (a DATE or ISO date text):
    SQLite ``date(d, '+7 days')`` gives the text ``'2024-03-08'``, DuckDB ``d + INTERVAL 7 DAY``
    and PostgreSQL ``date_trunc('day', d)`` give ``2024-03-08 00:00:00``. Only a timestamp whose
    time of day is exactly ``00:00:00`` meets the date (also the text ``'2024-03-08 00:00:00'``
    on the other side, so the rule stays an equivalence); ``12:30`` never does.
  - ``integer_string``: a string holding an integer (optional sign, decimal digits, leading
    zeros allowed: ``'2021'``, ``'03'``; not ``'3.0'``, ``' 3'`` or ``'1e3'``) vs a number of the
    same integer value: SQLite ``strftime('%Y', d)`` gives ``'2021'``, ``EXTRACT(YEAR FROM d)``
    gives ``2021`` (DuckDB BIGINT, PostgreSQL NUMERIC, MySQL INT). ``string_number_equal``
    governs the other numeric strings (``'3.5'``), never these.

  ``equal``: the values are equal (a pass carries the flag); ``flagged``: they differ (the
  strict verdict, ``fail``, carries the flag, so "EX unflagged" leaves the item out);
  ``inconclusive``: the item is ``inconclusive`` with the flag. A flag is raised only when the
  coincidence decides the outcome: the comparison passes with the rule and fails without it.

  Defaults: ``equal`` for both. Both pairs are the *natural correct answer* in the target
  dialect to a question whose gold was written for SQLite (the cases above, held out from the
  rule's design: SQLite has no DATE type and no integer-returning date functions, so every
  date arithmetic and date-part question of Spider/BIRD meets one of them on another engine),
  and the value is the same (the 8th of March is that day's midnight; the year 2021 is 2021):
  failing them would charge the dialect gap with a type convention the question does not ask
  about (evaluation notes section 2, "Types"). A wrong prediction cannot pass *because* of the
  rule unless its values are those same dates or integers; the flag keeps every such pass
  visible, and ``policy.midnight_timestamp=flagged`` / ``policy.integer_string=flagged`` gives
  the strict reading. ``testsuite`` and ``bird`` use ``flagged``: their evaluators compare
  Python values, where ``'2021' != 2021`` and a ``datetime`` is no ``str``.
* **Ties at a LIMIT cut** (``ORDER BY ... LIMIT k`` where row k+1 ties with row k): always
  flagged ``ties_at_limit``; ``lenient`` accepts any choice among the tied rows.
* **Ambiguity flags** (``null_order``, ``integer_division``, ``duplicates``,
  ``time_dependent_gold``, ``nondeterministic_gold`` ...; see the README's flag table) never
  change a verdict by themselves; a flag listed in ``inconclusive_flags`` turns a ``pass`` or
  ``fail`` carrying it into ``inconclusive``.
* **Determinism**: a gold whose result is not a function of the data (random/uuid functions,
  LIMIT without ORDER BY, a tie at an ORDER BY ... LIMIT cut below the top level, bare columns
  taken from a min()/max() row that ties with another (``cmp-5``), found on the data by a probe
  query) is flagged ``nondeterministic_gold`` and, by default, scored
  ``inconclusive``: its observed pass/fail depends on which tied row an engine happened to pick
  (Spider q954/q955 flip between MariaDB runs). A tie at the *top-level* cut is decided by the
  lenient rule above instead (any tied choice passes). The prediction is checked the same way
  on the target engine (flag ``nondeterministic_pred``, by default ``inconclusive``): random
  functions, a nested cut in a tie, an ungrouped column holding several values on MariaDB
  (Spider q573/q574), or a tie at its own top-level LIMIT cut where another choice of the tied
  rows would get another verdict (Spider q562); a tie every choice of which is judged alike is
  decided as observed.

``policy=testsuite`` (``conf/policy/testsuite.yaml``) emulates the exec rules of the Spider
test-suite evaluator (Zhong et al., EMNLP 2020, github.com/taoyds/test-suite-sql-eval): the
DISTINCT keyword is deleted from both queries before they run (``distinct: strip_all``),
results compare as bags, or as exact lists when the gold text contains ``order by`` anywhere
(``order: order_by_anywhere``, ``ties: positional``), columns may be permuted but not added,
two empty results are equal whatever their columns, and numbers compare exactly. As
test-suite does (``parse.remove_distinct``: every sqlparse token equal to ``distinct``, case
folded, is deleted), ``distinct: strip_all`` deletes DISTINCT inside aggregates too
(``COUNT(DISTINCT x)`` runs as ``COUNT(x)``): the emulation reproduces test-suite's verdicts,
its known defect included (``count(*)`` then passes for ``count(DISTINCT x)`` where no NULL and
no duplicate tells them apart).

``policy=bird`` (``conf/policy/bird.yaml``) is BIRD's execution rule
(``set(predicted_res) == set(ground_truth_res)``, bird-bench ``evaluation.py``): rows as
tuples, columns in their positions (none extra), order ignored, duplicates ignored, exact
values, two empty results equal, every item decided.

A policy has a ``name`` (``default``, ``testsuite``, ``bird``, ``strict``: the file in
``conf/policy/``), stored in every score row's ``policy`` column; the name is a label and not
part of the fingerprint. Several policies score one run from the same executions with
``policies=[default,testsuite,bird]`` (README "Several policies in one run").
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

ORDER_MODES = ("auto", "bag", "list", "order_by_anywhere")
DUPLICATE_MODES = ("bag", "set")
TIE_MODES = ("lenient", "strict")
TIED_ROW_MODES = ("multiset", "positional")
COLUMN_MODES = ("match", "positional")
DISTINCT_MODES = ("keep", "strip", "strip_all")
#: Values of the type-coincidence knobs (module docstring, "Type coincidences").
COINCIDENCE_MODES = ("equal", "flagged", "inconclusive")
#: The type-coincidence knobs; each knob's name is also the flag it raises.
COINCIDENCES = ("midnight_timestamp", "integer_string")

#: Flags saying the verdict may hinge on an ambiguity (README, "Ambiguity flags"): EX is also
#: reported over the items carrying none of them.
AMBIGUITY_FLAGS = ("ties_at_limit", "ties_truncated", "nondeterministic_gold", "nondeterministic_pred",
                   "time_dependent_gold",
                   "null_order", "integer_division", "bool_as_int", "decimal_scale", "collation",
                   "duplicates", "ungrouped_column", "tie_probe_unavailable", "order_keys_unknown",
                   "unparsed_gold", "empty_aggregate", "string_number", *COINCIDENCES)
#: Every flag a policy may list in ``inconclusive_flags`` (the ambiguity flags and the
#: informational column-mapping flags).
POLICY_FLAGS = AMBIGUITY_FLAGS + ("columns_reordered", "extra_pred_columns_used")


@dataclass(frozen=True)
class ComparisonPolicy:
    """How a gold result set and a predicted result set are judged equal (EX).

    Attributes:
        name: the policy's label (``default``, ``testsuite``, ``bird`` ...: its file in
            ``conf/policy/``), stored in each score row's ``policy`` column; not part of the
            fingerprint (two names for the same rules share their scores).
        version: policy version tag stored with every score (``cmp-5``); bumped whenever the
            comparison *code* changes meaning, so old scores are recognisably different.
        abs_tol: absolute tolerance for non-integer numbers (paper: 1e-5).
        rel_tol: relative tolerance for non-integer numbers; see the module docstring.
        order: ``auto`` = multiset (bag) unless the gold has a top-level ORDER BY, then rows
            in order; ``bag`` = always multiset; ``list`` = always in order;
            ``order_by_anywhere`` = in order when the gold text contains ``order by``
            anywhere, subqueries included (test-suite's rule).
        ties: ``multiset``: under an ordered comparison, rows tied on the ORDER BY keys compare
            as a multiset; ``positional``: strictly row by row (test-suite).
        columns: ``match``: predicted columns matched to gold columns by content, rows kept
            together (flag ``columns_reordered`` when the mapping is not the identity);
            ``positional``: gold column i is predicted column i.
        extra_pred_columns: tolerate extra predicted columns (flag ``extra_pred_columns_used``).
        max_extra_pred_columns: at most this many extra predicted columns are tolerated (more:
            reason ``column_count``), and with extra columns a predicted column that is a
            constant of its SQL (a literal, ``1 + 1``: no column, aggregate or subquery; see
            ``shape.PredShape.constant_columns``) never stands for a gold column. Without the
            bound ``SELECT 0, 1, 2, ..., 300`` passes every ``COUNT(*)`` question whose answer
            is below 301. Default 10 (a ``SELECT *`` of a Spider table or of a two-table join).
        string_number_equal: treat the string '5' as equal to the number 5 (default False:
            a string is not a number).
        bool_as_int: BOOLEAN true/false equal 1/0 (SQLite has no BOOLEAN type).
        date_string_equal: DATE/TIMESTAMP/TIME values equal their ISO-8601 text
            (SQLite stores dates as TEXT). Timestamps are compared as UTC wall-clock; naive
            timestamps are taken as UTC.
        trim_trailing_spaces: ignore trailing spaces in strings (MySQL PAD SPACE collations).
        nan_equal: a float NaN equals a NaN (default True: PostgreSQL, DuckDB and ClickHouse
            treat all NaNs as one value in GROUP BY, DISTINCT and ORDER BY; PostgreSQL docs 8.1.3
            "Floating-Point Types"). NaN never equals a number or NULL; False: NaN equals nothing.
        duplicates: ``bag`` (default): duplicate rows count; ``set``: duplicate rows are
            dropped from both result sets before comparing (BIRD's ``set(pred) == set(gold)``).
        distinct: ``keep``: run both queries as written; ``strip``: delete the SELECT DISTINCT
            keyword (every SELECT, subqueries included; never DISTINCT inside an aggregate)
            from both queries before they run; ``strip_all``: delete every DISTINCT keyword,
            inside aggregates too (``COUNT(DISTINCT x)`` -> ``COUNT(x)``), as test-suite does by
            default (``keep_distinct=False``); ``DISTINCT ON (...)`` is kept by both.
        midnight_timestamp, integer_string: the type-coincidence knobs, ``equal`` |
            ``flagged`` | ``inconclusive`` (module docstring, "Type coincidences"); default
            ``equal``.
        empty_equal: two empty results are equal whatever their column counts (test-suite).
        ties_at_limit: ``lenient``: under ``ORDER BY ... LIMIT k`` with ties at the cut, accept
            any predicted choice among the tied rows (needs the gold probe, see shape.py);
            ``strict``: the predicted rows at the cut must equal the gold's choice. Both flag
            ``ties_at_limit``.
        inconclusive_flags: flags (:data:`POLICY_FLAGS`) that turn a decided
            ``pass``/``fail`` into ``inconclusive``. Default: ``nondeterministic_gold`` (a
            gold whose result is not a function of the data has no single right answer, and its
            observed verdict could change from run to run) and ``nondeterministic_pred`` (a
            prediction whose verdict could change from run to run on the same data:
            ``verdict.pred_nondeterministic``); every other flag keeps the strict verdict.
        decimal_rounding_min_scale: a DECIMAL result of scale ``s`` at least this compared with
            a binary float (or a finer DECIMAL) is compared after rounding the other side to
            ``s`` digits, halves away from zero: the rounding an engine imposes on a quotient
            (MySQL ``div_precision_increment``, default 4: ``AVG`` 3.3333 for 3.3333333333333335;
            Snowflake scale 6), flagged ``decimal_scale``. Smaller scales (``ROUND(x, 2)``:
            3.33) get the plain tolerance. None: never (``normalize.decimal_rounding``).
    """

    name: str = "default"
    version: str = "cmp-5"
    abs_tol: float = 1e-5
    rel_tol: float = 1e-9
    order: str = "auto"
    ties: str = "multiset"
    columns: str = "match"
    extra_pred_columns: bool = True
    max_extra_pred_columns: int = 10
    string_number_equal: bool = False
    bool_as_int: bool = True
    date_string_equal: bool = True
    trim_trailing_spaces: bool = False
    nan_equal: bool = True
    ties_at_limit: str = "lenient"
    duplicates: str = "bag"
    distinct: str = "keep"
    empty_equal: bool = False
    midnight_timestamp: str = "equal"
    integer_string: str = "equal"
    inconclusive_flags: tuple[str, ...] = ("nondeterministic_gold", "nondeterministic_pred")
    decimal_rounding_min_scale: int | None = 4

    def __post_init__(self) -> None:
        for name, modes in (("order", ORDER_MODES), ("duplicates", DUPLICATE_MODES),
                            ("ties_at_limit", TIE_MODES), ("ties", TIED_ROW_MODES),
                            ("columns", COLUMN_MODES), ("distinct", DISTINCT_MODES),
                            *((k, COINCIDENCE_MODES) for k in COINCIDENCES)):
            if getattr(self, name) not in modes:
                raise ValueError(f"policy.{name} must be one of {modes}, got {getattr(self, name)!r}")
        if isinstance(self.max_extra_pred_columns, bool) or not isinstance(self.max_extra_pred_columns, int) \
                or self.max_extra_pred_columns < 0:
            raise ValueError(f"policy.max_extra_pred_columns must be a whole number >= 0, "
                             f"got {self.max_extra_pred_columns!r}")
        if not (self.abs_tol >= 0 and self.rel_tol >= 0):
            raise ValueError("policy tolerances must be >= 0")
        m = self.decimal_rounding_min_scale
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 0):
            raise ValueError(f"policy.decimal_rounding_min_scale must be a whole number >= 0 or null, got {m!r}")
        object.__setattr__(self, "inconclusive_flags", tuple(self.inconclusive_flags or ()))
        unknown = sorted(set(self.inconclusive_flags) - set(POLICY_FLAGS))
        if unknown:
            raise ValueError(f"policy.inconclusive_flags: unknown flag(s) {unknown}; known: {list(POLICY_FLAGS)}")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("policy.name must be a non-empty string")
        for f in dataclasses.fields(self):  # catch YAML strings like "yes" for booleans early
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"policy.{f.name} must be a boolean")

    def fingerprint(self) -> str:
        """16-hex-digit sha256 over every field but ``name`` (field names and values), stable
        across runs."""
        rules = {k: v for k, v in dataclasses.asdict(self).items() if k != "name"}
        blob = json.dumps(rules, sort_keys=True, default=repr)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def undecided_flags(self) -> frozenset[str]:
        """Flags that turn a ``pass``/``fail`` into ``inconclusive``: ``inconclusive_flags``
        plus each type coincidence whose knob is ``inconclusive``."""
        return frozenset(self.inconclusive_flags) | {k for k in COINCIDENCES if getattr(self, k) == "inconclusive"}

    def coincidence_relaxed(self) -> "ComparisonPolicy":
        """This policy with every type coincidence ``equal`` (to ask whether one decided)."""
        return dataclasses.replace(self, **{k: "equal" for k in COINCIDENCES})

    def to_dict(self) -> dict[str, Any]:
        """Plain mapping of all fields (what ``conf/policy/*.yaml`` holds)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "ComparisonPolicy":
        """Build from a dict or an OmegaConf ``DictConfig`` (the Hydra ``policy`` group).

        Missing keys take the defaults; unknown keys raise ``ValueError`` (a typo in an
        override must not silently score under the default policy). Numbers given as ints
        (``abs_tol: 0``) are coerced to float.
        """
        if cfg is None:
            return cls()
        try:  # OmegaConf node -> plain dict, interpolations resolved
            from omegaconf import DictConfig, OmegaConf

            if isinstance(cfg, DictConfig):
                cfg = OmegaConf.to_container(cfg, resolve=True)
        except ImportError:  # pragma: no cover - hydra is a dependency
            pass
        data = {k: v for k, v in dict(cfg).items() if k != "defaults"}  # Hydra's composition list
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown comparison policy field(s): {unknown}")
        if "inconclusive_flags" in data:
            data["inconclusive_flags"] = tuple(data["inconclusive_flags"] or ())
        for k in ("abs_tol", "rel_tol"):
            if k in data and isinstance(data[k], (int, str)) and not isinstance(data[k], bool):
                data[k] = float(data[k])
        return cls(**data)


def load_policies(cfg: Mapping[str, Any], conf_dir) -> list[ComparisonPolicy]:
    """The policies a run scores under, in order (README "Several policies in one run").

    ``cfg["policies"]`` null or empty: the one composed ``policy`` group. Otherwise each entry
    is the name of a ``conf/policy/<name>.yaml`` (its ``defaults`` list followed within the
    group, as Hydra composes it), or a mapping of policy fields with a ``name`` (over the
    dataclass defaults); the entry naming the composed group (``cfg.policy.name``) is that group,
    with its command-line overrides (``policy.abs_tol=1e-4``).

    Errors: ``ValueError`` naming the entry: an unknown file, an unknown field, a bad value,
    two entries with one name, or two names for the same rules (their scores would share keys).
    """
    from pathlib import Path

    composed = dict(cfg.get("policy") or {})
    entries = cfg.get("policies") or []
    if isinstance(entries, str):
        entries = [entries]
    if not entries:
        return [ComparisonPolicy.from_config(composed)]
    conf_dir = Path(conf_dir)

    def from_file(name: str, seen: tuple = ()) -> dict:
        path = conf_dir / f"{name}.yaml"
        if not path.is_file() or name in seen:
            known = sorted(p.stem for p in conf_dir.glob("*.yaml"))
            raise ValueError(f"policies: no policy {name!r} in {conf_dir} (known: {known})")
        from omegaconf import OmegaConf

        own = OmegaConf.to_container(OmegaConf.load(path), resolve=True) or {}
        merged: dict = {}
        for d in (own.get("defaults") or ["_self_"]):
            merged.update({k: v for k, v in own.items() if k != "defaults"} if d == "_self_"
                          else from_file(str(d), seen + (name,)))
        return merged

    out: list[ComparisonPolicy] = []
    for entry in entries:
        try:
            if isinstance(entry, str):
                data = composed if entry == composed.get("name", "default") and composed else from_file(entry)
                data = {**data, "name": entry}
            elif isinstance(entry, Mapping) and entry.get("name"):
                data = dict(entry)
            else:
                raise ValueError("an entry is a policy name or a mapping with a `name`")
            out.append(ComparisonPolicy.from_config(data))
        except ValueError as exc:
            raise ValueError(f"policies entry {entry!r}: {str(exc).splitlines()[0]}") from None
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ValueError(f"policies: a name is listed twice ({names})")
    fps: dict[str, str] = {}
    for p in out:
        if p.fingerprint() in fps:
            raise ValueError(f"policies {fps[p.fingerprint()]!r} and {p.name!r} are the same rules: list one")
        fps[p.fingerprint()] = p.name
    return out
