"""Canonical values from Arrow columns, and per-column-pair comparison codes.

A result-set column becomes a :class:`Canon` of one *kind*:

=========  ===================================================================  ============
kind       source Arrow types                                                   values
=========  ===================================================================  ============
null       ``null`` (an all-NULL column)                                        -
int        int8..uint64, bool (``bool_as_int``), decimal with scale <= 0        int64 / object
float      float16/32/64, decimal with scale > 0 (no overflow: cast to float64)  float64
bool       bool when not ``bool_as_int``                                        int64 0/1
str        (large_)string, string_view; rtrimmed if ``trim_trailing_spaces``    Arrow strings
temporal   date, timestamp (tz-aware -> UTC wall clock), time -> ISO-8601 text   Arrow strings
           (special values: see below)
bytes      (large_)binary, fixed_size_binary                                    Arrow binary
mixed      union (SQLite's dynamically typed columns), anything else            Python list
=========  ===================================================================  ============

ISO text is canonical: ``YYYY-MM-DD``, ``YYYY-MM-DD HH:MM:SS[.f]``, ``HH:MM:SS[.f]`` with the
``T`` separator replaced by a space and trailing fractional zeros dropped.

**Special values** (evaluation notes section 8: engines return values Python's types cannot
hold). Every one becomes a canonical value without a conversion to Python objects:

* ``infinity`` / ``-infinity`` dates and timestamps: DuckDB stores them as the extreme integers
  of the Arrow type (``date32`` +-(2**31 - 1) days, ``timestamp`` +-(2**63 - 1) units; DuckDB docs,
  "Date Types" / "Timestamp Types", special values); they become the text ``infinity`` /
  ``-infinity``, as PostgreSQL prints them (its driver hands them over as that text,
  ``engines/postgres.py``).
* dates and timestamps outside Python's years 1..9999 (year 0, BC, 294247): ISO text computed
  from the integer epoch value (proleptic Gregorian, astronomical year numbering: year 0 is
  1 BC, ``-0001`` is 2 BC), so ``10000-01-01`` and ``0000-12-31`` are ordinary values.
* decimals beyond int64 (``Decimal(76)``, ``10**60``) stay exact Python ints; float ``inf``,
  ``-inf`` and ``NaN`` stay IEEE values: ``inf`` equals only the same-sign ``inf``
  (:func:`close`), ``NaN`` equals ``NaN`` only under ``policy.nan_equal`` (it is given an exact
  code of its own, never compared under tolerance: :func:`_nan_codes`).

:func:`python_values` is the one conversion of an Arrow column to Python values for diff samples
and per-value fallbacks; a value Python cannot hold becomes its canonical text there too.

:func:`pair_codes` turns a (gold column, predicted column) pair into integer codes such that
equal canonical values get equal codes (NULL is always code -1: one sentinel, independent of
library versions), plus float64 arrays for the values compared under tolerance. Which kinds are
comparable is data (:data:`_PAIR_MODES` and the policy), not branches scattered around.
"""
from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import decimal
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .policy import ComparisonPolicy

NULL_CODE = -1
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1
#: Units of a day per Arrow time unit.
_PER_DAY = {"s": 86_400, "ms": 86_400_000, "us": 86_400_000_000, "ns": 86_400_000_000_000}
_PER_S = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
#: Python's date range as days since 1970-01-01 (0001-01-01 .. 9999-12-31).
_PY_DAYS = (-719_162, 2_932_896)

# ISO-8601 text canonicalisation, applied to temporal values and (for str-vs-temporal pairs)
# to the string side.
_ISO_RULES = (  # years of any width and sign (year 0, BC, 10000+: module docstring)
    (r"^(-?\d{4,}-\d{2}-\d{2})T(\d{2}:\d{2})", r"\1 \2"),
    (r"^((?:-?\d{4,}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2})\.0*$", r"\1"),
    (r"^((?:-?\d{4,}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d*?)0+$", r"\1"),
)


@dataclass
class Canon:
    """One canonicalised result-set column.

    Attributes:
        kind: one of null/int/float/bool/str/temporal/bytes/mixed (module table).
        values: numpy array (int/float/bool), Arrow array (str/temporal/bytes), Python list of
            raw values (mixed) or None (null). NULL slots hold a filler (0 / NaN / null).
        null: numpy bool array, True where the value is SQL NULL.
        raw: the original Arrow array (used for Python-level fallbacks and diff samples).
    """

    kind: str
    values: Any
    null: np.ndarray
    raw: pa.Array


