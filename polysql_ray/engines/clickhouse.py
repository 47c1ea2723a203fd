"""ClickHouse engine through chdb (a real ClickHouse, in-process): read-only replica databases.

Behaviour as data: :data:`SANDBOX_SETTINGS` (set on the connection), :data:`SEMANTIC_SETTINGS`
(documented choices that change results; they enter :meth:`ClickHouseEngine.settings_fingerprint`
and so every results-store cell key), :data:`ERROR_CODES` (ClickHouse error code -> status),
:data:`DENIED_FUNCTIONS` and :data:`DENIED_CLAUSES`.

Sandbox (ClickHouse docs "Settings: Permissions for Queries", "Restrictions on Query
Complexity"), all set in the *connection string*, never in query text:

* ``readonly=1``: no DDL/DML, no ``SET``, no setting *change* (code 164 READONLY), no table
  functions that read or write elsewhere (``file()``, ``url()``, ``s3()``, ``mysql()``,
  ``executable()``, ``Python()`` ...). ``mode=ro`` alone gives ``readonly=2``, which still allows
  ``file()``.
* **A query's own result-semantic settings** (``SELECT ... SETTINGS join_use_nulls = 1``, the
  ClickHouse-correct way to get standard outer-join NULLs on a stock server): the names of
  :data:`RESULT_SETTINGS` found in the statement's top-level ``SETTINGS`` clause
  (:func:`query_settings`) are applied to the *session* (a connection opened with them), so the
  clause changes nothing when the statement runs: ClickHouse checks only settings whose value a
  query changes ("Setting isn't checked if value has not changed", ``SettingsConstraints``),
  and every other ``SETTINGS`` entry is still refused by ``readonly=1``. This is what
  ``readonly=2`` plus profile constraints (``<constraints><max_execution_time><readonly/>``) would
  give on a server, without what ``readonly=2`` opens: chdb does load a users profile with
  constraints from ``--config-file`` (``<readonly/>`` constraints hold), but under ``readonly=2``
  the ``file()``/``url()`` table functions run, chdb has one user (no ``GRANT`` to withhold them),
  and it refuses ``<changeable_in_readonly/>`` (``settings_constraints_replace_previous`` is not
  enabled in clickhouse-local). So the engine itself still enforces that nothing but an
  allowlisted value changes; the client only chooses which allowlisted values to pre-apply.
* ``max_execution_time`` (= ``Limits.timeout_s``; ClickHouse cancels the query itself, code
  159 -> TIMEOUT), ``max_result_rows`` (= ``Limits.row_cap``) and ``max_result_bytes`` with
  ``result_overflow_mode=throw`` (code 396 -> TOO_LARGE), ``max_memory_usage``.
* Two holes ``readonly=1`` leaves open in chdb 4.x / ClickHouse 26.9, closed before execution:
  the *scalar* function ``file(path)`` reads any local file, and ``SELECT ... INTO OUTFILE``
  writes one (chdb implements the client-side clause in-process). :func:`sandbox_refusal`
  refuses both on sqlglot tokens (so a backquoted ``\\`file\\`(...)`` or a comment between
  ``INTO`` and ``OUTFILE`` is caught too) -> REJECTED.
* Exactly one SELECT/WITH statement (:mod:`~polysql_ray.engines.guard`).

One data path per process (chdb's embedded server is a process-wide singleton; a second
process cannot open a path another holds: ``Cannot lock file .../status``). So every process
(an execution actor, a replication task, the test process) gets its own private data path
(:func:`process_data_path`, a temp folder removed at exit) and holds every replica it uses as
one *database* under it. A replica's durable form, built and verified by
:mod:`polysql_ray.replication.clickhouse_writer`, is a folder (``location``) with
``replica.json`` (ClickHouse DDL per table, content id) and one Arrow IPC file per table;
:func:`load_replica` loads it into this process's server through a *writable* connection that
never sees model SQL. Model SQL runs on a separate ``readonly=1`` connection after a trusted
``USE <database>``.

Results: ClickHouse's own Arrow output (Decimal -> decimal128, Date32 -> date32, DateTime64 ->
timestamp with the session time zone UTC, Nullable -> nullable). A String column holding
bytes that are not UTF-8 (a copied BLOB) comes back as binary. Duplicate column names are
renamed by ClickHouse (``b.id``); comparison is positional.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import threading
from pathlib import Path

import pyarrow as pa

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import ConnectionBehaviour, Semantics, StructuralFacts
from polysql_ray.engines.embedded import EmbeddedEngine, Unusable
from polysql_ray.engines.identifiers import IdentifierRules
from polysql_ray.engines.scratch import owned_temp_dir, sweep_orphans
from polysql_ray.extras import require

S = ExecStatus

#: Connection settings of the model-SQL connection (plus the per-query limits).
SANDBOX_SETTINGS: dict[str, object] = {
    "readonly": 1,
    "result_overflow_mode": "throw",
    "timeout_overflow_mode": "throw",
    "session_timezone": "UTC",
}

#: Settings that change results; each is a documented choice recorded in every cell key
#: (``ClickHouseEngine.semantic_settings`` -> ``engine_fingerprint``). The defaults are a stock
#: ClickHouse server's (ClickHouse docs "Settings": ``join_use_nulls`` default 0: an outer join
#: fills the missing side with the column type's default, 0 / '' / 1970-01-01, not NULL), so a
#: prediction is judged as a ClickHouse user's server would run it; a query that wants standard
#: NULLs says ``SETTINGS join_use_nulls = 1`` itself (:data:`RESULT_SETTINGS`).
SEMANTIC_SETTINGS: dict[str, object] = {"join_use_nulls": 0}

#: Values a boolean setting may take in a SETTINGS clause (normalized to ``0``/``1``).
_BOOL = {"0": "0", "1": "1", "true": "1", "false": "0"}

#: Result-semantic settings a statement may set in its own top-level ``SETTINGS`` clause
#: (name -> accepted value -> the value applied to the session); every other setting stays
#: fixed (``readonly=1`` refuses the change, code 164 -> REJECTED). Each changes what a query
#: *means*, none how much it may consume or what it may reach (ClickHouse docs "Settings"):
#: ``join_use_nulls`` (outer-join NULLs), ``aggregate_functions_null_for_empty`` (``sum`` over no
#: rows is NULL, not 0), ``transform_null_in`` (NULL = NULL inside IN), ``cast_keep_nullable``,
#: ``group_by_use_nulls`` (ROLLUP/CUBE NULLs), ``union_default_mode`` / ``intersect_default_mode``
#: / ``except_default_mode`` (bare UNION / INTERSECT / EXCEPT), ``join_default_strictness``,
#: ``count_distinct_implementation`` (exact or approximate ``count(DISTINCT)``),
#: ``prefer_column_name_to_alias``, ``enable_positional_arguments`` (``ORDER BY 1``),
#: ``decimal_check_overflow``. A name the server does not list in ``system.settings`` is never
#: applied (:func:`known_result_settings`).
RESULT_SETTINGS: dict[str, dict[str, str]] = {
    "join_use_nulls": _BOOL,
    "aggregate_functions_null_for_empty": _BOOL,
    "transform_null_in": _BOOL,
    "cast_keep_nullable": _BOOL,
    "group_by_use_nulls": _BOOL,
    "prefer_column_name_to_alias": _BOOL,
    "enable_positional_arguments": _BOOL,
    "decimal_check_overflow": _BOOL,
    "union_default_mode": {v: v for v in ("ALL", "DISTINCT")},
    "intersect_default_mode": {v: v for v in ("ALL", "DISTINCT")},
    "except_default_mode": {v: v for v in ("ALL", "DISTINCT")},
    "join_default_strictness": {v: v for v in ("ALL", "ANY")},
    "count_distinct_implementation": {v: v for v in ("uniq", "uniqCombined", "uniqCombined64", "uniqHLL12",
                                                     "uniqExact")},
}

#: Most distinct (limits, query settings) reader connections kept per engine (oldest closed).
MAX_READERS = 16

#: Connection settings of the trusted loader connection.
LOADER_SETTINGS: dict[str, object] = {"session_timezone": "UTC"}

#: Table engine of every replica table: insertion order kept (no sort key), no keys enforced
#: (ClickHouse has no UNIQUE/FOREIGN KEY constraints; a MergeTree PRIMARY KEY is a sort key).
TABLE_ENGINE = "MergeTree ORDER BY tuple()"

#: ClickHouse error code (``Code: N.`` in the message; src/Common/ErrorCodes.cpp) -> status.
ERROR_CODES: dict[int, ExecStatus] = {
    62: S.SYNTAX,      # SYNTAX_ERROR
    46: S.SYNTAX,      # UNKNOWN_FUNCTION (the dialect lacks it)
    42: S.SYNTAX,      # NUMBER_OF_ARGUMENTS_DOESNT_MATCH
    1: S.SYNTAX,       # UNSUPPORTED_METHOD
    43: S.SYNTAX,      # ILLEGAL_TYPE_OF_ARGUMENT: no overload for these argument types (as
                       # PostgreSQL 42883 and DuckDB "No function matches": the dialect refuses)
    215: S.SYNTAX,     # NOT_AN_AGGREGATE (GROUP BY strictness)
    184: S.SYNTAX,     # ILLEGAL_AGGREGATION
    403: S.SYNTAX,     # INVALID_JOIN_ON_EXPRESSION
    179: S.SYNTAX,     # MULTIPLE_EXPRESSIONS_FOR_ALIAS
    47: S.SCHEMA,      # UNKNOWN_IDENTIFIER (column)
    60: S.SCHEMA,      # UNKNOWN_TABLE
    81: S.SCHEMA,      # UNKNOWN_DATABASE (qualified name of a missing database)
    16: S.SCHEMA,      # NO_SUCH_COLUMN_IN_TABLE
    10: S.SCHEMA,      # NOT_FOUND_COLUMN_IN_BLOCK
    207: S.SCHEMA,     # AMBIGUOUS_IDENTIFIER
    352: S.SCHEMA,     # AMBIGUOUS_COLUMN_NAME
    159: S.TIMEOUT,    # TIMEOUT_EXCEEDED (max_execution_time)
    394: S.TIMEOUT,    # QUERY_WAS_CANCELLED
    396: S.TOO_LARGE,  # TOO_MANY_ROWS_OR_BYTES (max_result_rows / max_result_bytes)
    158: S.TOO_LARGE,  # TOO_MANY_ROWS
    241: S.TOO_LARGE,  # MEMORY_LIMIT_EXCEEDED (max_memory_usage: the statement's memory ceiling)
    164: S.REJECTED,   # READONLY (DDL/DML, settings, file()/url()/... table functions)
    497: S.REJECTED,   # ACCESS_DENIED
    291: S.REJECTED,   # DATABASE_ACCESS_DENIED
    801: S.REJECTED,   # PY_OBJECT_NOT_FOUND (Python() table function)
    701: S.REJECTED,   # CLUSTER_DOESNT_EXIST (cluster()/urlCluster()/fileCluster())
    477: S.REJECTED,   # INVALID_USAGE_OF_INPUT (input())
    76: S.UNAVAILABLE,  # CANNOT_OPEN_FILE (data path locked by another process)
}

#: Everything else is a runtime error (comparison type errors 53/386 as DuckDB's "Cannot
#: compare", parse of values 6/27/38/41/72,
#: division 153, scalar subquery 125 ...).
DEFAULT_STATUS = S.RUNTIME

#: Scalar functions refused before execution (``readonly=1`` does not stop them): local file
#: reads and host/server facts. Compared lower-case. These are the *seeds*: the refused set is
#: :func:`derive_denied` over the server's ``system.functions`` (every alias of a seed, e.g.
#: ``FQDN`` / ``fullHostName``, ``hostname`` / ``hostName``) and ``system.table_functions``.
DENIED_FUNCTIONS: frozenset[str] = frozenset({
    "file", "filesystemavailable", "filesystemcapacity", "filesystemunreserved",
    "getserversetting", "getmacro", "getoskernelversion", "hostname", "fullhostname", "fqdn",
    "displayname", "serveruuid", "tcpport", "getclienthttpheader", "getserverport",
    "hascolumnintable", "joinget", "joingetornull",  # read tables named by a string
    "sqlite",  # table function: refused by readonly=1, but opening it first creates an empty file
})

#: Prefixes of scalar functions that read other objects named by a string (dictionaries).
DENIED_FUNCTION_PREFIXES: tuple[str, ...] = ("dictget", "dicthas", "dictisin")

#: Table functions a statement may use (lower case): they generate rows and read nothing. Every
#: other table function of the server (``system.table_functions``: ``merge``, ``cluster``,
#: ``remote``, ``loop``, ``mergeTreeIndex``, ``dictionary``, ``url``, ``s3`` ...) is refused:
#: several read *other databases* under ``readonly=1`` (``merge(REGEXP('.*'), 't')``).
ALLOWED_TABLE_FUNCTIONS: frozenset[str] = frozenset({
    "numbers", "numbers_mt", "zeros", "zeros_mt", "values", "null", "generaterandom",
    "generateseries", "generate_series", "primes", "view", "format"})

#: Databases that list every copy (refused as qualifiers; ClickHouse has both spellings).
CATALOG_DATABASES: frozenset[str] = frozenset({"system", "information_schema", "default", "_local"})

#: Name of a replica database in chdb (``load_replica``): ``r_`` + 24 hex of the content id.
CHDB_REPLICA_PATTERN = r"r_[0-9a-f]{24}"

#: Word sequences (upper case) refused anywhere in the statement: INTO OUTFILE writes a file.
DENIED_CLAUSES: tuple[tuple[str, ...], ...] = (("INTO", "OUTFILE"),)

_CODE = re.compile(r"Code:\s*(\d+)")
_DENIED_TEXT = re.compile(r"(?i)\bINTO\s+OUTFILE\b")

def classify_error(message: str) -> ExecStatus:
    """Status of a ClickHouse error from the ``Code: N`` in its message (:data:`ERROR_CODES`)."""
    m = _CODE.search(message or "")
    return ERROR_CODES.get(int(m.group(1)), DEFAULT_STATUS) if m else DEFAULT_STATUS


def derive_denied(functions: list[tuple[str, str]], table_functions: list[str]) -> frozenset[str]:
    """The refused call names (lower case) from a server's catalog: :data:`DENIED_FUNCTIONS`
    closed under aliases (``system.functions`` rows ``(name, alias_to)``: a name is refused
    when it or what it aliases is), names starting with :data:`DENIED_FUNCTION_PREFIXES`, and
    every table function (``system.table_functions``) not in :data:`ALLOWED_TABLE_FUNCTIONS`."""
    denied = set(DENIED_FUNCTIONS)
    pairs = [(n.lower(), (a or "").lower()) for n, a in functions]
    while True:
        grown = {x for n, a in pairs if n in denied or (a and a in denied) for x in (n, a) if x}
        if grown <= denied:
            break
        denied |= grown
    denied |= {n for n, _ in pairs if n.startswith(DENIED_FUNCTION_PREFIXES)}
    denied |= {t.lower() for t in table_functions} - ALLOWED_TABLE_FUNCTIONS
    return frozenset(denied)


def catalog_denied(query) -> frozenset[str]:
    """:func:`derive_denied` from a server; ``query(sql) -> list of row tuples``. Falls back to
    :data:`DENIED_FUNCTIONS` when the catalog cannot be read."""
    try:
        return derive_denied([(r[0], r[1]) for r in query("SELECT name, alias_to FROM system.functions")],
                             [r[0] for r in query("SELECT name FROM system.table_functions")])
    except Exception:
        return DENIED_FUNCTIONS


def sandbox_refusal(sql: str, denied: frozenset[str] = DENIED_FUNCTIONS) -> str | None:
    """Why ``sql`` must not reach ClickHouse (a call of a ``denied`` function or table function,
    or a denied clause), else None.

    Checked on sqlglot's ClickHouse tokens (comments and quoting cannot hide a call); when
    the tokenizer fails, on the raw text (conservative)."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    from polysql_ray.engines.guard import called_function

    try:
        toks = Dialect.get_or_raise("clickhouse").tokenize(sql)
    except Exception:
        m = _DENIED_TEXT.search(sql)
        name = called_function(sql, "clickhouse", denied)
        return (f"{m.group(0).strip()!r} is not allowed in the sandbox" if m else
                f"function {name}() is not allowed in the sandbox" if name else None)
    name = called_function(sql, "clickhouse", denied)
    if name is not None:
        return (f"function {name}() is not allowed in the sandbox (reads files, other databases "
                f"or host facts)")
    for i, tok in enumerate(toks):
        for clause in DENIED_CLAUSES:
            words = [t.text.upper() for t in toks[i:i + len(clause)] if t.token_type != TokenType.STRING]
            if tuple(words) == clause:
                return f"{' '.join(clause)} is not allowed in the sandbox (writes a file)"
    return None


