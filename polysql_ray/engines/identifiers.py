"""How each engine resolves identifiers, as data, and the one rule that names a replica's objects.

Facts (engine documentation; each engine class declares its own as ``identifiers``):

| engine     | unquoted names   | tables                       | columns          | quote |
|------------|------------------|------------------------------|------------------|-------|
| sqlite     | kept             | case-insensitive             | case-insensitive | ``"`` |
| duckdb     | kept             | case-insensitive             | case-insensitive | ``"`` |
| mysql      | kept             | ``lower_case_table_names``   | case-insensitive | `` ` `` |
| postgres   | folded to lower  | case-sensitive once quoted   | same             | ``"`` |
| snowflake  | folded to upper  | case-sensitive once quoted   | same             | ``"`` |
| clickhouse | kept             | case-sensitive               | case-sensitive   | ``"`` |
| bigquery   | kept             | case-sensitive               | case-insensitive | `` ` `` |

Sources: SQLite "SQL As Understood By SQLite" (keywords, identifiers); DuckDB "Rules for Case
Sensitivity"; MySQL 8.0 reference 11.2.3 "Identifier Case Sensitivity"; PostgreSQL 15 docs
4.1.1 "Identifiers and Key Words"; Snowflake "Identifier requirements"; ClickHouse "Syntax:
Identifiers"; BigQuery "Lexical structure: case sensitivity".

The naming rule (:func:`replica_name_for`): a replica must let every spelling that resolves
on the source resolve on the target. When the target keeps names and resolves them
case-insensitively (DuckDB, SQLite, MySQL columns), the source spelling is kept. When the
target *folds* unquoted names (PostgreSQL, Snowflake) and the source resolves the name
case-insensitively, the replica stores the folded name, so that an unquoted reference in any
case resolves (``SELECT name FROM singer`` and ``SELECT Name FROM Singer``). Names that are
not regular identifiers (spaces, punctuation, a reserved word of the target) or whose folded
form collides with a sibling keep their exact spelling and must be quoted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from polysql_ray.engines.declaration import DeclaredTable

#: A regular identifier: usable unquoted in every supported engine.
REGULAR_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: PostgreSQL 15 keywords that cannot be a column or table name unquoted
#: (``pg_get_keywords()`` categories R and T).
POSTGRES_RESERVED = frozenset("""
all analyse analyze and any array as asc asymmetric authorization binary both case cast check
collate collation column concurrently constraint create cross current_catalog current_date
current_role current_schema current_time current_timestamp current_user default deferrable desc
distinct do else end except false fetch for foreign freeze from full grant group having ilike in
initially inner intersect into is isnull join lateral leading left like limit localtime
localtimestamp natural not notnull null offset on only or order outer overlaps placing primary
references returning right select session_user similar some symmetric table tablesample then to
trailing true union unique user using variadic verbose when where window with""".split())


@dataclass(frozen=True)
class IdentifierRules:
    """How one engine resolves identifiers.

    Attributes:
        fold: what the engine does to an *unquoted* name: ``"lower"`` (PostgreSQL), ``"upper"``
            (Snowflake) or None (kept as written).
        tables_ci: table names resolve case-insensitively; None = decided by the server
            (MySQL ``lower_case_table_names``: 0 case-sensitive, 1/2 insensitive).
        columns_ci: column names resolve case-insensitively.
        quote: the identifier quote character.
        reserved: lower-case words that must be quoted when used as a name.
    """

    fold: str | None
    tables_ci: bool | None
    columns_ci: bool
    quote: str = '"'
    reserved: frozenset[str] = frozenset()

    def case_insensitive(self, kind: str, lower_case_table_names: int | None = None) -> bool:
        """Whether a name of ``kind`` (``table``/``column``) resolves in any case, quoted or not
        (folding engines: only unquoted names do, so False)."""
        if self.fold is not None:
            return False
        if kind == "table":
            if self.tables_ci is None:
                return bool(lower_case_table_names)
            return self.tables_ci
        return self.columns_ci

    def quoted(self, name: str) -> str:
        """``name`` quoted for this engine (inner quote characters doubled)."""
        return self.quote + name.replace(self.quote, self.quote * 2) + self.quote

    def needs_quotes(self, stored: str) -> bool:
        """True when the stored name ``stored`` only resolves quoted on this engine."""
        if not REGULAR_IDENTIFIER.match(stored) or stored.lower() in self.reserved:
            return True
        if self.fold == "lower":
            return stored != stored.lower()
        if self.fold == "upper":
            return stored != stored.upper()
        return False

    def render(self, stored: str) -> str:
        """The stored name as a prompt or DDL should write it: unquoted wherever that resolves."""
        return self.quoted(stored) if self.needs_quotes(stored) else stored


#: Engine name -> identifier rules: each engine class declares its own ``identifiers``
#: (``engines/<name>.py``); this is a read-through view of those declarations.
IDENTIFIER_RULES: DeclaredTable = DeclaredTable(lambda cls: cls.identifiers)


def identifier_rules(engine: str) -> IdentifierRules:
    """Rules of ``engine``; ``KeyError`` naming the known engines otherwise."""
    try:
        return IDENTIFIER_RULES[engine]
    except KeyError:
        raise KeyError(f"no identifier rules for engine {engine!r}; known: {sorted(IDENTIFIER_RULES)}") from None


def replica_name_for(name: str, kind: str, source: str, target: str, siblings: list[str],
                     lower_case_table_names: int | None = None) -> tuple[str, str]:
    """The name the replica stores for source name ``name`` (see module doc).

    Args:
        name: the exact source name.
        kind: ``table`` or ``column``.
        source, target: engine names.
        siblings: every source name of the same kind in the same scope (tables of the
            database, columns of the table), ``name`` included.
        lower_case_table_names: the MySQL server setting when MySQL is source or target.

    Returns: ``(stored name, reason)`` where reason is ``kept`` or says why it changed/stayed.
    """
    src, tgt = identifier_rules(source), identifier_rules(target)
    src_ci = src.case_insensitive(kind, lower_case_table_names)
    if tgt.fold is None:
        return name, "kept (target keeps names as written)"
    if not src_ci:
        return name, "kept (source resolves it case-sensitively)"
    folded = name.lower() if tgt.fold == "lower" else name.upper()
    if folded == name:
        return name, "kept (already in the target's folded case)"
    if not REGULAR_IDENTIFIER.match(name):
        return name, "kept, quoted (not a regular identifier)"
    if folded.lower() in tgt.reserved:
        return name, "kept, quoted (reserved word in the target)"
    if sum((s.lower() if tgt.fold == "lower" else s.upper()) == folded for s in siblings) > 1:
        return name, "kept, quoted (folded name collides with another)"
    return folded, f"folded to {tgt.fold} case (unquoted references in any case resolve)"