def _iso(arr: pa.Array) -> pa.Array:
    for pattern, repl in _ISO_RULES:
        arr = pc.replace_substring_regex(arr, pattern=pattern, replacement=repl)
    return arr


#: Canonical ISO text of a midnight timestamp, and the date it meets (``policy.midnight_timestamp``).
_MIDNIGHT = (r"^(-?\d{4,}-\d{2}-\d{2}) 00:00:00$", r"\1")
#: An integer-valued string (``policy.integer_string``): optional sign, decimal digits only.
INTEGER_TEXT = r"^[+-]?[0-9]+$"


def _midnight_meets(g: "Canon", p: "Canon", policy: ComparisonPolicy) -> bool:
    """A midnight timestamp of one side may meet a date of the other: the knob says ``equal``
    and exactly one side is a TIMESTAMP column (the other a DATE or text)."""
    return policy.midnight_timestamp == "equal" and \
        pa.types.is_timestamp(g.raw.type) != pa.types.is_timestamp(p.raw.type)


def _filled(arr: pa.Array, typ: pa.DataType, fill) -> np.ndarray:
    """``pc.cast(arr, typ).fill_null(fill).to_numpy()``, without the cast when ``arr`` has the
    type already nor the fill when it holds no NULL (the same array: cheaper on small results)."""
    if arr.type != typ:
        arr = pc.cast(arr, typ)
    if arr.null_count:
        arr = arr.fill_null(fill)
    return arr.to_numpy()