def scope_refusal(sql: str, own_database: str, replica_pattern: str) -> str | None:
    """Why ``sql`` names a database other than its copy's (another copy, another run's replica,
    ``system`` / ``INFORMATION_SCHEMA``), else None (``guard.foreign_name``)."""
    from polysql_ray.engines.guard import foreign_name

    return foreign_name(sql, "clickhouse", own_database, replica_pattern, CATALOG_DATABASES)


def query_settings(sql: str, allowed: frozenset[str] | None = None) -> dict[str, str]:
    """The :data:`RESULT_SETTINGS` the statement ``sql`` sets in a ``SETTINGS`` clause at its top
    level (outside parentheses), as the session values to pre-apply: ``{name: value}`` with
    values normalized (``true`` -> ``1``). Names outside the allowlist (or ``allowed``, the subset
    the server knows), values it does not accept, and clauses inside subqueries are left out: the
    engine's ``readonly=1`` then refuses them if they would change anything. Read on sqlglot's
    ClickHouse tokens (comments and string contents cannot fake a clause); ``{}`` when the
    tokenizer fails (the engine decides)."""
    from sqlglot.dialects.dialect import Dialect
    from sqlglot.tokens import TokenType

    try:
        toks = Dialect.get_or_raise("clickhouse").tokenize(sql)
    except Exception:
        return {}
    names = RESULT_SETTINGS.keys() if allowed is None else (RESULT_SETTINGS.keys() & allowed)
    out: dict[str, str] = {}
    depth, i = 0, 0
    while i < len(toks):
        t = toks[i]
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and t.token_type != TokenType.STRING and t.text.upper() == "SETTINGS":
            i += 1
            while i + 2 < len(toks) and toks[i + 1].token_type == TokenType.EQ:
                name, text = toks[i].text, toks[i + 2].text
                table = RESULT_SETTINGS.get(name) if name in names else None
                applied = None if table is None else table.get(text.lower() if table is _BOOL else text)
                if applied is not None:
                    out[name] = applied
                i += 3
                if i < len(toks) and toks[i].token_type == TokenType.COMMA:
                    i += 1
                    continue
                break
            continue
        i += 1
    return out


