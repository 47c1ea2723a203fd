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
bytes      (large_)binary, fixed_size_binary                                    Arrow binary
mixed      union (SQLite's dynamically typed columns), anything else            Python list
=========  ===================================================================  ============

ISO text is canonical: ``YYYY-MM-DD``, ``YYYY-MM-DD HH:MM:SS[.f]``, ``HH:MM:SS[.f]`` with the
``T`` separator replaced by a space and trailing fractional zeros dropped.

:func:`pair_codes` turns a (gold column, predicted column) pair into integer codes such that
equal canonical values get equal codes (NULL is always code -1: one sentinel, independent of
library versions), plus float64 arrays for the values compared under tolerance. Which kinds are
comparable is data (:data:`_PAIR_MODES` and the policy), not branches scattered around.
"""
from __future__ import annotations

import datetime as dt
import decimal
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .policy import ComparisonPolicy

NULL_CODE = -1
_INT64_MAX = 2**63 - 1

# ISO-8601 text canonicalisation, applied to temporal values and (for str-vs-temporal pairs)
# to the string side.
_ISO_RULES = (
    (r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2})", r"\1 \2"),
    (r"^((?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2})\.0*$", r"\1"),
    (r"^((?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d*?)0+$", r"\1"),
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
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_null(t):
        return Canon("null", None, null, arr)
    if pa.types.is_boolean(t):
        v = pc.cast(arr, pa.int64()).fill_null(0).to_numpy()
        return Canon("int" if policy.bool_as_int else "bool", v, null, arr)
    if pa.types.is_integer(t):
        if t == pa.uint64() and len(arr) and (pc.max(arr).as_py() or 0) > _INT64_MAX:
            return Canon("int", np.array([v or 0 for v in arr.to_pylist()], dtype=object), null, arr)
        return Canon("int", pc.cast(arr, pa.int64()).fill_null(0).to_numpy(), null, arr)
    if pa.types.is_floating(t):
        return Canon("float", pc.cast(arr, pa.float64()).fill_null(math.nan).to_numpy(), null, arr)
    if pa.types.is_decimal(t):
        if t.scale <= 0:  # integral by type: exact; beyond int64 keep Python ints (no overflow)
            if t.precision - t.scale <= 18:
                return Canon("int", pc.cast(arr, pa.int64()).fill_null(0).to_numpy(), null, arr)
            ints = [int(v) if v is not None else 0 for v in arr.to_pylist()]
            if all(-_INT64_MAX <= v <= _INT64_MAX for v in ints):
                return Canon("int", np.array(ints, dtype=np.int64), null, arr)
            return Canon("int", np.array(ints, dtype=object), null, arr)
        f = pc.cast(arr, pa.float64(), safe=False).fill_null(math.nan).to_numpy()
        return Canon("float", f, null, arr)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        s = pc.cast(arr, pa.large_string())
        if policy.trim_trailing_spaces:
            s = pc.utf8_rtrim(s, characters=" ")
        return Canon("str", s, null, arr)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return Canon("bytes", pc.cast(arr, pa.large_binary()), null, arr)
    if pa.types.is_timestamp(t) and t.tz is not None:  # aware -> UTC wall clock
        arr_naive = pc.cast(arr, pa.timestamp(t.unit))
        return Canon("temporal", _iso(pc.cast(arr_naive, pa.large_string())), null, arr)
    if pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t):
        return Canon("temporal", _iso(pc.cast(arr, pa.large_string())), null, arr)
    return Canon("mixed", arr.to_pylist(), null, arr)


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
        return int(v) if v == v.to_integral_value() and v.is_finite() else float(v)
    if isinstance(v, str):
        s = v.rstrip(" ") if policy.trim_trailing_spaces else v
        if policy.string_number_equal:
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
    if policy.string_number_equal and "str" in kinds and kinds & {"int", "float"}:
        return "python"
    return "disjoint"


def _null_fill(codes: np.ndarray, null: np.ndarray) -> np.ndarray:
    codes = codes.astype(np.int64, copy=True)
    codes[null] = NULL_CODE
    return codes


def pair_codes(g: Canon, p: Canon, policy: ComparisonPolicy) -> PairCodes:
    """Codes for comparing gold column ``g`` with predicted column ``p`` (see :class:`PairCodes`)."""
    n = len(g.null)
    mode = pair_mode(g.kind, p.kind, policy)
    if mode == "int" and g.values.dtype != object and p.values.dtype != object:
        _, inv = np.unique(np.concatenate([g.values, p.values]), return_inverse=True)
        return PairCodes(_null_fill(inv[:n], g.null), _null_fill(inv[n:], p.null), None, None, mode)
    if mode == "float":
        gf = g.values.astype(np.float64)
        pf = p.values.astype(np.float64)
        gf[g.null], pf[p.null] = math.nan, math.nan
        return PairCodes(_null_fill(np.zeros(n), g.null), _null_fill(np.zeros(len(pf)), p.null),
                         gf, pf, mode)
    if mode == "arrow":
        gv, pv = g.values, p.values
        if g.kind == "bool":
            gv, pv = pa.array(gv), pa.array(pv)
        elif g.kind != p.kind:  # str vs temporal: canonicalise the ISO text on the string side
            gv, pv = _iso(gv), _iso(pv)
        idx = pa.concat_arrays([gv, pv]).dictionary_encode().indices
        codes = idx.fill_null(NULL_CODE).to_numpy().astype(np.int64)
        return PairCodes(_null_fill(codes[:n], g.null), _null_fill(codes[n:], p.null), None, None, mode)
    if mode in ("python", "int"):  # per-value fallback (also big Python ints)
        table: dict[Any, int] = {}
        out = []
        for side in (g, p):
            vals = side.values if side.kind in ("mixed", "int") else side.raw.to_pylist()
            codes = np.empty(len(side.null), dtype=np.int64)
            floats = np.full(len(side.null), math.nan)
            for i, v in enumerate(vals):
                if side.null[i]:
                    codes[i] = NULL_CODE
                    continue
                c = py_canonical(v, policy) if side.kind != "int" else int(v)
                if mode == "python" and isinstance(c, (int, float)):
                    codes[i], floats[i] = 0, float(c)  # numbers: compared under tolerance
                else:
                    codes[i] = table.setdefault(c, len(table) + 1)
            out.append((codes, floats))
        tol = mode == "python"
        return PairCodes(out[0][0], out[1][0], out[0][1] if tol else None,
                         out[1][1] if tol else None, mode)
    # disjoint: non-NULL values never meet; NULL still equals NULL
    return PairCodes(_null_fill(np.zeros(n), g.null), _null_fill(np.ones(len(p.null)), p.null),
                     None, None, "disjoint")


def close(a: np.ndarray, b: np.ndarray, policy: ComparisonPolicy) -> np.ndarray:
    """Element-wise tolerance equality: ``|a-b| <= abs_tol + rel_tol*max(|a|,|b|)``.

    NaN (NULL / non-number placeholders) equals NaN; ``inf`` equals only ``inf``. Shapes
    broadcast like numpy.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        eq = (a == b) | (np.isnan(a) & np.isnan(b))
        tol = policy.abs_tol + policy.rel_tol * np.maximum(np.abs(a), np.abs(b))
        return eq | (np.abs(a - b) <= tol)
