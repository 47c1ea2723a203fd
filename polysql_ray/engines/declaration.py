"""Engine declarations: an engine is one class whose facts are class attributes.

In the style of sqlglot's dialect classes, every engine module (``engines/<name>.py``) defines
one subclass of :class:`EngineDeclaration` (through :class:`~polysql_ray.engines.embedded.EmbeddedEngine`
or :class:`~polysql_ray.engines.servers.ServerEngine`, which carry the one shared execute path
of each kind). Defining the class registers it (``__init_subclass__``); the registry
(:mod:`polysql_ray.engines.registry`) imports every module of the ``engines`` package, so a new
engine touches its own module, its replication writer, ``conf/engine/<name>.yaml`` and its
prompt rules file, and no table anywhere else.

Every consumer reads the declarations: the registry (``engine_spec``, ``make_engine``,
``engine_fingerprint``, ``engine_for_dialect``), the identifier rules of replication and
prompts (``engines.identifiers.IDENTIFIER_RULES``), the semantics flags of verdicts
(``registry.SEMANTICS``), the structural check (``comparison.ast``: :class:`StructuralFacts`),
replication (``replication.base.WRITERS``/``READERS``, ``replication.typemap.TARGET_TYPES``).
Those names stay importable as read-through mappings (:class:`DeclaredTable`).

Facts (:data:`REQUIRED_FACTS`; ``None`` is a declared "not applicable"):

| attribute | meaning |
|---|---|
| ``name`` | engine name in configs, the store and replica folders |
| ``dialect`` | sqlglot dialect of the SQL the engine runs (default: ``name``) |
| ``aliases`` | further target-dialect names run by this engine (e.g. ``mariadb``) |
| ``embedded`` | in-process engine whose ``location`` is a local file/folder |
| ``settings`` | default constructor settings (``make_engine`` overrides them) |
| ``takes_mapping`` | the constructor takes one settings mapping (servers) |
| ``semantic_settings`` | settings that change results; they enter every cell key |
| ``identifiers`` | :class:`~polysql_ray.engines.identifiers.IdentifierRules` (resolution, quoting, reserved words) |
| ``semantics`` | :class:`Semantics` (result-changing dialect facts; None: not documented, no flags) |
| ``structural`` | :class:`StructuralFacts`: what the structural check may prove across it |
| ``type_map`` | logical type -> target type text of its replication writer (None: writer's own) |
| ``varchar_with_length`` | type text of a VARCHAR(n) (``{n}``), None: ``type_map["VARCHAR"]`` |
| ``writer`` / ``reader`` | ``"module:Class"`` of its replication writer / source reader (or None) |
| ``sandbox`` | read-only/sandbox settings the engine applies on every connection or session |
| ``error_table`` | the engine's error table (driver code / message -> :class:`ExecStatus`) |
| ``denied_functions`` | functions refused before execution (sandbox, lower case) |
| ``transient_unavailable`` | UNAVAILABLE is infrastructure trouble to retry (servers) |
| ``connection`` | :class:`ConnectionBehaviour`: how connections are held and retried |
| ``prompt_rules`` | file name under ``generation/dialect_rules/`` (None: no prompts) |
| ``source_suffix`` | file suffix when the engine is a file *source* (``.sqlite``), else None |
| ``source_dump_suffix`` | suffix of a dump file a server source may come as (``.sql``), else None |
| ``server_start`` | command that starts a local server (shown when unreachable), else None |
"""
from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator


#: How a string meets a number in ``=``/``<``/``IN`` (:attr:`Semantics.string_number`).
STRING_NUMBER_RULES: dict[str, str] = {
    "affinity": "the column's type affinity decides: an INTEGER column converts '5' to 5, a TEXT column "
                "converts 5 to '5'; two literals of different classes are never equal (SQLite)",
    "number": "both sides compare as numbers: every string converts, '5x' = 5 and 'abc' = 0 (MySQL)",
    "cast": "the string side is cast to the number's type; a string that does not convert is an error",
    "literal": "only an untyped string literal takes the number's type; a string column against a number "
               "is an error",
    "error": "no implicit conversion between strings and numbers: the comparison is an error",
}