def known_result_settings(query) -> frozenset[str]:
    """The :data:`RESULT_SETTINGS` names the server lists in ``system.settings``; ``query(sql)``
    -> rows. Empty (nothing pre-applied, every SETTINGS change refused) when unreadable."""
    try:
        names = ", ".join(_literal(n) for n in sorted(RESULT_SETTINGS))
        return frozenset(r[0] for r in query(f"SELECT name FROM system.settings WHERE name IN ({names})"))
    except Exception:
        return frozenset()


#: The server config chdb starts with: none of its own. Without ``config-file`` chdb (like
#: clickhouse-local) reads ``./config.xml`` from the process's current directory when present,
#: so a worker started in a folder holding one ran under another server config (its display
#: name, paths, profiles). Written once into the process's private data path.
EMPTY_CONFIG = "<clickhouse></clickhouse>\n"


def connection_string(path: str, settings: dict[str, object]) -> str:
    """``file:<path>?config-file=<path>/polysql-config.xml&k=v&...`` for ``chdb.connect``
    (settings in the URL apply to the session; the config file is :data:`EMPTY_CONFIG`, written
    here when missing, so no ``./config.xml`` of the current directory is read)."""
    config = os.path.join(path, "polysql-config.xml")
    if not os.path.exists(config):
        with open(config, "w") as fh:
            fh.write(EMPTY_CONFIG)
    return f"file:{path}?config-file={config}&" + "&".join(f"{k}={v}" for k, v in settings.items())


