"""Names a replica stores: the source's names, folded where the target folds case.

One rule, :func:`polysql_ray.engines.identifiers.replica_name_for`, applied to every table and
column of a source schema before the writer runs: it fills ``TableSpec.target_name`` and
``ColumnSpec.target_name`` and returns one manifest sentence per name that the replica stores
differently (the full mapping is in the manifest's tables: ``name`` -> ``target_name``).
"""
from __future__ import annotations

from polysql_ray.engines.identifiers import replica_name_for
from polysql_ray.replication.base import TableSpec


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