@dataclass(frozen=True)
class Semantics:
    """Dialect semantics that change results of the same SQL on the same data (engine facts,
    from each engine's documentation, cited where each engine declares them; used only to flag
    ambiguity, never to change a verdict: ``comparison/verdict.py``).

    Attributes:
        integer_division: ``int / int`` truncates (SQLite, PostgreSQL) instead of giving an exact
            or float quotient (MySQL, DuckDB, ClickHouse, Snowflake, BigQuery). Flag
            ``integer_division``.
        nulls_asc, nulls_desc: where NULLs go under ``ORDER BY x ASC`` / ``ORDER BY x DESC``
            without NULLS FIRST/LAST, each ``"first"`` or ``"last"`` (SQLite, MySQL, BigQuery:
            NULL smallest, first/last; PostgreSQL, Snowflake: NULL largest, last/first; DuckDB,
            ClickHouse: last in both directions). Flag ``null_order``.
        ci_equals: ``=`` on strings ignores case under the default collation (MySQL/MariaDB).
            Flag ``collation`` (from the data).
        ci_like: ``LIKE`` ignores (ASCII) case (SQLite, MySQL; not the others). Flag ``collation``.
        empty_sum_null: ``SUM`` (and MIN/MAX/AVG) over no rows is NULL (SQL standard) rather than
            the type's default 0 (ClickHouse without ``aggregate_functions_null_for_empty``).
            Flag ``empty_aggregate``.
        string_number: how a string meets a number in a comparison, a key of
            :data:`STRING_NUMBER_RULES`. Flag ``string_number``.
        arbitrary_ungrouped: a selected column that is neither grouped nor aggregated takes its
            value from any row of the group, and which row may change between runs (MariaDB
            without ONLY_FULL_GROUP_BY, "SELECT ... GROUP BY": "the server is free to choose any
            value from each group"); SQLite (the min()/max() row, else the last row scanned),
            PostgreSQL, DuckDB and ClickHouse refuse or define it. Used by the prediction-side
            determinism check (``comparison/verdict.py``).
        pad_space: ``=`` on strings ignores trailing spaces (``'a' = 'a  '``) under the default
            collation (MySQL/MariaDB PAD SPACE collations; the others compare text and VARCHAR
            exactly). Used by suite generation (``suites/portability.py``) and flagged
            ``collation_trailing_space`` by the fidelity study.
    """

    integer_division: bool
    nulls_asc: str
    nulls_desc: str
    ci_equals: bool
    ci_like: bool
    empty_sum_null: bool
    string_number: str
    arbitrary_ungrouped: bool = False
    pad_space: bool = False

    def __post_init__(self) -> None:
        for name in ("nulls_asc", "nulls_desc"):
            if getattr(self, name) not in ("first", "last"):
                raise ValueError(f"Semantics.{name} must be 'first' or 'last', not {getattr(self, name)!r}")
        if self.string_number not in STRING_NUMBER_RULES:
            raise ValueError(f"Semantics.string_number must be one of {sorted(STRING_NUMBER_RULES)}, "
                             f"not {self.string_number!r}")

    def nulls(self, desc: bool) -> str:
        """``"first"``/``"last"``: where NULLs go by default in that ORDER BY direction."""
        return self.nulls_desc if desc else self.nulls_asc

    @property
    def nulls_first_asc(self) -> bool:
        """NULL sorts first under ``ORDER BY x ASC`` (the one bit of earlier declarations)."""
        return self.nulls_asc == "first"


@dataclass(frozen=True)
class StructuralIdentifiers:
    """How the structural check resolves an identifier of one dialect.

    Attributes:
        fold_unquoted: unquoted identifiers compare case-insensitively (folded to lower).
        fold_quoted: quoted identifiers compare case-insensitively too.
        quoted_column_may_be_string: a quoted identifier in a column position may silently be
            a string literal (SQLite's double-quote fallback).
        schema_match: ``ci`` (matches schema names case-insensitively) or ``exact``.
    """

    fold_unquoted: bool
    fold_quoted: bool
    quoted_column_may_be_string: bool
    schema_match: str


#: An identifier rule that proves nothing by folding (the default of undeclared dialects).
EXACT_IDENTIFIERS = StructuralIdentifiers(False, False, False, "exact")

#: sqlglot node classes whose meaning agrees across the dialects that list them (see
#: ``comparison/ast.py``): the core, and the nodes allowed only under the type guard.
PORTABLE_CORE: frozenset[str] = frozenset({
    "Select", "From", "Join", "Where", "Group", "Having", "Column", "Identifier", "Table",
    "TableAlias", "Alias", "Star", "Literal", "Null", "Boolean", "And", "Or", "Not", "EQ", "NEQ",
    "Is", "In", "Count", "Distinct", "Exists", "Subquery", "Union", "Intersect", "Except",
    "Paren", "With", "CTE",
})
PORTABLE_GUARDED: frozenset[str] = frozenset({"LT", "GT", "LTE", "GTE", "Order", "Ordered", "Min", "Max",
                                              "Sum", "Avg"})


