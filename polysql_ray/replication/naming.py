"""Names a replica stores: the source's names, folded where the target folds case.

One rule, :func:`polysql_ray.engines.identifiers.replica_name_for`, applied to every table and
column of a source schema before the writer runs: it fills ``TableSpec.target_name`` and
``ColumnSpec.target_name`` and returns one manifest sentence per name that the replica stores
differently (the full mapping is in the manifest's tables: ``name`` -> ``target_name``).

Qualified names: :func:`source_schema` is the one name a query on the source may qualify a
table with (``main.singer`` on SQLite, ``concert_singer.singer`` on a MySQL database of that
name, ``public.t`` on PostgreSQL); each writer carries it as its engine allows
(``TargetWriter.location_for(schema=...)`` and the optional ``carry_schema`` hook) and the
manifest's ``schema_names`` records, per source name, how it resolves on the replica or why
it does not.
"""
from __future__ import annotations

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.engines.identifiers import replica_name_for
from polysql_ray.replication.spec import TableSpec

#: Schema name of single-schema sources whose reader records none on its tables.
DEFAULT_SOURCE_SCHEMA: dict[str, str] = {"sqlite": "main", "duckdb": "main"}


def source_schema(source: SourceDatabase, reader=None) -> str:
    """The schema (MySQL: database) name the source holds its tables in, as a query on the
    source qualifies them, without reading the schema: the reader's ``schema_name(source)``
    when it has one (PostgreSQL: the schema of ``<database>/<schema>``), else
    :data:`DEFAULT_SOURCE_SCHEMA` (``main``), else the source location (a MySQL database)."""
    named = getattr(reader, "schema_name", None)
    if named is not None:
        return named(source)
    return DEFAULT_SOURCE_SCHEMA.get(source.engine, source.location)


def replica_schema(name: str, source_engine: str, target_engine: str,
                   lower_case_table_names: int | None = None) -> str:
    """The name a replica gives the source's schema ``name``: the table-name rule of
    ``engines.identifiers`` (folded where the target folds and the source ignores case)."""
    return replica_name_for(name, "table", source_engine, target_engine, [name],
                            lower_case_table_names)[0]


def assign(tables: list[TableSpec], source_engine: str, target_engine: str,
           lower_case_table_names: int | None = None) -> list[str]:
    """Fill the target names of ``tables`` (in place) for a copy ``source_engine`` ->
    ``target_engine``; returns sentences naming each changed or deliberately quoted name."""
    notes: list[str] = []
    table_names = [t.name for t in tables]
    for t in tables:
        t.target_name, why = replica_name_for(t.name, "table", source_engine, target_engine,
                                              table_names, lower_case_table_names)
        if t.target_name != t.name or why.startswith("kept, quoted"):
            notes.append(f"table {t.name!r} -> {t.target_name!r}: {why}")
        col_names = [c.name for c in t.columns]
        for c in t.columns:
            c.target_name, why = replica_name_for(c.name, "column", source_engine, target_engine,
                                                  col_names, lower_case_table_names)
            if c.target_name != c.name or why.startswith("kept, quoted"):
                notes.append(f"column {t.name}.{c.name!r} -> {c.target_name!r}: {why}")
    return notes


def qualifiers(source: SourceDatabase, reader, tables: list[TableSpec]) -> dict[str, list[TableSpec]]:
    """Every name a query on the source may qualify a table with -> the tables it qualifies
    (home schema first): :func:`source_schema` for tables whose reader records no schema or
    records the home one, each other recorded ``TableSpec.schema`` (a PostgreSQL source's other
    schemas: ``sales.orders``) for its own tables, and the reader's ``catalog_name(source)`` when
    it has one (a DuckDB file ``nyc.duckdb`` opens as catalog ``nyc``: ``nyc.taxi``) for all.
    Each is carried to the replica by the writer's ``carry_schema`` hook (``base.replicate``)."""
    home = source_schema(source, reader)
    out: dict[str, list[TableSpec]] = {home: []}
    for t in tables:
        out.setdefault(t.schema or home, []).append(t)
    catalog = getattr(reader, "catalog_name", None)
    if catalog is not None:
        name = catalog(source)
        if name and name not in out:
            out[name] = list(tables)
    return out
