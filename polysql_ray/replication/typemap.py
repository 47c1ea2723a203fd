"""The explicit type map used by replication, as data (README "Replication").

Two steps:

1. **Source -> logical type.** For SQLite the declared type only gives an *affinity*
   (SQLite docs, "Datatypes In SQLite", section 3.1: the rules below, applied in order), and
   the values really stored decide the rest: SQLite columns are dynamically typed, so a
   column keeps its affinity's logical type only when every stored value fits it; otherwise
   it is *widened* along ``BIGINT < DOUBLE < VARCHAR`` (BLOB values force BLOB) and the
   reason is recorded in the manifest. Nothing is dropped or silently coerced.
2. **Logical -> target type**, per target engine (:data:`TARGET_TYPES`).

SQLite declared type -> affinity -> logical type (when the values fit):

| declared type contains          | affinity | logical type (default, all-NULL column) | values seen -> logical |
|---------------------------------|----------|------------------------------------------|------------------------|
| ``INT``                         | INTEGER  | BIGINT                                   | int -> BIGINT; +real -> DOUBLE; +text -> VARCHAR |
| ``CHAR``, ``CLOB``, ``TEXT``    | TEXT     | VARCHAR                                  | text -> VARCHAR (SQLite converts numbers to text on insert) |
| ``BLOB`` or empty               | BLOB     | BLOB                                     | by values: int -> BIGINT, real -> DOUBLE, text -> VARCHAR, blob -> BLOB |
| ``REAL``, ``FLOA``, ``DOUB``    | REAL     | DOUBLE (8 bytes, never REAL/FLOAT4)      | real -> DOUBLE; +text -> VARCHAR |
| anything else (``NUMERIC``, ``DECIMAL(19,4)``, ``BOOL``, ``DATETIME``, ``DATE``) | NUMERIC | DOUBLE (``DATE``/``TIME`` in the name: VARCHAR) | by values: int -> BIGINT, +real -> DOUBLE, text -> VARCHAR |

Decisions and why:

* ``DECIMAL(p,s)``/``NUMERIC`` declared in SQLite hold 8-byte floats (Spider's
  ``real_estate_properties`` prices: ``real`` and ``integer`` values) -> DOUBLE, exactly the
  values SQLite computes with; a DECIMAL target would change arithmetic (AVG, division).
* Dates/times stay as the source holds them: SQLite stores them as TEXT, so VARCHAR.
* ``BOOL`` in SQLite holds integers 0/1 -> BIGINT (no BOOLEAN invented).
* A column mixing ``integer`` and ``real`` becomes DOUBLE only when every integer is exactly
  representable (|i| <= 2**53); otherwise VARCHAR.
* Widened VARCHAR columns render numbers as Python's shortest round-trip text (``repr``:
  ``3``, ``2.5``, ``0.30000000000000004``) which is exact (SQLite's own ``CAST(x AS TEXT)``
  uses 15 significant digits, which is not). BLOB mixed with anything -> BLOB, other values
  as the UTF-8 bytes of that same text.

Logical type -> target type (:data:`TARGET_TYPES`):

| logical   | duckdb    | postgres           | mysql        | clickhouse |
|-----------|-----------|--------------------|--------------|------------|
| BIGINT    | BIGINT    | BIGINT             | BIGINT       | Int64      |
| DOUBLE    | DOUBLE    | DOUBLE PRECISION   | DOUBLE       | Float64    |
| VARCHAR   | VARCHAR   | TEXT               | LONGTEXT     | String     |
| BLOB      | BLOB      | BYTEA              | LONGBLOB     | String     |
| DECIMAL   | DECIMAL   | NUMERIC            | DECIMAL      | Decimal    |
| BOOLEAN   | BOOLEAN   | BOOLEAN            | BOOLEAN      | Bool       |
| DATE      | DATE      | DATE               | DATE         | Date32     |
| TIMESTAMP | TIMESTAMP | TIMESTAMP          | DATETIME(6)  | DateTime64(6) |

The postgres/mysql/clickhouse rows are the starting point for those writers; their owners
may refine them (e.g. MySQL key columns need VARCHAR(n)), bumping :data:`TYPE_MAP_VERSION`.

**Declared types (``replication.types: declared``, the default).** The table above is the
*storage* map (``replication.types: storage``): it keeps what SQLite stores and drops what the
declaration means. In ``declared`` mode the declared type is kept by meaning whenever *every*
stored value conforms to it, checked while copying (:data:`DECLARED_FAMILIES`, the SQLite
predicate of :data:`CONFORMS` per family); otherwise that one column falls back to its storage
type and the manifest records how many values did not conform, with examples.

| declared (first match)                    | logical            | every non-NULL value must be                         |
|-------------------------------------------|--------------------|------------------------------------------------------|
| ``TINYINT``, ``SMALLINT``, ``INT2``       | SMALLINT (2 bytes) | an integer in [-2**15, 2**15)                        |
| ``BIGINT``, ``INT8``, ``BIG INT``         | BIGINT             | an integer                                           |
| anything else with ``INT``                | INTEGER (4 bytes)  | an integer in [-2**31, 2**31) (else BIGINT, recorded)|
| ``BOOL``, ``BOOLEAN``                     | BOOLEAN            | the integer 0 or 1 (Spider's 'T'/'F' stay text)      |
| ``DECIMAL(p,s)``, ``NUMERIC(p,s)``        | DECIMAL(p,s)       | a number whose shortest decimal text fits (p,s)      |
| ``DATETIME``, ``TIMESTAMP``               | TIMESTAMP          | text ``YYYY-MM-DD HH:MM:SS`` (``datetime(v) IS v``)   |
| ``DATE``                                  | DATE               | text ``YYYY-MM-DD`` (``date(v) IS v``)                |
| ``[N][VAR]CHAR(n)``, ``CHARACTER(n)``...  | VARCHAR(n)         | text of at most n characters                         |
| ``REAL``, ``DOUBLE``, ``FLOAT``           | DOUBLE (8 bytes)   | a number (as in storage mode)                        |
| ``TEXT``, ``CLOB``, other ``CHAR``        | VARCHAR            | text                                                 |

Why: width and type change what the target computes (PostgreSQL ``SUM(integer)`` is
``bigint`` so ``SUM(x)/COUNT(*)`` divides as integers; ``SUM(bigint)`` is ``numeric``), and a
date column stored as text fails PostgreSQL-correct date SQL. ``CHAR(n)`` becomes
``VARCHAR(n)``, not a blank-padded ``CHAR(n)``: the source never padded its values and a padded
copy would return other strings. Conformance for dates is exact round-trip: the certificate
compares the source text with the copy's ``isoformat(" ")``, so a date that would print
differently is not carried as a date.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Mapping

import pyarrow as pa

from polysql_ray.engines.declaration import DeclaredTable

#: Bump on any change to this module's tables or rules: it invalidates every copy.
TYPE_MAP_VERSION = "2"

#: SQLite affinity rules, in the order SQLite applies them (substring of the upper-cased
#: declared type -> affinity). Empty declared type -> BLOB. No match -> NUMERIC.
SQLITE_AFFINITY_RULES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("INT",), "INTEGER"),
    (("CHAR", "CLOB", "TEXT"), "TEXT"),
    (("BLOB",), "BLOB"),
    (("REAL", "FLOA", "DOUB"), "REAL"),
)

#: Affinity -> logical type used when the column holds no value that says otherwise.
SQLITE_AFFINITY_DEFAULT: dict[str, str] = {
    "INTEGER": "BIGINT",
    "TEXT": "VARCHAR",
    "BLOB": "BLOB",
    "REAL": "DOUBLE",
    "NUMERIC": "DOUBLE",
}

#: NUMERIC-affinity declared types whose name says "date/time": all-NULL default VARCHAR.
SQLITE_TEXTUAL_NUMERIC_HINTS: tuple[str, ...] = ("DATE", "TIME", "YEAR")

#: SQLite storage class (``typeof``) -> the logical type that holds it exactly.
SQLITE_STORAGE_LOGICAL: dict[str, str] = {
    "integer": "BIGINT",
    "real": "DOUBLE",
    "text": "VARCHAR",
    "blob": "BLOB",
}

#: Widening lattice rank; the widest rank present wins. BLOB holds everything as bytes.
WIDENING_RANK: dict[str, int] = {"BIGINT": 0, "DOUBLE": 1, "VARCHAR": 2, "BLOB": 3}

#: Largest integer magnitude a DOUBLE holds exactly.
MAX_EXACT_INT_IN_DOUBLE = 2 ** 53

#: Logical type -> Arrow type of the batches between reader and writer.
ARROW_TYPES: dict[str, pa.DataType] = {
    "BIGINT": pa.int64(),
    "INTEGER": pa.int32(),
    "SMALLINT": pa.int16(),
    "DOUBLE": pa.float64(),
    "VARCHAR": pa.string(),
    "BLOB": pa.binary(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "TIMESTAMP": pa.timestamp("us"),
}

#: Logical type -> target type text, per target engine: each engine class declares its
#: ``type_map`` (``engines/<name>.py``); a read-through view of those declarations.
TARGET_TYPES: Mapping[str, dict[str, str]] = DeclaredTable(lambda cls: cls.type_map)

#: Target engine -> type text of a VARCHAR with a declared length (``{n}``: the length);
#: declared as ``varchar_with_length``.
VARCHAR_WITH_LENGTH: Mapping[str, str] = DeclaredTable(lambda cls: cls.varchar_with_length)

#: ``replication.types`` values.
TYPE_MODES = ("declared", "storage")

#: Declared-type families, first match wins (regex on the upper-cased declared type ->
#: family). Groups ``p``/``s``/``n`` carry DECIMAL precision/scale and text length.
DECLARED_FAMILIES: tuple[tuple[str, str], ...] = (
    (r"^\s*(TINYINT|SMALLINT|INT2)\b", "SMALLINT"),
    (r"^\s*(BIGINT|INT8|UNSIGNED BIG INT|BIG INT)\b", "BIGINT"),
    (r"INT", "INTEGER"),
    (r"^\s*(BOOL|BOOLEAN)\s*$", "BOOLEAN"),
    (r"^\s*(DECIMAL|NUMERIC|DEC)\s*\(\s*(?P<p>\d+)\s*(,\s*(?P<s>\d+)\s*)?\)\s*$", "DECIMAL"),
    (r"^\s*(DATETIME|TIMESTAMP)\b", "TIMESTAMP"),
    (r"^\s*DATE\s*$", "DATE"),
    (r"^\s*(N?VARCHAR|VARYING CHARACTER|CHARACTER VARYING|NATIVE CHARACTER|N?CHAR|CHARACTER)"
     r"\s*\(\s*(?P<n>\d+)\s*\)\s*$", "VARCHAR"),
    (r"REAL|FLOA|DOUB", "DOUBLE"),
    (r"CHAR|CLOB|TEXT", "VARCHAR"),
)

#: Family -> SQLite predicate (``{c}``: the quoted column) true for a *conforming* non-NULL
#: value. DECIMAL is checked in Python (:func:`decimal_fits`); ``{n}`` is the text length.
CONFORMS: dict[str, str] = {
    "SMALLINT": "typeof({c}) = 'integer' AND {c} BETWEEN -32768 AND 32767",
    "INTEGER": "typeof({c}) = 'integer' AND {c} BETWEEN -2147483648 AND 2147483647",
    "BIGINT": "typeof({c}) = 'integer'",
    "BOOLEAN": "typeof({c}) = 'integer' AND {c} IN (0, 1)",
    "DECIMAL": "typeof({c}) IN ('integer', 'real')",
    "TIMESTAMP": "typeof({c}) = 'text' AND datetime({c}) IS {c}",
    "DATE": "typeof({c}) = 'text' AND date({c}) IS {c}",
    "VARCHAR": "typeof({c}) = 'text'",
    "VARCHAR(n)": "typeof({c}) = 'text' AND length({c}) <= {n}",
    "DOUBLE": "typeof({c}) IN ('integer', 'real')",
}

#: When a family does not hold every value, the next narrower promise tried before falling
#: back to the storage type (an INTEGER column with a value past 2**31 is still an integer).
FAMILY_WIDER: dict[str, str] = {"SMALLINT": "INTEGER", "INTEGER": "BIGINT"}


@dataclass(frozen=True)
class DeclaredType:
    """A declared type read by meaning: ``family`` (logical type) and its parameters."""

    family: str
    precision: int | None = None
    scale: int | None = None
    length: int | None = None

    @property
    def check(self) -> str:
        """Key of :data:`CONFORMS` for this type."""
        return "VARCHAR(n)" if self.family == "VARCHAR" and self.length else self.family


def declared_family(declared_type: str) -> DeclaredType | None:
    """The :class:`DeclaredType` a declared type text promises (None: no promise, e.g. an
    empty or ``NUMERIC`` declaration without precision, whose values decide)."""
    t = (declared_type or "").upper()
    if not t.strip():
        return None
    for pattern, family in DECLARED_FAMILIES:
        m = re.search(pattern, t)
        if m:
            g = m.groupdict()
            if family == "DECIMAL":
                p = int(g["p"])
                sc = int(g["s"]) if g.get("s") else 0
                if not 0 < p <= 38 or sc > p:
                    return None
                return DeclaredType(family, precision=p, scale=sc)
            if family == "VARCHAR" and g.get("n"):
                n = int(g["n"])
                return DeclaredType(family, length=n) if n > 0 else DeclaredType(family)
            return DeclaredType(family)
    return None


def decimal_fits(value, precision: int, scale: int) -> bool:
    """True when a stored number's shortest decimal text fits DECIMAL(precision, scale)
    exactly (floats as ``repr``: ``0.1`` is 0.1, not its binary expansion)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    d = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    sign, digits, exp = d.normalize().as_tuple() if d != 0 else (0, (0,), 0)
    frac = max(0, -exp)
    int_digits = max(0, len(digits) + exp)
    return frac <= scale and int_digits <= precision - scale


