"""Portable suite values: a suite database must not create a disagreement between engines that
the source database does not have.

Suite EX runs the gold on the SQLite suite file and the prediction on the suite's copy in the
target engine, exactly as EX does on the original. Where the engines' declared semantics
(:class:`~polysql_ray.engines.declaration.Semantics`, one per engine) differ, some *values* make
the same SQL return different results on the two engines: a NULL under ``ORDER BY`` (SQLite
sorts it first ascending, PostgreSQL last), a text value that differs from another only in case
(MariaDB's default ``_ci`` collations make ``'France' = 'FRANCE'`` true and group them
together) or only in trailing spaces (MariaDB's PAD SPACE collations). The source may hold such
values (then EX already meets them: the original's disagreement, the gold's EX ceiling); the
suite must not add them where the source has none, or a correct prediction, often the gold's
own text, fails suite EX for the engines' sake and not its own.

:data:`HAZARDS` is that rule as data: each hazard names the ``Semantics`` facts engines must
agree on, what value it forbids, and the comparison flag the disagreement raises. A hazard is
*active* for a set of engines (:func:`active_hazards`; default: every registered engine that
declares semantics, so a suite is one per seed whatever the sweep's dialects) when those facts
differ between two of them. Generation (:mod:`polysql_ray.suites.generate`) applies the active
hazards through :class:`Portability`:

* ``null_order``: no NULL is drawn into a column a gold uses as an ``ORDER BY`` key
  (:func:`order_key_columns`); a source row copied whole keeps its own NULL, with the values it
  came with. (Drawing NULLs where the source column has some is not enough: world_1's
  ``LifeExpectancy`` has NULLs, none in Asia, and a drawn NULL in an Asian row made
  ``... WHERE Continent = 'Asia' ORDER BY LifeExpectancy LIMIT 1`` answer differently on
  SQLite and PostgreSQL, a disagreement the source lacks: suites v3, read on Spider dev);
* ``collation_case`` / ``collation_trailing_space``: a value that is not observed in the
  source column (a gold literal, its upper-cased or LIKE-core variant) is not added to the
  column's domain when it equals another domain value under the folding those engines apply
  (:meth:`Portability.text_key`: case and accents folded, trailing spaces dropped). Observed
  values are all kept: the source's own collisions are the source's.

The active hazard names enter the suite's cache key and its figures (``portability``).
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import sqlglot
from sqlglot import exp


def _fold_case(s: str) -> str:
    """Case and accents folded (MariaDB's ``utf8mb4_general_ci`` ignores both)."""
    return "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch)).casefold()


def _drop_pad(s: str) -> str:
    """Trailing spaces dropped (a PAD SPACE collation compares ``'a'`` and ``'a  '`` equal)."""
    return s.rstrip(" ")


@dataclass(frozen=True)
class Hazard:
    """One kind of value that makes engines disagree when their declared facts differ.

    Attributes:
        name: the comparison flag the disagreement raises (``null_order``, ``collation_case``,
            ``collation_trailing_space``).
        facts: ``Semantics`` attributes; the hazard is active when two engines differ on them.
        forbids: what generation does not add (documentation).
        fold: for text hazards, the folding under which two values collide (None: NULLs).
    """

    name: str
    facts: tuple[str, ...]
    forbids: str
    fold: Callable[[str], str] | None = None


#: The hazards (module docstring), in the order their foldings compose.
HAZARDS: tuple[Hazard, ...] = (
    Hazard("null_order", ("nulls_asc", "nulls_desc"),
           "a drawn NULL in a column a gold orders by (copied source rows keep theirs)"),
    Hazard("collation_case", ("ci_equals", "ci_like"),
           "a text value equal to another of its column but for case or accents", _fold_case),
    Hazard("collation_trailing_space", ("pad_space",),
           "a text value equal to another of its column but for trailing spaces", _drop_pad),
)


def active_hazards(engines: Iterable[str] | None = None) -> tuple[Hazard, ...]:
    """The hazards whose facts differ between two of ``engines`` (names; None: every registered
    engine that declares :class:`Semantics`). An engine without semantics is left out."""
    from polysql_ray.engines.registry import SEMANTICS

    names = sorted(SEMANTICS) if engines is None else sorted(set(engines))
    sems = [SEMANTICS.get(n) for n in names]
    sems = [s for s in sems if s is not None]
    return tuple(h for h in HAZARDS
                 if len({tuple(getattr(s, f) for f in h.facts) for s in sems}) > 1)


@dataclass(frozen=True)
class Portability:
    """The active hazards as generation uses them (module docstring).

    Attributes:
        hazards: the active :class:`Hazard` objects.
    """

    hazards: tuple[Hazard, ...] = ()

    @classmethod
    def for_engines(cls, engines: Iterable[str] | None = None) -> "Portability":
        """The rules for ``engines`` (None: every declared engine)."""
        return cls(active_hazards(engines))

    @property
    def names(self) -> tuple[str, ...]:
        """Names of the active hazards (cache key, figures)."""
        return tuple(h.name for h in self.hazards)

    @property
    def order_keys_null_free(self) -> bool:
        """No NULLs drawn into ORDER BY key columns (copied source rows keep theirs)."""
        return any(h.name == "null_order" for h in self.hazards)

    def text_key(self, value):
        """The value under every active text folding (a non-text value unchanged): two
        distinct values with the same key would make the engines disagree."""
        if not isinstance(value, str):
            return value
        for h in self.hazards:
            if h.fold is not None:
                value = h.fold(value)
        return value

    @property
    def folds_text(self) -> bool:
        return any(h.fold is not None for h in self.hazards)


def gold_trees(gold_sqls: Iterable[str], dialect: str = "sqlite") -> Iterator[exp.Expression]:
    """The sqlglot tree of each gold SQL that ``dialect`` parses, in order; an unparsable or
    empty gold is skipped (suite generation reads what it can and never fails on a gold)."""
    for sql in gold_sqls:
        try:
            tree = sqlglot.parse_one(sql, read=dialect)
        except Exception:  # noqa: BLE001 - unreadable gold: nothing
            continue
        if tree is not None:
            yield tree


def order_key_columns(gold_sqls: Iterable[str], dialect: str = "sqlite") -> set[str]:
    """Column names (lower case) that a gold's ``ORDER BY`` (at any depth) sorts by: the
    columns of each key expression, through a select-list alias or position (``ORDER BY 2``),
    except those only counted (``count(x)`` is never NULL). Unparsable gold gives nothing."""
    out: set[str] = set()
    for tree in gold_trees(gold_sqls, dialect):
        for order in tree.find_all(exp.Order):
            select = order.parent if isinstance(order.parent, exp.Select) else None
            projections = list(select.expressions) if select is not None else []
            aliases = {p.alias.lower(): p.this for p in projections if isinstance(p, exp.Alias)}
            for o in order.expressions:
                key = o.this if isinstance(o, exp.Ordered) else o
                if isinstance(key, exp.Literal) and not key.is_string and key.this.isdigit() \
                        and 0 < int(key.this) <= len(projections):
                    key = projections[int(key.this) - 1]
                elif isinstance(key, exp.Column) and not key.table and key.name.lower() in aliases:
                    key = aliases[key.name.lower()]
                for col in key.find_all(exp.Column):
                    if col.find_ancestor(exp.Count) is None:
                        out.add(col.name.lower())
    return out