def canonical_column(col: pa.Array | pa.ChunkedArray, policy: ComparisonPolicy) -> Canon:
    """Canonicalise one Arrow column (vectorised except for ``mixed`` columns).

    Args:
        col: the column, any Arrow type; chunked arrays are combined.
        policy: supplies ``bool_as_int`` and ``trim_trailing_spaces``.
    Returns:
        a :class:`Canon`; never raises for exotic types (they become ``mixed``).
    """
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool) if arr.null_count \
        else np.zeros(len(arr), dtype=bool)
    if pa.types.is_null(t):
        return Canon("null", None, null, arr)
    if pa.types.is_boolean(t):
        v = _filled(arr, pa.int64(), 0)
        return Canon("int" if policy.bool_as_int else "bool", v, null, arr)
    if pa.types.is_integer(t):
        if t == pa.uint64() and len(arr) and (pc.max(arr).as_py() or 0) > _INT64_MAX:
            return Canon("int", np.array([v or 0 for v in arr.to_pylist()], dtype=object), null, arr)
        return Canon("int", _filled(arr, pa.int64(), 0), null, arr)
    if pa.types.is_floating(t):
        return Canon("float", _filled(arr, pa.float64(), math.nan), null, arr)
    if pa.types.is_decimal(t):
        if t.scale <= 0:  # integral by type: exact; beyond int64 keep Python ints (no overflow)
            if t.precision - t.scale <= 18:
                return Canon("int", _filled(arr, pa.int64(), 0), null, arr)
            ints = [int(v) if v is not None else 0 for v in arr.to_pylist()]
            if all(-_INT64_MAX <= v <= _INT64_MAX for v in ints):
                return Canon("int", np.array(ints, dtype=np.int64), null, arr)
            return Canon("int", np.array(ints, dtype=object), null, arr)
        f = pc.cast(arr, pa.float64(), safe=False).fill_null(math.nan).to_numpy()
        return Canon("float", f, null, arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        s = arr if t == pa.large_string() else pc.cast(arr, pa.large_string())
        if policy.trim_trailing_spaces:
            s = pc.utf8_rtrim(s, characters=" ")
        return Canon("str", s, null, arr)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return Canon("bytes", pc.cast(arr, pa.large_binary()), null, arr)
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        return Canon("temporal", temporal_text(arr), null, arr)
    return Canon("mixed", python_values(arr), null, arr)


#: The canonical columns of each table already canonicalised in the open :func:`canonical_scope`
#: (``(id(table), bool_as_int, trim_trailing_spaces) -> (table, [Canon])``; the table is held so
#: its id is not reused while the scope is open), None outside one.
_SCOPE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("canonical_scope", default=None)
#: Tables of more cells (rows x columns) are canonicalised afresh each time, never kept.
SCOPE_MAX_CELLS = 1_000_000


@contextlib.contextmanager
def canonical_scope():
    """Within the block, :func:`canonical_columns` of one table object under one policy's
    canonical-form settings is computed once: a scoring batch compares one gold result (the
    same Arrow table) with every model's prediction, and each failed comparison's re-checks
    (explanations, type coincidences, relaxed policies) canonicalise the same two tables again.
    Canonical forms are functions of the values and of ``bool_as_int`` / ``trim_trailing_spaces``
    only, and Arrow tables are immutable, so a verdict is the same with or without the scope."""
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def taken(c: Canon, idx: np.ndarray, policy: ComparisonPolicy) -> Canon:
    """``canonical_column(c.raw.take(idx), policy)`` (``c`` canonicalised under ``policy``) from ``c`` itself: canonical forms are computed
    value by value, so the canonical column of some rows is those rows of the canonical column
    (the kind comes from the Arrow type). Values kept as Python ints (``dtype=object``: beyond
    int64, a choice made on the whole column) are canonicalised afresh."""
    raw = c.raw.take(pa.array(idx, pa.int64()))
    if isinstance(c.values, np.ndarray):
        if c.values.dtype == object:
            return canonical_column(raw, policy)
        values = c.values[idx]
    elif c.values is None:
        values = None
    elif isinstance(c.values, list):
        values = [c.values[i] for i in idx]
    else:
        values = c.values.take(pa.array(idx, pa.int64()))
    return Canon(c.kind, values, c.null[idx], raw)


@contextlib.contextmanager
def seeded(table: pa.Table, policy: ComparisonPolicy, canons: list[Canon]):
    """Within the block, :func:`canonical_columns` of ``table`` under ``policy`` is ``canons``
    (computed by the caller, e.g. :func:`taken` rows of a table already canonicalised), when a
    :func:`canonical_scope` is open; the entry is dropped at the end of the block."""
    cache = _SCOPE.get()
    key = (id(table), policy.bool_as_int, policy.trim_trailing_spaces)
    if cache is None or table.num_rows * table.num_columns > SCOPE_MAX_CELLS or key in cache:
        yield
        return
    cache[key] = (table, canons)
    try:
        yield
    finally:
        cache.pop(key, None)


def open_scope():
    """A :func:`canonical_scope` when none is open, else the open one (kept: its cache serves
    the block too)."""
    return contextlib.nullcontext() if _SCOPE.get() is not None else canonical_scope()


def canonical_columns(table: pa.Table, policy: ComparisonPolicy) -> list[Canon]:
    """:func:`canonical_column` of each column of ``table``, kept for the open
    :func:`canonical_scope` (the list is shared: read it, never change it)."""
    cache = _SCOPE.get()
    if cache is None or table.num_rows * table.num_columns > SCOPE_MAX_CELLS:
        return [canonical_column(c, policy) for c in table.columns]
    key = (id(table), policy.bool_as_int, policy.trim_trailing_spaces)
    hit = cache.get(key)
    if hit is None or hit[0] is not table:
        hit = cache[key] = (table, [canonical_column(c, policy) for c in table.columns])
    return hit[1]


def scope_cached(key: tuple, anchors: tuple, compute):
    """``compute()``, once per ``key`` in the open :func:`canonical_scope` (outside one: every
    time). ``key`` must name everything ``compute`` reads (objects by ``id``, held in ``anchors``
    so their ids are not reused while the scope is open); the value is shared: never change it.
    For gold-side facts that every prediction of a question, and every alternative result of a
    tied prediction cut, would otherwise recompute (result_set.py: tie groups)."""
    cache = _SCOPE.get()
    if cache is None:
        return compute()
    hit = cache.get(key)
    if hit is None or len(hit[0]) != len(anchors) or any(a is not b for a, b in zip(hit[0], anchors)):
        hit = cache[key] = (anchors, compute())
    return hit[1]


def _civil(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01, proleptic Gregorian, any magnitude
    (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms", ``civil_from_days``)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (m <= 2), m, d


def _epoch_text(value: int, per_day: int, per_s: int, date_only: bool) -> str:
    """ISO text of an epoch value in units (``per_day`` units a day) Python cannot hold."""
    days, rest = divmod(value, per_day)
    y, m, d = _civil(days)
    text = (f"{y:04d}" if y >= 0 else f"-{-y:04d}") + f"-{m:02d}-{d:02d}"
    if date_only:
        return text
    secs, frac = divmod(rest, per_s)
    text += f" {secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    if per_s > 1:
        text += "." + f"{frac:0{len(str(per_s)) - 1}d}"
    return _iso_text(text)


def _special_mask(arr: pa.Array):
    """``(odd, ints, text_of)`` of a date/timestamp column: ``odd`` (boolean array) marks the
    engines' infinity sentinels and values outside Python's years 1..9999, found on the integer
    epoch values ``ints``; ``text_of(v)`` is the canonical text of one such integer."""
    t = arr.type
    if pa.types.is_date32(t):
        ints, per_day, per_s, date_only, sentinel = arr.view(pa.int32()), 1, 1, True, _INT32_MAX
    elif pa.types.is_date64(t):
        ints, per_day, per_s, date_only, sentinel = arr.view(pa.int64()), 86_400_000, 1, True, _INT64_MAX
    else:
        ints, per_day, per_s = arr.view(pa.int64()), _PER_DAY[t.unit], _PER_S[t.unit]
        date_only, sentinel = False, _INT64_MAX
    bits = ints.type.bit_width - 1  # Python's range in this unit, clipped to the integer type
    lo = max(_PY_DAYS[0] * per_day, -(2**bits))
    hi = min((_PY_DAYS[1] + 1) * per_day - 1, 2**bits - 1)
    odd = pc.fill_null(pc.or_(pc.or_(pc.less(ints, pa.scalar(lo, ints.type)),
                                     pc.greater(ints, pa.scalar(hi, ints.type))),
                              pc.equal(pc.abs(ints), pa.scalar(sentinel, ints.type))), False)

    def text_of(v: int) -> str:
        return "infinity" if v == sentinel else "-infinity" if v == -sentinel \
            else _epoch_text(v, per_day, per_s, date_only)
    return odd, ints, text_of


def temporal_text(arr: pa.Array) -> pa.Array:
    """Canonical ISO text (large_string) of a date/timestamp/time column (module docstring).

    Vectorised: Arrow's cast for values in Python's range; the engines' infinity sentinels and
    values outside years 1..9999 (found on the integer epoch values, never via Python date
    objects) get their text from :func:`_epoch_text`. tz-aware timestamps give the UTC wall
    clock. Never raises for an in-type value.
    """
    t = arr.type
    if pa.types.is_time(t):
        return _iso(pc.cast(arr, pa.large_string()))
    if pa.types.is_timestamp(t) and t.tz is not None:  # aware -> UTC wall clock (values are UTC)
        arr = arr.view(pa.timestamp(t.unit))
    odd, ints, text_of = _special_mask(arr)
    if not pc.any(odd).as_py():
        return _iso(pc.cast(arr, pa.large_string()))
    text = pc.cast(pc.if_else(odd, pa.scalar(None, arr.type), arr), pa.large_string())
    # ints only: Python holds every one of them
    fill = pa.array([text_of(v) for v in pc.filter(ints, odd).to_pylist()], pa.large_string())
    idx = pc.subtract(pc.cumulative_sum(pc.cast(odd, pa.int64())), 1)
    spread = pc.take(fill, pc.if_else(odd, idx, pa.scalar(None, pa.int64())))
    return _iso(pc.coalesce(spread, text))


#: Errors of Arrow's conversion to Python objects for values Python cannot hold.
_PY_ERRORS = (OverflowError, ValueError, pa.ArrowException)


def python_values(col: pa.Array | pa.ChunkedArray) -> list:
    """``col.to_pylist()``, except that a value Python's types cannot hold or that is an
    engine's special value (an infinity or year-10000 date, DuckDB's infinity timestamp in
    nanoseconds) becomes its canonical text (:func:`temporal_text`) instead of raising or of a
    wrong date; a value of another type Python cannot hold becomes Arrow's text of it. The one
    conversion to Python values of result sets (diff samples, distinct rows, per-value
    fallbacks)."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        odd = _special_mask(arr)[0]
        if pc.any(odd).as_py():
            text = temporal_text(arr).to_pylist()
            return [text[i] if bad else arr[i].as_py() for i, bad in enumerate(odd.to_pylist())]
    try:
        return arr.to_pylist()
    except _PY_ERRORS:
        pass
    out = []
    for i in range(len(arr)):
        try:
            out.append(arr[i].as_py())
        except _PY_ERRORS:
            try:
                out.append(pc.cast(arr.slice(i, 1), pa.large_string())[0].as_py())
            except pa.ArrowException:
                out.append(f"<{t}>")
    return out


def _iso_text(s: str) -> str:
    import re

    for pattern, repl in _ISO_RULES:
        s = re.sub(pattern, repl, s)
    return s


def py_canonical(v: Any, policy: ComparisonPolicy) -> Any:
    """Canonical Python value for the per-value fallback (mixed columns).

    Returns None for NULL, an ``int`` or ``float`` for numbers, else a tagged tuple
    (``("s", text)``, ``("t", iso)``, ``("b", bytes)``, ``("o", repr)``). Temporal values become
    ``("s", iso)`` when ``date_string_equal`` so they meet ISO strings; strings that parse as
    numbers become numbers when ``string_number_equal``.
    """
    if v is None:
        return None
    if isinstance(v, bool):
        return int(v) if policy.bool_as_int else ("bool", v)
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, decimal.Decimal):
        if v.is_finite() and v == v.to_integral_value():
            return int(v)
        return math.nan if v.is_nan() else float(v)  # float() refuses a signalling NaN
    if isinstance(v, str):
        s = v.rstrip(" ") if policy.trim_trailing_spaces else v
        if re.fullmatch(INTEGER_TEXT, s):  # integer-valued: policy.integer_string alone decides
            if policy.integer_string == "equal":
                return int(s)
        elif policy.string_number_equal:
            try:
                d = decimal.Decimal(s.strip())
                if d.is_finite():
                    return py_canonical(d, policy)
            except decimal.InvalidOperation:
                pass
        return ("s", _iso_text(s)) if policy.date_string_equal else ("s", s)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        iso = _iso_text(v.isoformat(sep=" ") if isinstance(v, dt.datetime) else v.isoformat())
        return ("s" if policy.date_string_equal else "t", iso)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return ("b", bytes(v))
    return ("o", repr(v))


@dataclass
class PairCodes:
    """Comparison codes of one (gold column, predicted column) pair.

    Attributes:
        gold, pred: int64 codes (length = each side's row count); equal codes = equal exact
            values; ``NULL_CODE`` for NULL.
        gold_f, pred_f: float64 arrays compared under tolerance (NaN at NULL / non-numbers),
            or None when the pair is compared exactly.
        mode: how the pair was compared (``int``, ``float``, ``arrow``, ``python``, ``disjoint``);
            ``disjoint`` means the kinds are incomparable under the policy (reason ``types``).
    """

    gold: np.ndarray
    pred: np.ndarray
    gold_f: np.ndarray | None
    pred_f: np.ndarray | None
    mode: str


def _as_float(c: Any) -> float | None:
    """``c`` as a float for the tolerance comparison; None for a non-number and for an integer
    beyond the float range (compared exactly instead: ``10**400`` is no ``inf``)."""
    if not isinstance(c, (int, float)):
        return None
    try:
        return float(c)
    except OverflowError:
        return None


def pair_mode(a: str, b: str, policy: ComparisonPolicy) -> str:
    """How kinds ``a`` (gold) and ``b`` (pred) are compared under ``policy``."""
    kinds = {a, b}
    if kinds == {"int"}:
        return "int"
    if kinds <= {"int", "float"}:
        return "float"
    if a == b and a in ("str", "temporal", "bytes", "bool"):
        return "arrow"
    if kinds == {"str", "temporal"} and policy.date_string_equal:
        return "arrow"
    if "mixed" in kinds:
        return "python"
    if (policy.string_number_equal or policy.integer_string == "equal") and "str" in kinds \
            and kinds & {"int", "float"}:
        return "python"
    return "disjoint"


def _null_fill(codes: np.ndarray, null: np.ndarray) -> np.ndarray:
    codes = codes.astype(np.int64, copy=True)
    codes[null] = NULL_CODE
    return codes


def _scale(c: Canon) -> int | None:
    """The DECIMAL scale of a float-kind column (None: a binary float, or not a decimal)."""
    t = c.raw.type
    return t.scale if pa.types.is_decimal(t) else None


def decimal_rounding(g: Canon, p: Canon, policy: ComparisonPolicy) -> tuple[str, int] | None:
    """``(side, scale)`` when a float pair is compared at a DECIMAL scale an engine imposed:
    one side is a DECIMAL of scale ``s >= policy.decimal_rounding_min_scale`` and the other
    (``side``, ``"gold"`` or ``"pred"``) is a binary float or a finer DECIMAL, whose values are
    then rounded half away from zero to ``s`` digits before the tolerance applies (MySQL's
    ``div_precision_increment = 4`` makes ``AVG`` 3.3333 where SQLite computes
    3.3333333333333335: the same answer at the engine's declared scale). A scale below the
    minimum (``ROUND(x, 2)``, ``DECIMAL(10,2)``: 3.33) carries no such rounding and gets the
    plain tolerance. None: no rounding (other kinds, equal scales, rounding disabled)."""
    floor_ = policy.decimal_rounding_min_scale
    if floor_ is None or g.kind != "float" or p.kind != "float":
        return None
    sg, sp = _scale(g), _scale(p)
    coarse = [(sc, side) for sc, side in ((sg, "pred"), (sp, "gold")) if sc is not None and sc >= floor_]
    if not coarse:
        return None
    s, finer = min(coarse)
    other = sp if finer == "pred" else sg
    if other is not None and other <= s:
        return None
    return finer, s


def round_half_away(x: np.ndarray, scale: int) -> np.ndarray:
    """``x`` rounded to ``scale`` decimal digits, halves away from zero (MySQL's rounding of
    exact values); a nudge of 1e-12 relative lets a binary float just below a decimal half
    (0.12345 is 0.123449999...) round as its decimal text does. NaN and inf stay."""
    f = 10.0 ** scale
    with np.errstate(invalid="ignore", over="ignore"):
        y = np.abs(x) * f
        r = np.floor(y + 0.5 + y * 1e-12) / f
        out = np.where(np.isfinite(y), np.copysign(r, x), x)
    return out


def rounding_mattered(gold_col: pa.Array | pa.ChunkedArray, pred_col: pa.Array | pa.ChunkedArray,
                      policy: ComparisonPolicy) -> bool:
    """True when the pair is compared at an engine's DECIMAL scale (:func:`decimal_rounding`)
    and the rounding moved some value by more than ``abs_tol``: a match that then carries the
    flag ``decimal_scale`` (an engine-imposed scale decided it; evaluation notes 5b)."""
    if not any(pa.types.is_decimal(c.type) for c in (gold_col, pred_col)):
        return False
    g, p = canonical_column(gold_col, policy), canonical_column(pred_col, policy)
    rounding = decimal_rounding(g, p, policy)
    if rounding is None:
        return False
    side = g if rounding[0] == "gold" else p
    x = side.values.astype(np.float64)[~side.null]
    with np.errstate(invalid="ignore"):
        return bool((np.abs(x - round_half_away(x, rounding[1])) > policy.abs_tol).any())


def _int_exact_codes(g: Canon, p: Canon, policy: ComparisonPolicy) -> PairCodes:
    """Codes of an integer gold column against a float predicted column: a predicted value
    equals a gold integer only when it lies within ``policy.abs_tol`` of it (so it rounds to it),
    never by the relative tolerance: gold 1000000001 is not 1000000000.0 nor 1000000002.0
    (``rel_tol`` absorbs float accumulation noise, which an integer gold does not have)."""
    n = len(g.null)
    pf = p.values.astype(np.float64)
    with np.errstate(invalid="ignore"):
        r = np.rint(pf)
        ok = np.isfinite(pf) & (np.abs(pf - r) <= policy.abs_tol) & ~p.null
    if g.values.dtype != object and not (ok & (np.abs(r) >= 2.0**63)).any():
        _, inv = np.unique(np.concatenate([g.values, np.where(ok, r, 0).astype(np.int64)]), return_inverse=True)
        inv = inv.ravel().astype(np.int64)
        pc_ = inv[n:].copy()
        pc_[~ok] = int(inv.max(initial=0)) + 1  # a code no gold value holds
        return PairCodes(_null_fill(inv[:n], g.null), _null_fill(pc_, p.null), None, None, "int")
    table: dict[int, int] = {}
    gc = np.array([NULL_CODE if g.null[i] else table.setdefault(int(v), len(table))
                   for i, v in enumerate(g.values)], dtype=np.int64)
    miss = len(table) + 1  # one code no gold value holds
    pc_ = np.array([NULL_CODE if p.null[i] else (table.get(int(r[i]), miss) if ok[i] else miss)
                    for i in range(len(pf))], dtype=np.int64)
    return PairCodes(gc, pc_, None, None, "int")


def pair_codes(g: Canon, p: Canon, policy: ComparisonPolicy) -> PairCodes:
    """Codes for comparing gold column ``g`` with predicted column ``p`` (see :class:`PairCodes`).

    Numbers: integer pairs exactly; an integer gold against a float prediction exactly up to
    ``abs_tol`` (:func:`_int_exact_codes`); other number pairs under the tolerance, after the
    DECIMAL-scale rounding of :func:`decimal_rounding`."""
    n = len(g.null)
    mode = pair_mode(g.kind, p.kind, policy)
    if mode == "int" and g.values.dtype != object and p.values.dtype != object:
        _, inv = np.unique(np.concatenate([g.values, p.values]), return_inverse=True)
        return PairCodes(_null_fill(inv[:n], g.null), _null_fill(inv[n:], p.null), None, None, mode)
    if mode == "float" and g.kind == "int":
        return _int_exact_codes(g, p, policy)
    if mode == "float":
        gf = g.values.astype(np.float64)
        pf = p.values.astype(np.float64)
        rounding = decimal_rounding(g, p, policy)
        if rounding is not None:
            side, scale = rounding
            if side == "gold":
                gf = round_half_away(gf, scale)
            else:
                pf = round_half_away(pf, scale)
        gf[g.null], pf[p.null] = math.nan, math.nan
        return _nan_codes(_null_fill(np.zeros(n), g.null), _null_fill(np.zeros(len(pf)), p.null),
                          gf, pf, mode, g.null, p.null, policy)
    if mode == "arrow":
        gv, pv = g.values, p.values
        if g.kind == "bool":
            gv, pv = pa.array(gv), pa.array(pv)
        elif g.kind != p.kind:  # str vs temporal: canonicalise the ISO text on the string side
            gv, pv = _iso(gv), _iso(pv)
        if g.kind != "bool" and _midnight_meets(g, p, policy):  # a midnight timestamp is its date
            gv, pv = (pc.replace_substring_regex(v, pattern=_MIDNIGHT[0], replacement=_MIDNIGHT[1])
                      for v in (gv, pv))
        idx = pa.concat_arrays([gv, pv]).dictionary_encode().indices
        codes = (idx.fill_null(NULL_CODE) if idx.null_count else idx).to_numpy().astype(np.int64)
        return PairCodes(_null_fill(codes[:n], g.null), _null_fill(codes[n:], p.null), None, None, mode)
    if mode == "python" and not policy.string_number_equal and {g.kind, p.kind} in ({"str", "int"}, {"str", "float"}):
        codes = _integer_text_codes(g, p, policy)
        if codes is not None:
            return codes
    if mode in ("python", "int"):  # per-value fallback (also big Python ints)
        table: dict[Any, int] = {}
        out = []
        tag = "s" if policy.date_string_equal else "t"
        for side in (g, p):
            if side.kind in ("mixed", "int"):
                vals = side.values
            elif side.kind == "temporal":  # canonical text already (special values included)
                vals = [None if v is None else (tag, v) for v in side.values.to_pylist()]
            else:
                vals = python_values(side.raw)
            codes = np.empty(len(side.null), dtype=np.int64)
            floats = np.full(len(side.null), math.nan)
            for i, v in enumerate(vals):
                if side.null[i]:
                    codes[i] = NULL_CODE
                    continue
                c = int(v) if side.kind == "int" else v if side.kind == "temporal" else py_canonical(v, policy)
                f = _as_float(c) if mode == "python" else None
                if f is not None:
                    codes[i], floats[i] = 0, f  # numbers: compared under tolerance
                else:
                    codes[i] = table.setdefault(c, len(table) + 1)
            out.append((codes, floats))
        if mode == "python":
            return _nan_codes(out[0][0], out[1][0], out[0][1], out[1][1], mode, g.null, p.null, policy)
        return PairCodes(out[0][0], out[1][0], None, None, mode)
    # disjoint: non-NULL values never meet; NULL still equals NULL
    return PairCodes(_null_fill(np.zeros(n), g.null), _null_fill(np.ones(len(p.null)), p.null),
                     None, None, "disjoint")


def _integer_text_codes(g: Canon, p: Canon, policy: ComparisonPolicy) -> PairCodes | None:
    """A string column vs a number column under ``integer_string = equal``, vectorised: the
    strings holding an integer (:data:`INTEGER_TEXT`) become that number and compare with the
    numbers under the tolerance (as :func:`py_canonical` decides value by value); every other
    string keeps an exact code of its own (>= 1), which no number has (0). None when a value
    is beyond float's exact integers (the per-value path compares it exactly)."""
    out = []
    for side in (g, p):
        n = len(side.null)
        if side.kind != "str":
            if side.values.dtype == object:
                return None
            out.append((_null_fill(np.zeros(n), side.null), np.where(side.null, math.nan,
                                                                       side.values.astype(np.float64))))
            continue
        text = side.values
        is_int = np.asarray(pc.fill_null(pc.match_substring_regex(text, INTEGER_TEXT), False)
                            .to_numpy(zero_copy_only=False), dtype=bool)
        floats = np.full(n, math.nan)
        if is_int.any():
            ints = pc.filter(text, pa.array(is_int)).to_pylist()
            if max(len(v.lstrip("+-").lstrip("0")) for v in ints) > 15:
                return None
            floats[is_int] = [float(int(v)) for v in ints]
        idx = pc.dictionary_encode(text).indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) + 1
        out.append((_null_fill(np.where(is_int, 0, idx), side.null), floats))
    return _nan_codes(out[0][0], out[1][0], out[0][1], out[1][1], "python", g.null, p.null, policy)


def _nan_codes(gc: np.ndarray, pc_: np.ndarray, gf: np.ndarray, pf: np.ndarray, mode: str,
               gnull: np.ndarray, pnull: np.ndarray, policy: ComparisonPolicy) -> PairCodes:
    """Float NaN values (not NULL) leave the tolerance comparison: they get an exact code of
    their own, one above every code in use (the predicted side one more unless
    ``policy.nan_equal``), and a float placeholder 0.0, so a NaN never meets a number or another
    value and meets a NaN only by policy."""
    base = max(int(gc.max(initial=0)), int(pc_.max(initial=0))) + 1
    for codes, floats, null, code in ((gc, gf, gnull, base),
                                      (pc_, pf, pnull, base if policy.nan_equal else base + 1)):
        nan = np.isnan(floats) & ~null & (codes == 0)  # numbers only (code 0): not text
        if nan.any():
            codes[nan], floats[nan] = code, 0.0
    return PairCodes(gc, pc_, gf, pf, mode)


def close(a: np.ndarray, b: np.ndarray, policy: ComparisonPolicy) -> np.ndarray:
    """Element-wise tolerance equality: ``a == b``, or both finite and
    ``|a-b| <= abs_tol + rel_tol*max(|a|,|b|)``.

    NaN here is only the NULL placeholder (float NaN values carry their own exact code,
    :func:`_nan_codes`) and equals NaN; ``inf`` equals only the same-sign ``inf``: the tolerance
    applies to finite pairs only, since ``|inf - x| <= rel_tol * inf`` holds for every ``x``
    (a prediction ``SELECT 1e999`` must never pass a numeric gold). Shapes broadcast like numpy.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        eq = (a == b) | (np.isnan(a) & np.isnan(b))
        tol = policy.abs_tol + policy.rel_tol * np.maximum(np.abs(a), np.abs(b))
        return eq | (np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= tol))
