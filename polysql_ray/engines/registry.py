"""Engine registry: every engine class declared in the ``engines`` package, by name.

An engine registers itself by being declared (``engines/declaration.py``): the first lookup
imports every module of this package, and each module that defines an engine class (one with
its own ``name``) adds it. Nothing here lists engines: adding one touches its own module and
files only. ``make_engine("duckdb", threads=2)`` builds an engine; settings given override the
class's declared defaults.

The tables :data:`ENGINES`, :data:`DIALECTS` and :data:`SEMANTICS` are read-through views of
the declarations (:class:`~polysql_ray.engines.declaration.DeclaredTable`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from polysql_ray.engines.base import Engine
from polysql_ray.engines.declaration import (  # noqa: F401 (Semantics: re-exported)
    _GENERATION, DeclaredTable, Semantics, StructuralFacts, declared_engines, registered,
)
from polysql_ray.engines.identifiers import IdentifierRules


@dataclass(frozen=True)
class EngineSpec:
    """One engine's registry row (a summary of its declaration).

    Attributes:
        cls: ``"module:Class"`` of the engine.
        dialect: sqlglot dialect of the SQL the engine accepts.
        embedded: True when ``location`` is a local file (replicas live under replicas_dir).
        settings: default constructor keyword arguments.
        takes_mapping: the class takes one settings mapping (server engines: host, port,
            user, password_env ...) instead of keyword arguments.
        identifiers: how the engine resolves identifiers (``engines.identifiers``).
        semantic: names of settings that change results (e.g. ClickHouse ``join_use_nulls``);
            their values enter every cell key scored on the engine (:func:`engine_fingerprint`).
        child_process: the engine runs in a child process of its execution actor
            (``engines/child.py``).
        transient_unavailable: its ``UNAVAILABLE`` is an outage worth retrying (servers).

    The row is small and imports no engine module, so the driver hands it to an execution
    actor, which then never imports its engine's module (with it pyarrow and sqlglot) when the
    engine runs in a child process.
    """

    cls: str
    dialect: str
    embedded: bool
    settings: dict = field(default_factory=dict)
    takes_mapping: bool = False
    identifiers: IdentifierRules | None = None
    semantic: tuple[str, ...] = ()
    child_process: bool = False
    transient_unavailable: bool = False


def _spec(cls: type) -> EngineSpec:
    return EngineSpec(f"{cls.__module__}:{cls.__qualname__}", cls.dialect, cls.embedded,
                      dict(cls.settings), cls.takes_mapping, cls.identifiers, tuple(cls.semantic_settings),
                      bool(getattr(cls, "child_process", False)), bool(getattr(cls, "transient_unavailable", False)))


#: Engine name -> spec.
ENGINES: DeclaredTable = DeclaredTable(_spec)

#: Engine name -> its :class:`Semantics` (engines that declare them).
SEMANTICS: DeclaredTable = DeclaredTable(lambda cls: cls.semantics)


def engine_class(name: str) -> type:
    """The declared class of engine ``name``; ``KeyError`` naming the known engines otherwise."""
    engines = declared_engines()
    try:
        return engines[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {sorted(engines)}") from None


def engine_spec(name: str) -> EngineSpec:
    """The registry row of ``name``; ``KeyError`` naming the known engines otherwise."""
    return _spec(engine_class(name))


def default_dialect(name: str) -> str:
    """sqlglot dialect name of engine ``name``."""
    return engine_class(name).dialect


def engine_fingerprint(name: str, settings: dict | None = None) -> str:
    """``name:k=v,...`` over the engine's result-changing settings (defaults overridden by
    ``settings``); "" for engines that declare none (their cell keys stay as they were)."""
    cls = engine_class(name)
    merged = {**cls.settings, **(settings or {})}
    if not cls.semantic_settings:
        return ""
    return f"{name}:" + ",".join(f"{k}={merged.get(k)}" for k in cls.semantic_settings)


def engine_identity(name: str, settings: dict | None = None) -> dict:
    """What engine ``name`` with ``settings`` runs on, read from the engine now
    (``EngineDeclaration.identity``: product, version, stand-in, result-changing settings,
    endpoint), plus ``engine``. A server that cannot be reached gives ``unreachable`` (its
    error, one line) instead of raising: its cells then get keys of their own and nothing
    stored under another identity is reused."""
    engine = make_engine(name, **(settings or {}))
    try:
        ident = dict(engine.identity())
    except Exception as exc:  # noqa: BLE001 - recorded: a dead server scores nothing anyway
        ident = {"product": name, "version": "", "standin": "", "settings": {},
                 "unreachable": " ".join(str(exc).split())[:300] or type(exc).__name__}
    finally:
        close = getattr(engine, "close", None)
        if close is not None:
            close()
    return {"engine": name, **ident}


def identity_fingerprint(identity: dict) -> str:
    """16 hex digits over an :func:`engine_identity` without its ``endpoint`` (two servers
    of the same product, version and settings give the same results) and with only the fact
    of ``unreachable``, not its text (a message that varies must not move the key)."""
    import hashlib
    import json

    kept = {k: (True if k == "unreachable" else v) for k, v in identity.items() if k != "endpoint"}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


def make_engine(name: str, **settings) -> Engine:
    """Instantiate engine ``name`` with its default settings overridden by ``settings``."""
    cls = engine_class(name)
    settings.pop("child_process", None)  # where the engine runs (pipeline/actors.py), not a setting of it
    # keys with a leading underscore belong to the execution actor (fault points, replica
    # recipes: pipeline/actors.py), never to the engine; an engine made elsewhere (run-start
    # identity, replication) drops them
    settings = {k: v for k, v in settings.items() if not str(k).startswith("_")}
    merged = {**cls.settings, **settings}
    return cls(merged) if cls.takes_mapping else cls(**merged)


def _dialect_rows(cls: type) -> list[str]:
    """Target-dialect names an engine runs: its own name and its ``aliases`` (the sqlglot
    ``dialect`` may be shared, e.g. a variant engine over SQLite)."""
    return [cls.name, *cls.aliases]


class _Dialects(DeclaredTable):
    """Target dialect name -> engine name (each engine's dialect and its aliases)."""

    def __init__(self) -> None:
        super().__init__(lambda cls: cls.name)

    def _data(self) -> dict[str, str]:
        if self._cache is None or self._cache[0] != _GENERATION[0]:
            engines = declared_engines()
            self._cache = (_GENERATION[0], {d: cls.name for cls in engines.values() for d in _dialect_rows(cls)})
        return {**self._cache[1], **self._overrides} if self._overrides else self._cache[1]


#: Target dialect name -> engine that runs SQL written for it. One row per dialect; several
#: dialects may share an engine (e.g. ``mariadb`` -> ``mysql``).
DIALECTS: DeclaredTable = _Dialects()


def engine_for_dialect(dialect: str) -> str:
    """Engine name that executes predictions written for ``dialect``.

    Errors: ``KeyError`` naming the known dialects.
    """
    try:
        return DIALECTS[dialect]
    except KeyError:
        raise KeyError(f"unknown dialect {dialect!r}; known dialects: {sorted(DIALECTS)}") from None


_FACTS_CACHE: dict = {}


def structural_facts(dialect: str) -> StructuralFacts:
    """:class:`~polysql_ray.engines.declaration.StructuralFacts` of the engine running
    ``dialect``; the default (nothing provable across dialects) for an unknown dialect.
    Cached per registry generation (the structural check asks once per syntax-tree node)."""
    key = (dialect, _GENERATION[0])
    facts = _FACTS_CACHE.get(key)
    if facts is None:
        engine = DIALECTS.get(dialect)
        facts = engine_class(engine).structural if engine is not None else StructuralFacts()
        _FACTS_CACHE[key] = facts
    return facts
