"""Which source constraints a copy can carry, checked against the staged data.

Shared by the embedded-engine writers (DuckDB, SQLite), which stage every table first and then
create the final tables with only the constraints the data really satisfies; each constraint
left out is recorded as one sentence in the manifest (README "Replication": keys are
carried where the target supports them, never silently).
"""
from __future__ import annotations

from typing import Callable, Iterable

from polysql_ray.replication.base import TableSpec
from polysql_ray.replication.sqlite_reader import quote_ident as q

#: ``count(sql) -> int``: runs a ``SELECT count(*) ...`` on the staging connection.
Count = Callable[[str], int]


def carryable_primary_keys(tables: list[TableSpec], staged: Callable[[str], str], count: Count,
                           dropped: list[str]) -> dict[str, tuple[str, ...]]:
    """``{table: pk columns}`` for primary keys with no NULL and no duplicated key in the data.

    Args:
        tables: source tables (exact identifiers).
        staged: table name -> quoted staging relation (``polysql_staging."T"``).
        count: see :data:`Count`.
        dropped: receives one sentence per primary key left out.
    """
    out = {}
    for t in tables:
        if not t.primary_key:
            continue
        src = staged(t.name)
        keys = ", ".join(q(c) for c in t.primary_key)
        nulls = " OR ".join(f"{q(c)} IS NULL" for c in t.primary_key)
        n_null = count(f"SELECT count(*) FROM {src} WHERE {nulls}")
        n_dup = count(f"SELECT count(*) FROM (SELECT 1 FROM {src} GROUP BY {keys} HAVING count(*) > 1)")
        if n_null or n_dup:
            dropped.append(f"PRIMARY KEY {t.name}({', '.join(t.primary_key)}): source data has "
                           f"{n_null} NULL key rows and {n_dup} duplicated keys")
        else:
            out[t.name] = t.primary_key
    return out


def carryable_not_null(tables: list[TableSpec], staged: Callable[[str], str], count: Count,
                       dropped: list[str]) -> dict[str, set[str]]:
    """``{table: columns}`` whose declared NOT NULL the data satisfies (see
    :func:`carryable_primary_keys` for the arguments)."""
    out = {}
    for t in tables:
        keep = set()
        for c in t.columns:
            if not c.not_null:
                continue
            n = count(f"SELECT count(*) FROM {staged(t.name)} WHERE {q(c.name)} IS NULL")
            if n:
                dropped.append(f"NOT NULL {t.name}.{c.name}: source holds {n} NULLs")
            else:
                keep.add(c.name)
        out[t.name] = keep
    return out


def resolve_name(name: str, candidates: Iterable[str]) -> str | None:
    """Exact match first, then the unique case-insensitive match (SQLite resolves FK targets
    case-insensitively); None when absent or ambiguous."""
    cands = list(candidates)
    if name in cands:
        return name
    low = [c for c in cands if c.lower() == name.lower()]
    return low[0] if len(low) == 1 else None


def resolve_foreign_key(table: TableSpec, fk, by_name: dict[str, TableSpec]):
    """Resolve one source foreign key against the copied tables, as SQLite resolves it
    (exact name first, then the unique case-insensitive match; ``REFERENCES t`` without
    columns means t's primary key).

    Returns ``(what, parent_name, parent_columns, child_columns, problem)``: ``what`` names the
    constraint for the manifest; ``problem`` is None when it can be created, else the reason it
    is dropped.
    """
    what = (f"FOREIGN KEY {table.name}({', '.join(fk.columns)}) REFERENCES "
            f"{fk.ref_table}({', '.join(fk.ref_columns)})")
    parent_name = resolve_name(fk.ref_table, by_name)
    if parent_name is None:
        return what, None, [], [], "referenced table does not exist"
    parent = by_name[parent_name]
    ref_cols = fk.ref_columns or parent.primary_key
    pcols = [resolve_name(c, [x.name for x in parent.columns]) for c in ref_cols]
    ccols = [resolve_name(c, [x.name for x in table.columns]) for c in fk.columns]
    if not ref_cols or None in pcols or None in ccols or len(pcols) != len(ccols):
        return what, parent_name, pcols, ccols, "a referenced or referencing column does not exist"
    return what, parent_name, pcols, ccols, None