@dataclass(frozen=True)
class StructuralFacts:
    """What the structural check may prove across this engine's dialect (``comparison/ast.py``).

    A cross-dialect pair may use the nodes *both* dialects list in ``portable_nodes``, order by
    the type classes both list in ``ordered_classes``, and skip the schema for identifiers only
    when both resolve every name case-insensitively (``identifiers.schema_match == "ci"``).

    Attributes:
        identifiers: :class:`StructuralIdentifiers` of the dialect.
        portable_nodes: sqlglot node class names with the same meaning as in every other
            dialect that lists them (empty: never proven across dialects, e.g. MySQL's
            case-insensitive collations).
        ordered_classes: type classes (``num``, ``text``) whose ``<``/ORDER BY/MIN/MAX agree
            with the other dialects listing them (text: bytewise order; not locale order).
        numeric_plus: ``+`` and ``*`` are always numeric (commutative), never concatenation.
        left_collation: the left column's collation decides a column-column comparison.
        keywords: file under ``comparison/keywords/`` listing its reserved words, or None.
        double_literals: numeric literal forms the dialect reads as an 8-byte float rather than
            an exact number: ``decimal`` (``1.5``), ``exponent`` (``1e3``), ``big_integer``
            (beyond int64). SQLite reads all three as REAL; DuckDB ``1e3`` as DOUBLE (``1.5`` is
            a DECIMAL, ``2**64`` a HUGEINT); PostgreSQL none (``numeric``). A literal whose form
            two dialects read differently is proven only when its value survives both readings
            (``comparison/ast.py``, portable literals): ``1e999`` is ``inf`` in SQLite and an
            overflow error against a float in PostgreSQL.
    """

    identifiers: StructuralIdentifiers = EXACT_IDENTIFIERS
    portable_nodes: frozenset[str] = frozenset()
    ordered_classes: frozenset[str] = frozenset()
    numeric_plus: bool = False
    left_collation: bool = False
    keywords: str | None = None
    double_literals: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ConnectionBehaviour:
    """How an engine holds connections (documentation and tests read it; the execute paths
    follow it).

    Attributes:
        kind: ``per-location`` (one cached connection per database file, embedded),
            ``per-limits`` (one read-only connection per limits, chdb), ``pool`` (a bounded
            :class:`~polysql_ray.engines.servers.ConnectionPool`), ``client`` (one API client).
        lost_connection_retries: times a statement is retried on a fresh connection when the
            connection was lost mid-statement (read-only statements only).
        fresh_session: the session is reset between statements.
    """

    kind: str
    lost_connection_retries: int = 0
    fresh_session: bool = False


_UNDECLARED: Any = type("Undeclared", (), {"__repr__": lambda self: "<undeclared>"})()

#: Facts every registered engine must declare (``None`` allowed: "not applicable").
REQUIRED_FACTS: tuple[str, ...] = (
    "name", "dialect", "aliases", "embedded", "settings", "takes_mapping", "semantic_settings",
    "identifiers", "semantics", "structural", "type_map", "varchar_with_length", "writer", "reader",
    "sandbox", "error_table", "denied_functions", "transient_unavailable", "connection", "prompt_rules",
    "source_suffix", "source_dump_suffix", "server_start",
)

#: Facts that must not be None.
NON_NULL_FACTS: frozenset[str] = frozenset({
    "name", "dialect", "embedded", "settings", "identifiers", "structural", "sandbox", "error_table",
    "connection",
})

_REGISTRY: dict[str, type] = {}
_GENERATION = [0]
_LOCK = threading.RLock()