# ---------------------------------------------------------------- one data path per process

_PROCESS: dict[str, object] = {"path": None, "loader": None, "loaded": {}}
_PROCESS_LOCK = threading.RLock()


def process_data_path(root: str | None = None) -> str:
    """This process's private chdb data path (created once, removed at exit).

    Args:
        root: parent folder (default: the system temp folder). Only the first call's root
            counts: chdb allows one data path per process.
    """
    with _PROCESS_LOCK:
        if _PROCESS["path"] is None:
            _PROCESS["path"] = owned_temp_dir("chdb", root)
        return str(_PROCESS["path"])


def remove_orphaned_paths(root: str | None = None) -> list[str]:
    """Delete ``polysql-chdb-<pid>-*`` data paths under ``root`` whose process is gone (a Ray
    worker killed at shutdown never runs its exit hook); :func:`polysql_ray.engines.scratch.sweep_orphans`.
    Returns the paths removed."""
    return sweep_orphans("chdb", root)


def process_result_settings() -> frozenset[str]:
    """:func:`known_result_settings` of this process's chdb (once per process)."""
    with _PROCESS_LOCK:
        if _PROCESS.get("result_settings") is None:
            con = _loader()
            _PROCESS["result_settings"] = known_result_settings(
                lambda q: [tuple(r.split("\t")) for r in con.query(q, "TSV").bytes().decode().splitlines()])
        return _PROCESS["result_settings"]


