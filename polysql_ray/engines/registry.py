"""Engine registry: engine name -> class, default sqlglot dialect and settings, as data.

``make_engine("duckdb", threads=2)`` builds an engine; settings given override
:data:`ENGINES`' defaults. The dialect name equals the engine name for now (``sqlite``,
``duckdb``; later ``postgres``, ``mysql``, ``clickhouse``): add one :class:`EngineSpec` row
per new engine module.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from polysql_ray.engines.base import Engine
from polysql_ray.engines.identifiers import IDENTIFIER_RULES, IdentifierRules


@dataclass(frozen=True)
class EngineSpec:
    """One registry row.

    Attributes:
        cls: ``"module:Class"`` of the engine (imported lazily: server drivers stay optional).
        dialect: sqlglot dialect of the SQL the engine accepts.
        embedded: True when ``location`` is a local file (replicas live under replicas_dir).
        settings: default constructor keyword arguments.
        takes_mapping: the class takes one settings mapping (server engines: host, port,
            user, password_env ...) instead of keyword arguments.
        identifiers: how the engine resolves identifiers (``engines.identifiers``).
        semantic: names of settings that change results (e.g. ClickHouse ``join_use_nulls``);
            their values enter every cell key scored on the engine (:func:`engine_fingerprint`).
    """

    cls: str
    dialect: str
    embedded: bool
    settings: dict = field(default_factory=dict)
    takes_mapping: bool = False
    identifiers: IdentifierRules | None = None
    semantic: tuple[str, ...] = ()


#: Engine name -> spec.
ENGINES: dict[str, EngineSpec] = {
    "sqlite": EngineSpec("polysql_ray.engines.sqlite:SqliteEngine", "sqlite", True,
                         {"progress_steps": 1000}, identifiers=IDENTIFIER_RULES["sqlite"]),
    "duckdb": EngineSpec("polysql_ray.engines.duckdb:DuckDBEngine", "duckdb", True,
                         {"threads": 1, "memory_limit": "2GB"}, identifiers=IDENTIFIER_RULES["duckdb"]),
    "postgres": EngineSpec("polysql_ray.engines.postgres:PostgresEngine", "postgres", False, takes_mapping=True,
                           identifiers=IDENTIFIER_RULES["postgres"]),
    "mysql": EngineSpec("polysql_ray.engines.mysql:MySQLEngine", "mysql", False, takes_mapping=True,
                        identifiers=IDENTIFIER_RULES["mysql"]),
    "clickhouse": EngineSpec("polysql_ray.engines.clickhouse:ClickHouseEngine", "clickhouse", True,
                             {"join_use_nulls": 1, "max_memory_usage": 2_000_000_000, "max_threads": 1},
                             identifiers=IDENTIFIER_RULES["clickhouse"], semantic=("join_use_nulls",)),
    "snowflake": EngineSpec("polysql_ray.engines.snowflake:SnowflakeEngine", "snowflake", False, takes_mapping=True,
                            identifiers=IDENTIFIER_RULES["snowflake"]),
    "bigquery": EngineSpec("polysql_ray.engines.bigquery:BigQueryEngine", "bigquery", False, takes_mapping=True,
                           identifiers=IDENTIFIER_RULES["bigquery"]),
}


def engine_spec(name: str) -> EngineSpec:
    """The registry row of ``name``; ``KeyError`` naming the known engines otherwise."""
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown engine {name!r}; known: {sorted(ENGINES)}") from None


def default_dialect(name: str) -> str:
    """sqlglot dialect name of engine ``name``."""
    return engine_spec(name).dialect


def engine_fingerprint(name: str, settings: dict | None = None) -> str:
    """``name:k=v,...`` over the engine's result-changing settings (defaults overridden by
    ``settings``); "" for engines that declare none (their cell keys stay as they were)."""
    spec = engine_spec(name)
    merged = {**spec.settings, **(settings or {})}
    if not spec.semantic:
        return ""
    return f"{name}:" + ",".join(f"{k}={merged.get(k)}" for k in spec.semantic)


def make_engine(name: str, **settings) -> Engine:
    """Instantiate engine ``name`` with its default settings overridden by ``settings``."""
    spec = engine_spec(name)
    module, _, cls = spec.cls.partition(":")
    merged = {**spec.settings, **settings}
    klass = getattr(importlib.import_module(module), cls)
    return klass(merged) if spec.takes_mapping else klass(**merged)


#: Target dialect name -> engine that runs SQL written for it. One row per dialect; several
#: dialects may share an engine (e.g. ``mariadb`` -> ``mysql``).
DIALECTS: dict[str, str] = {name: name for name in ENGINES}


def engine_for_dialect(dialect: str) -> str:
    """Engine name that executes predictions written for ``dialect``.

    Errors: ``KeyError`` naming the known dialects.
    """
    try:
        return DIALECTS[dialect]
    except KeyError:
        raise KeyError(f"unknown dialect {dialect!r}; known dialects: {sorted(DIALECTS)}") from None



@dataclass(frozen=True)
class Semantics:
    """Dialect semantics that change results of the same SQL on the same data (engine facts,
    from each engine's documentation; used only to flag ambiguity, never to change a verdict).

    Attributes:
        integer_division: ``int / int`` truncates (SQLite, PostgreSQL) instead of giving an exact
            or float quotient (MySQL, DuckDB).
        nulls_first_asc: NULL sorts first under ``ORDER BY x ASC`` (SQLite, MySQL); PostgreSQL
            and DuckDB put NULLs last.
        ci_equals: ``=`` on strings ignores case under the default collation (MySQL/MariaDB).
        ci_like: ``LIKE`` ignores (ASCII) case (SQLite, MySQL; not PostgreSQL, DuckDB).
    """

    integer_division: bool
    nulls_first_asc: bool
    ci_equals: bool
    ci_like: bool


#: Engine name -> its :class:`Semantics`.
SEMANTICS: dict[str, Semantics] = {
    "sqlite": Semantics(integer_division=True, nulls_first_asc=True, ci_equals=False, ci_like=True),
    "duckdb": Semantics(integer_division=False, nulls_first_asc=False, ci_equals=False, ci_like=False),
    "postgres": Semantics(integer_division=True, nulls_first_asc=False, ci_equals=False, ci_like=False),
    "mysql": Semantics(integer_division=False, nulls_first_asc=True, ci_equals=True, ci_like=True),
}