class EngineDeclaration:
    """Base of every engine class: the facts of :data:`REQUIRED_FACTS` as class attributes.

    A subclass that sets ``name`` in its own body is registered under that name when the
    class is created; a subclass without its own ``name`` (a variant for a test) is not.
    """

    name: ClassVar[str] = _UNDECLARED
    dialect: ClassVar[str] = _UNDECLARED
    aliases: ClassVar[tuple[str, ...]] = ()
    embedded: ClassVar[bool] = _UNDECLARED
    settings: ClassVar[dict] = _UNDECLARED
    takes_mapping: ClassVar[bool] = False
    semantic_settings: ClassVar[tuple[str, ...]] = ()
    identifiers: ClassVar[Any] = _UNDECLARED
    semantics: ClassVar[Semantics | None] = _UNDECLARED
    structural: ClassVar[StructuralFacts] = _UNDECLARED
    type_map: ClassVar[dict[str, str] | None] = _UNDECLARED
    varchar_with_length: ClassVar[str | None] = _UNDECLARED
    writer: ClassVar[str | None] = _UNDECLARED
    reader: ClassVar[str | None] = _UNDECLARED
    sandbox: ClassVar[dict] = _UNDECLARED
    error_table: ClassVar[Any] = _UNDECLARED
    denied_functions: ClassVar[frozenset[str]] = _UNDECLARED
    transient_unavailable: ClassVar[bool] = False
    connection: ClassVar[ConnectionBehaviour] = _UNDECLARED
    prompt_rules: ClassVar[str | None] = _UNDECLARED
    source_suffix: ClassVar[str | None] = None
    source_dump_suffix: ClassVar[str | None] = None
    server_start: ClassVar[str | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__ and cls.name is not _UNDECLARED:
            if "dialect" not in cls.__dict__ and cls.dialect is _UNDECLARED:
                cls.dialect = cls.name
            register(cls)

    def identity(self) -> dict:
        """What this engine instance runs on, read from the engine at run start: ``product``
        (``MariaDB``, ``PostgreSQL``, ``DuckDB`` ...), ``version``, ``standin`` (the stand-in's
        name, ``""`` for the real engine), ``settings`` (result-changing server settings, name
        -> text) and ``endpoint`` (``host:port``, recorded but not part of a score key). Server
        engines connect (errors propagate: ``registry.engine_identity`` records them); this
        default names the engine only."""
        return {"product": self.name, "version": "", "standin": "", "settings": {}}

    @classmethod
    def missing_facts(cls) -> list[str]:
        """Facts of :data:`REQUIRED_FACTS` this class leaves undeclared (or None where a value
        is required); ``[]`` for a complete declaration."""
        out = []
        for fact in REQUIRED_FACTS:
            value = getattr(cls, fact, _UNDECLARED)
            if value is _UNDECLARED or (value is None and fact in NON_NULL_FACTS):
                out.append(fact)
        return out


def register(cls: type) -> None:
    """Register engine class ``cls`` under ``cls.name`` (called by ``__init_subclass__``).

    Raises ValueError when another class (not a re-import of the same one) holds the name."""
    with _LOCK:
        old = _REGISTRY.get(cls.name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(f"engine {cls.name!r} declared twice: {old.__module__}.{old.__qualname__} "
                             f"and {cls.__module__}.{cls.__qualname__}")
        _REGISTRY[cls.name] = cls
        _GENERATION[0] += 1


def unregister(name: str) -> None:
    """Remove engine ``name`` from the registry (tests that declare a throw-away engine)."""
    with _LOCK:
        if _REGISTRY.pop(name, None) is not None:
            _GENERATION[0] += 1


def registered() -> dict[str, type]:
    """Engine name -> class of every engine declared so far (no discovery; see
    :func:`declared_engines`)."""
    return dict(_REGISTRY)


_DISCOVERED = [False]
#: The package whose modules declare the engines (this module's own package).
_PACKAGE = __name__.rpartition(".")[0]


def declared_engines() -> dict[str, type]:
    """Engine name -> declared class, after importing every module of ``polysql_ray.engines``
    once (modules that declare no engine are harmless). Raises what an engine module raises
    on import."""
    if not _DISCOVERED[0]:
        with _LOCK:
            if not _DISCOVERED[0]:
                for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
                    importlib.import_module(f"{_PACKAGE}.{info.name}")
                _DISCOVERED[0] = True
    return registered()


class DeclaredTable(MutableMapping):
    """A read-through mapping ``engine name -> fact`` over the declarations.

    ``fact(cls)`` gives a registered engine's value; engines whose value is None are absent.
    Writes (``table[k] = v``, ``setdefault``) are kept as overrides on top, so code that
    extends the old module-level dicts keeps working. Discovery of the engine modules runs on
    first read.
    """

    def __init__(self, fact: Callable[[type], Any]) -> None:
        self._fact = fact
        self._overrides: dict[str, Any] = {}
        self._cache: tuple[int, dict] | None = None

    def _data(self) -> dict[str, Any]:
        if self._cache is None or self._cache[0] != _GENERATION[0]:
            engines = declared_engines()  # imports the engine modules on first use
            base = {}
            for name, cls in engines.items():
                value = self._fact(cls)
                if value is not None:
                    base[name] = value
            self._cache = (_GENERATION[0], base)
        return {**self._cache[1], **self._overrides} if self._overrides else self._cache[1]

    def __getitem__(self, key: str) -> Any:
        return self._data()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._overrides[key] = value

    def __delitem__(self, key: str) -> None:
        del self._overrides[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return f"DeclaredTable({self._data()!r})"
