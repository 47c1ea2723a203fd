"""Format artefacts: failures that come from how a prediction is *written*, not from its logic.

Two flags, counted per cell beside EX (never changing a verdict) so that a reader can tell a
model's tokenisation habits from dialect errors:

* ``fn_space`` - a space between a function name and its parenthesis (``count ( * )``, common
  in models trained on tokenised Spider SQL) where the server refuses it: MySQL/MariaDB parse
  the built-in functions of :data:`polysql_ray.engines.mysql.SPACE_SENSITIVE_FUNCTIONS` as
  functions only when the name touches the parenthesis, unless ``sql_mode`` has
  ``IGNORE_SPACE`` (MySQL 8.0 Reference 11.2.5 "Function Name Parsing and Resolution"); with a
  space, ``COUNT (*)`` is a syntax error (1064) or a call of a stored routine that does not
  exist (1305/1370). Counted for a failed execution on a dialect whose recorded server
  ``sql_mode`` lacks ``IGNORE_SPACE`` (``statistics.provenance``), when the predicted SQL has
  such a spaced call.
* ``identifier_case`` - a failed execution whose error names an identifier that exists in the
  source database only in another case (``Singer`` for table ``singer``): the target resolves
  that kind of name case-sensitively (ClickHouse always; MySQL tables with
  ``lower_case_table_names=0``) while the source (SQLite) does not. Names come from the source
  database's catalog (``comparison.equivalence.read_source_schema``), the identifiers from the
  quoted words of the engine's error message.
"""
from __future__ import annotations

import re
from collections import defaultdict

#: Flag name -> what it means (legend of the snapshot's columns).
FLAGS = {
    "fn_space": "failed with a space between a function name and '(' that the server's sql_mode refuses "
                "(no IGNORE_SPACE): count ( * )",
    "identifier_case": "failed on a name that exists in the source only in another case (Singer vs singer)",
}

_QUOTED = re.compile(r"`([^`]{1,128})`|'([^']{1,128})'|\"([^\"]{1,128})\"")

#: Where an engine's message starts quoting the statement itself (ClickHouse: ``In scope ...``,
#: ``In query ...``; MariaDB: ``near '...'``): words after it are the SQL, not the names it missed.
_ECHO = re.compile(r"\b(?:In scope|In query|near ')")


def spaced_call(sql: str, functions: frozenset[str]) -> bool:
    """True when ``sql`` calls one of ``functions`` with whitespace before its ``(``."""
    for m in re.finditer(r"\b([A-Za-z_]+)\s+\(", sql or ""):
        if m.group(1).lower() in functions:
            return True
    return False


def case_only_names(error: str, names: set[str]) -> list[str]:
    """The identifiers quoted in ``error`` (dotted parts split) that are not among ``names``
    as written but are in another case."""
    lower = {n.lower() for n in names}
    out = []
    error = _ECHO.split(error or "", 1)[0]
    for m in _QUOTED.finditer(error):
        for part in (m.group(1) or m.group(2) or m.group(3)).split("."):
            if part and part not in names and part.lower() in lower:
                out.append(part)
    return out


def _ignores_space(provenance: list[dict]) -> dict[str, bool | None]:
    """``{dialect: True/False}`` whether the recorded server sql_mode has IGNORE_SPACE (None:
    the dialect's engine has no such mode)."""
    out: dict[str, bool | None] = {}
    for p in provenance:
        if str(p.get("product")) not in ("MariaDB", "MySQL"):
            out.setdefault(str(p["dialect"]), None)
            continue
        mode = re.search(r"(?:^|; )sql_mode=([^;]*)", str(p.get("settings") or ""))
        has = bool(mode) and "IGNORE_SPACE" in mode.group(1).upper().split(",")
        out[str(p["dialect"])] = out.get(str(p["dialect"])) or has
    return out


def _case_sensitive(provenance: list[dict]) -> dict[str, bool]:
    """``{dialect: True}`` where the dialect's engine resolves table or column names
    case-sensitively (``IdentifierRules``, MySQL tables by the recorded
    ``lower_case_table_names``): only there can a name fail on its case."""
    from polysql_ray.engines.registry import engine_spec

    out: dict[str, bool] = {}
    for p in provenance:
        try:
            rules = engine_spec(str(p["engine"])).identifiers
        except KeyError:
            continue
        lctn = re.search(r"(?:^|; )lower_case_table_names=(\d+)", str(p.get("settings") or ""))
        ci = rules is not None and rules.case_insensitive("table", int(lctn.group(1)) if lctn else 1) \
            and rules.case_insensitive("column")
        out[str(p["dialect"])] = out.get(str(p["dialect"]), False) or not ci
    return out


def format_artefacts(con, results_dir, provenance: list[dict]) -> list[dict]:
    """Counts of :data:`FLAGS` per cell (model, dataset, dialect, instruction_level) over the
    loaded ``scores`` table's failed executions (gold errors and unavailable rows left out).

    Returns:
        dicts sorted by cell with ``model, dataset, dialect, instruction_level, failures``
        (counted rows that failed) and one count per flag; only cells with failures.
    """
    from polysql_ray.engines.mysql import SPACE_SENSITIVE_FUNCTIONS
    from polysql_ray.statistics.load import SCORES_TABLE, dataset_index

    rows = con.execute(f"""
        SELECT model, dataset, dialect, instruction_level, db_id, coalesce(pred_sql, ''),
               coalesce(pred_error, ''), coalesce(pred_status, '')
        FROM {SCORES_TABLE} WHERE NOT excluded AND NOT is_pass""").fetchall()
    if not rows:
        return []
    no_space = {d: v is False for d, v in _ignores_space(provenance).items()}
    case_sensitive = _case_sensitive(provenance)
    sources: dict | None = None
    catalog: dict[tuple, set[str]] = {}

    def names(dataset: str, db_id: str) -> set[str]:
        nonlocal sources
        from polysql_ray.comparison.equivalence import read_source_schema

        if sources is None:
            sources = dataset_index(results_dir)[1]
        key = (dataset, db_id)
        if key not in catalog:
            src = sources.get(key)
            schema = (read_source_schema(*src) or {}) if src else {}
            catalog[key] = set(schema) | {c for cols in schema.values() for c in cols}
        return catalog[key]

    counts: dict[tuple, dict] = defaultdict(lambda: {"failures": 0, **{f: 0 for f in FLAGS}})
    for model, dataset, dialect, level, db_id, sql, error, status in rows:
        c = counts[(model, dataset, dialect, level)]
        c["failures"] += 1
        if status in ("", "ok", "skipped"):
            continue  # executed (a wrong result) or not executed: no format failure
        if no_space.get(dialect) and spaced_call(sql, SPACE_SENSITIVE_FUNCTIONS):
            c["fn_space"] += 1
        if error and case_sensitive.get(dialect) and case_only_names(error, names(dataset, db_id)):
            c["identifier_case"] += 1
    return [{"model": k[0], "dataset": k[1], "dialect": k[2], "instruction_level": k[3], **v}
            for k, v in sorted(counts.items())]