def process_denied() -> frozenset[str]:
    """:func:`derive_denied` from this process's chdb catalog (once per process)."""
    with _PROCESS_LOCK:
        if _PROCESS.get("denied") is None:
            con = _loader()

            def query(q):
                return [tuple(r.split("\t")) for r in con.query(q, "TSV").bytes().decode().splitlines()]

            _PROCESS["denied"] = catalog_denied(query)
        return _PROCESS["denied"]


def _loader():
    """The trusted writable connection of this process (never runs model SQL)."""
    chdb = require("chdb", "the clickhouse engine")

    with _PROCESS_LOCK:
        if _PROCESS["loader"] is None:
            _PROCESS["loader"] = chdb.connect(connection_string(process_data_path(), LOADER_SETTINGS))
        return _PROCESS["loader"]


def quote(name: str) -> str:
    """Backquote a ClickHouse identifier (backslash and backquote escaped)."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def read_replica_spec(location: str) -> dict:
    """The ``replica.json`` of a replica folder. Raises FileNotFoundError / ValueError."""
    return json.loads((Path(location) / "replica.json").read_text())


def replica_database(spec: dict) -> str:
    """The chdb database of the replica with this ``replica.json``: ``r_<24 hex of content id>``
    (:data:`CHDB_REPLICA_PATTERN`)."""
    return "r_" + spec["content_id"][:24]


def load_replica(location: str, spec: dict | None = None) -> str:
    """Load the replica folder ``location`` into this process's server; returns its database.

    Idempotent per content (the database is ``r_<content id>``, so a rebuilt replica loads
    anew). Row counts are checked against ``replica.json``. Raises RuntimeError on failure.
    """
    spec = spec or read_replica_spec(location)
    db = replica_database(spec)
    with _PROCESS_LOCK:
        if db in _PROCESS["loaded"]:
            return db
        con = _loader()
        con.query(f"DROP DATABASE IF EXISTS {quote(db)}")
        con.query(f"CREATE DATABASE {quote(db)}")
        try:
            for t in spec["tables"]:
                cols = ", ".join(f"{quote(c)} {ty}" for c, ty in t["columns"])
                target = f"{quote(db)}.{quote(t['name'])}"
                con.query(f"CREATE TABLE {target} ({cols}) ENGINE = {spec['table_engine']}")
                data = str(Path(location) / t["file"])
                con.query(f"INSERT INTO {target} SELECT * FROM file({_literal(data)}, 'Arrow')")
                n = int(con.query(f"SELECT count() FROM {target}", "CSV").bytes().decode().strip())
                if n != t["rows"]:
                    raise RuntimeError(f"table {t['name']!r}: loaded {n} rows, replica.json says {t['rows']}")
        except BaseException:
            con.query(f"DROP DATABASE IF EXISTS {quote(db)}")
            raise
        _PROCESS["loaded"][db] = location
        return db


def drop_loaded(db: str) -> None:
    """Drop a database :func:`load_replica` created in this process (no error when absent)."""
    with _PROCESS_LOCK:
        if _PROCESS["loader"] is not None:
            _PROCESS["loader"].query(f"DROP DATABASE IF EXISTS {quote(db)}")
        _PROCESS["loaded"].pop(db, None)


def arrow_result(payload: bytes) -> pa.Table:
    """Decode ClickHouse ``Arrow`` output; String columns that are not valid UTF-8 (bytes of
    a copied BLOB) become binary so no value is lost or mis-decoded."""
    table = pa.ipc.open_file(pa.BufferReader(payload)).read_all()
    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
            try:
                table.column(i).validate(full=True)
            except pa.ArrowInvalid:
                binary = pa.large_binary() if pa.types.is_large_string(field.type) else pa.binary()
                table = table.set_column(i, pa.field(field.name, binary, field.nullable),
                                         table.column(i).cast(binary))
    return table


class ClickHouseEngine(EmbeddedEngine):
    """:class:`~polysql_ray.engines.base.Engine` for ClickHouse replicas in chdb.

    Args:
        join_use_nulls: see :data:`SEMANTIC_SETTINGS` (default 0, a stock server's; 1: standard
            SQL outer-join NULLs for every statement). A statement may set it, and the other
            :data:`RESULT_SETTINGS`, in its own ``SETTINGS`` clause.
        max_memory_usage: bytes one query may use (ClickHouse setting; over it -> TOO_LARGE).
        max_threads: ClickHouse threads per query (1: parallelism comes from actors).
        host: a ClickHouse server; when set, statements run there through clickhouse-connect
            (:mod:`~polysql_ray.engines.clickhouse_server`, which takes ``server`` settings:
            port, user, password_env, database ...) instead of in chdb.

    ``location`` is a replica folder (``Replica.location``).
    """

    name = "clickhouse"
    dialect = "clickhouse"
    settings = {"join_use_nulls": 0, "max_memory_usage": 2_000_000_000, "max_threads": 1}
    semantic_settings = ("join_use_nulls",)
    # ClickHouse "Syntax: Identifiers": case-sensitive, kept as written
    identifiers = IdentifierRules(fold=None, tables_ci=False, columns_ci=False)
    # Facts of a stock server (this engine's defaults; a statement's own SETTINGS may change some)
    semantics = Semantics(
        integer_division=False,  # "Arithmetic Functions: divide": the result type is always Float64
                                 # (intDiv is integer division)
        nulls_asc="last", nulls_desc="last",  # "ORDER BY Clause": by default (NULLS LAST) values come
                                              # first, then NaN, then NULL, in either direction
        ci_equals=False,         # "String Functions"/"Comparison Functions": strings compare bytewise
        ci_like=False,           # "String Search Functions: like": case-sensitive (ilike is not)
        empty_sum_null=False,    # "Settings: aggregate_functions_null_for_empty" (default 0): sum, min,
                                 # max of no rows return the type's default 0 (avg returns nan)
        string_number="literal",  # "Type Conversion": a string literal is converted to the column type;
                                  # a String column against a number has no common type (code 386)
    )
    structural = StructuralFacts()  # nothing proven across it yet
    type_map = {"INTEGER": "Int32", "SMALLINT": "Int16", "BIGINT": "Int64", "DOUBLE": "Float64",
                "VARCHAR": "String", "BLOB": "String", "DECIMAL": "Decimal", "BOOLEAN": "Bool",
                "DATE": "Date32", "TIMESTAMP": "DateTime64(6)"}
    varchar_with_length = "String"
    writer = "polysql_ray.replication.clickhouse_writer:ClickHouseWriter"
    reader = None
    sandbox = SANDBOX_SETTINGS  # on the connection, never in query text (+ per-query limits)
    error_table = ERROR_CODES
    denied_functions = DENIED_FUNCTIONS
    connection = ConnectionBehaviour("per-limits")
    prompt_rules = "clickhouse.yaml"
    driver_errors = (Exception,)  # chdb raises plain exceptions whose message has "Code: N"
    product = ("ClickHouse (chdb, in-process)", "chdb")
    #: ``module:Class of the server path taken when ``host`` is set (it builds on this module,
    #: so it is named here, not imported).
    server_engine = "polysql_ray.engines.clickhouse_server:ClickHouseServerEngine"

    def __init__(self, join_use_nulls: int = 0, max_memory_usage: int = 2_000_000_000,
                 max_threads: int = 1, host: str | None = None, **server):
        super().__init__()
        self.semantic = {**SEMANTIC_SETTINGS, "join_use_nulls": int(join_use_nulls)}
        self.resources = {"max_memory_usage": int(max_memory_usage), "max_threads": int(max_threads)}
        self._readers: dict[tuple, object] = {}
        self._server = None
        if host:  # a ClickHouse server through clickhouse-connect instead of chdb
            module, _, cls = self.server_engine.partition(":")
            server_engine = getattr(importlib.import_module(module), cls)
            self._server = server_engine({"host": host, **server}, {**self.semantic, **self.resources})
        elif server:
            raise TypeError(f"unexpected clickhouse settings {sorted(server)} (server settings need host)")

    def identity(self) -> dict:
        """chdb's version, or the server's (``ClickHouseServerEngine.identity``) on the server path."""
        if self._server is not None:
            return self._server.identity()
        return {**super().identity(), "settings": {k: str(v) for k, v in self.semantic.items()}}

    def _reader(self, limits: Limits, requested: dict[str, str] | None = None):
        """The ``readonly=1`` connection for ``limits`` whose session already holds the
        statement's ``requested`` result settings (:func:`query_settings`); at most
        :data:`MAX_READERS` are kept."""
        chdb = require("chdb", "the clickhouse engine")

        requested = requested or {}
        key = (limits.timeout_s, limits.row_cap, limits.max_bytes, tuple(sorted(requested.items())))
        con = self._readers.pop(key, None)
        if con is None:
            settings = {**SANDBOX_SETTINGS, **self.semantic, **requested, **self.resources,
                        "max_execution_time": f"{limits.timeout_s:g}",
                        "max_result_rows": limits.row_cap, "max_result_bytes": limits.max_bytes}
            con = chdb.connect(connection_string(process_data_path(), settings))
            while len(self._readers) >= MAX_READERS:
                old = self._readers.pop(next(iter(self._readers)))
                try:
                    old.close()
                except Exception:
                    pass
        self._readers[key] = con  # most recently used last
        return con

    def execute(self, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """The server path when ``host`` is set (:mod:`.clickhouse_server`), else the shared
        embedded path over chdb. Never raises."""
        if self._server is not None:
            return self._server.execute(location, sql, limits)
        return super().execute(location, sql, limits)

    def missing(self, sql: str, location: str) -> ExecutionResult | None:
        """REJECTED for a denied function/clause (:func:`sandbox_refusal` with the derived
        :func:`process_denied`) or a name of another database (:func:`scope_refusal`: every
        copy this process loaded shares one chdb server), UNAVAILABLE when ``location`` holds
        no replica."""
        why = sandbox_refusal(sql, process_denied())
        if why is not None:
            return ExecutionResult.failure(S.REJECTED, why)
        try:
            spec = read_replica_spec(location)
        except (OSError, ValueError) as e:
            return ExecutionResult.failure(S.UNAVAILABLE, f"replica not found: {location} ({e})")
        why = scope_refusal(sql, replica_database(spec), CHDB_REPLICA_PATTERN)
        if why is not None:
            return ExecutionResult.failure(S.REJECTED, why)
        return None

    def open(self, location: str, limits: Limits):
        """Load the replica into this process's chdb (once); the handle is its database."""
        return load_replica(location)

    def run(self, db, sql: str, limits: Limits) -> pa.Table:
        """Run on the ``readonly=1`` connection for ``limits`` and the statement's own result
        settings (row/byte caps and timeout are its settings), after a trusted ``USE`` of the
        replica's database (model SQL can never run USE: guard); the result must be Arrow."""
        con = self._reader(limits, query_settings(sql, process_result_settings()))
        con.query(f"USE {quote(db)}")
        payload = con.query(sql, "Arrow").bytes()
        try:
            return arrow_result(payload)
        except Exception as e:  # a FORMAT clause chose another output format
            raise Unusable(S.REJECTED, f"result is not Arrow ({type(e).__name__}: {e}); the sandbox "
                           f"returns results as Arrow only (no FORMAT clause)") from e

    def classify(self, exc: BaseException, con) -> ExecStatus:
        """:func:`classify_error` on the message's ``Code: N``."""
        return classify_error(str(exc))

    def close(self) -> None:
        """Close the model-SQL connections (loaded databases stay until the process exits)."""
        if self._server is not None:
            self._server.close()
        with self._lock:
            for con in self._readers.values():
                try:
                    con.close()
                except Exception:
                    pass
            self._readers.clear()

def content_id(files: dict[str, str], tables: list[dict], table_engine: str) -> str:
    """sha256 over the DDL and the data files' sha256 (names a loaded database)."""
    h = hashlib.sha256(json.dumps([tables, table_engine, sorted(files.items())], sort_keys=True).encode())
    return h.hexdigest()