def sqlite_affinity(declared_type: str) -> str:
    """SQLite column affinity of a declared type (SQLite docs "Datatypes", section 3.1)."""
    t = (declared_type or "").upper()
    if not t.strip():
        return "BLOB"
    for needles, affinity in SQLITE_AFFINITY_RULES:
        if any(n in t for n in needles):
            return affinity
    return "NUMERIC"


def sqlite_default_logical(declared_type: str) -> str:
    """Logical type of an SQLite column from its declared type alone (all-NULL columns)."""
    aff = sqlite_affinity(declared_type)
    if aff == "NUMERIC" and any(h in declared_type.upper() for h in SQLITE_TEXTUAL_NUMERIC_HINTS):
        return "VARCHAR"
    return SQLITE_AFFINITY_DEFAULT[aff]


def sqlite_logical_type(declared_type: str, storage_classes: set[str],
                        max_abs_int: int | None) -> tuple[str, str | None]:
    """Choose an SQLite column's logical type from its declared type and stored values.

    Args:
        declared_type: declared type text ("" when none).
        storage_classes: ``typeof`` values present, NULL excluded (subset of
            integer/real/text/blob).
        max_abs_int: largest |integer| stored (None when no integers).

    Returns: ``(logical_type, widened)`` where ``widened`` is None when the declared type's
    affinity holds every value, else a sentence for the manifest.
    """
    default = sqlite_default_logical(declared_type)
    if not storage_classes:
        return default, None
    kinds = {SQLITE_STORAGE_LOGICAL[s] for s in storage_classes}
    chosen = max(kinds, key=WIDENING_RANK.__getitem__)
    if chosen == "DOUBLE" and "BIGINT" in kinds and max_abs_int is not None \
            and max_abs_int > MAX_EXACT_INT_IN_DOUBLE:
        chosen = "VARCHAR"
    aff = sqlite_affinity(declared_type)
    # Affinities whose logical type is decided by the values (no declared promise broken).
    value_driven = aff in ("BLOB", "NUMERIC")
    if value_driven or chosen == default:
        return chosen, None
    return chosen, (f"declared {declared_type or '(none)'} ({aff} affinity) but stores "
                    f"{'/'.join(sorted(storage_classes))} values -> {chosen}")


def arrow_type(column) -> pa.DataType:
    """Arrow type for a ``ColumnSpec`` (DECIMAL uses its precision/scale)."""
    if column.logical_type == "DECIMAL":
        return pa.decimal128(column.precision or 38, column.scale or 0)
    return ARROW_TYPES[column.logical_type]


def target_type(engine: str, column) -> str:
    """Target type text of a ``ColumnSpec`` in ``engine`` (KeyError if unmapped)."""
    t = TARGET_TYPES[engine][column.logical_type]
    if column.logical_type == "DECIMAL" and column.precision:
        t = f"{t}({column.precision},{column.scale or 0})"
    if column.logical_type == "VARCHAR" and getattr(column, "length", None) \
            and engine in VARCHAR_WITH_LENGTH:
        t = VARCHAR_WITH_LENGTH[engine].format(n=column.length)
    return t
