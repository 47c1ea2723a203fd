"""The versioned result-set comparison policy: one frozen object, Hydra-overridable.

Every score in the results store carries ``policy.version`` and ``policy.fingerprint()``
(``store/schema.py``); changing any field (e.g. ``policy.abs_tol=1e-4`` on the Hydra command
line) changes the fingerprint and therefore the cell key, so results under different policies
never mix. The rules follow docs/evaluation-notes.md section 2.

Numeric tolerance (the one place where "equal" is not identity):

* two values that are *integers by type* (int, bool when ``bool_as_int``, Decimal with scale 0)
  compare **exactly**: 123457 != 123456 always;
* otherwise (either side a float or a Decimal with a fractional scale) the values are equal iff
  ``|a - b| <= abs_tol + rel_tol * max(|a|, |b|)`` (NULL only equals NULL; NaN equals NaN).

The defaults are ``abs_tol = 1e-5`` (the PolySQL paper's tolerance, arXiv 2605.07796) and a tiny
``rel_tol = 1e-9``, which only absorbs float accumulation noise on large magnitudes (a double
sum near 1e12 has an ulp of 1.2e-4). A *purely relative* 1e-5 would accept 123457.0 for
123456.0 (|diff| = 1 <= 1.23); under the defaults the allowance there is 1e-5 + 1.2e-4, so it
fails, as does 0.12344 vs 0.12346 (|diff| = 2e-5 > 1e-5). Rounding to a fixed number of
digits is not used: it rejects values straddling a rounding boundary and accepts far values.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping

ORDER_MODES = ("auto", "bag", "list")
DUPLICATE_MODES = ("bag", "set")
TIE_MODES = ("lenient", "strict")


@dataclass(frozen=True)
class ComparisonPolicy:
    """How a gold result set and a predicted result set are judged equal (EX).

    Attributes:
        version: policy version tag stored with every score (``cmp-1``); bump it when the
            comparison *code* changes meaning, so old scores are recognisably different.
        abs_tol: absolute tolerance for non-integer numbers (paper: 1e-5).
        rel_tol: relative tolerance for non-integer numbers; see the module docstring.
        order: ``auto`` = multiset (bag) unless the gold has a top-level ORDER BY, then rows
            in order with rows tied on the ORDER BY keys compared as a multiset; ``bag`` =
            always multiset; ``list`` = always in order (ties still tolerated where known).
        extra_pred_columns: tolerate extra predicted columns by choosing the predicted columns
            that reproduce the gold columns row-wise (flag ``extra_pred_columns_used``).
        string_number_equal: treat the string '5' as equal to the number 5 (default False:
            a string is not a number).
        bool_as_int: BOOLEAN true/false equal 1/0 (SQLite has no BOOLEAN type).
        date_string_equal: DATE/TIMESTAMP/TIME values equal their ISO-8601 text
            (SQLite stores dates as TEXT). Timestamps are compared as UTC wall-clock; naive
            timestamps are taken as UTC.
        trim_trailing_spaces: ignore trailing spaces in strings (MySQL PAD SPACE collations).
        duplicates: ``bag`` (default): duplicate rows count, so a missing DISTINCT fails;
            ``set``: duplicate rows are dropped from both result sets before comparing, which
            approximates the test-suite evaluator's default (it deletes DISTINCT from both
            queries, ``keep_distinct=False``) for comparison with published Spider figures.
        ties_at_limit: ``lenient``: under ``ORDER BY ... LIMIT k`` with ties at the cut, accept
            any predicted choice among the tied rows (needs the gold probe, see shape.py);
            ``strict``: the predicted rows at the cut must equal the gold's choice. Both flag
            ``ties_at_limit``.
    """

    version: str = "cmp-1"
    abs_tol: float = 1e-5
    rel_tol: float = 1e-9
    order: str = "auto"
    extra_pred_columns: bool = True
    string_number_equal: bool = False
    bool_as_int: bool = True
    date_string_equal: bool = True
    trim_trailing_spaces: bool = False
    ties_at_limit: str = "lenient"
    duplicates: str = "bag"

    def __post_init__(self) -> None:
        if self.order not in ORDER_MODES:
            raise ValueError(f"policy.order must be one of {ORDER_MODES}, got {self.order!r}")
        if self.duplicates not in DUPLICATE_MODES:
            raise ValueError(f"policy.duplicates must be one of {DUPLICATE_MODES}, got {self.duplicates!r}")
        if self.ties_at_limit not in TIE_MODES:
            raise ValueError(f"policy.ties_at_limit must be one of {TIE_MODES}, got {self.ties_at_limit!r}")
        if not (self.abs_tol >= 0 and self.rel_tol >= 0):
            raise ValueError("policy tolerances must be >= 0")
        for f in dataclasses.fields(self):  # catch YAML strings like "yes" for booleans early
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise ValueError(f"policy.{f.name} must be a boolean")

    def fingerprint(self) -> str:
        """16-hex-digit sha256 over every field (name and value), stable across runs."""
        blob = json.dumps(dataclasses.asdict(self), sort_keys=True, default=repr)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

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
        data = dict(cfg)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown comparison policy field(s): {unknown}")
        for k in ("abs_tol", "rel_tol"):
            if k in data and isinstance(data[k], (int, str)) and not isinstance(data[k], bool):
                data[k] = float(data[k])
        return cls(**data)
