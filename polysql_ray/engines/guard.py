"""Statement guard: "exactly one SELECT/WITH statement", without rejecting valid SQL.

Layering (README "Untrusted SQL"; the engine's own protections are authoritative):

1. **This guard** tokenizes with sqlglot's tokenizer for the engine's dialect. Tokenizing is
   far more forgiving than parsing, so SQL that sqlglot cannot *parse* (engine-specific
   syntax) still passes. It splits on top-level ``;`` tokens, ignores empty statements
   (predictions often end with ``;`` or ``;;``) and requires the first token of the single
   remaining statement to be in :data:`ALLOWED_FIRST_TOKENS` (SELECT, WITH, ``(``, VALUES;
   plus :data:`DIALECT_FIRST_TOKENS`, e.g. DuckDB's FROM-first ``FROM t SELECT x``).
   Verdicts: ``pass``, ``reject`` (-> ``ExecStatus.REJECTED`` with the message) when the
   first token is any *other keyword* (DELETE, ATTACH, COPY, PRAGMA, a command ...),
   ``empty`` (-> ``ExecStatus.EMPTY``), or ``defer`` when the tokenizer itself fails (e.g. an
   unterminated string) or the first word is not a keyword sqlglot knows (a typo such as
   ``selec``, or an engine-only command such as ``REINDEX``): the statement then goes to
   the engine, which reports its own syntax error (SYNTAX) or refuses it (REJECTED).
2. **The engine** enforces it again with its own machinery: SQLite's ``execute`` runs one
   statement only, ``PRAGMA query_only`` and an authorizer allowing reads only; DuckDB's
   ``extract_statements`` statement types, a read-only connection and
   ``enable_external_access=false``; servers: a read-only role/transaction.

The guard is a fast, dialect-aware first filter that gives clear messages; it never is the
only protection.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import TokenType

#: Token types a single read-only statement may start with.
ALLOWED_FIRST_TOKENS: frozenset = frozenset(
    {TokenType.SELECT, TokenType.WITH, TokenType.L_PAREN, TokenType.VALUES})

#: Extra allowed first tokens per dialect (read-only statement forms of that dialect).
DIALECT_FIRST_TOKENS: dict[str, frozenset] = {
    "duckdb": frozenset({TokenType.FROM}),
}

#: First-token types that are not keywords (identifiers / unknown words): deferred.
DEFER_FIRST_TOKENS: frozenset = frozenset({TokenType.VAR})

#: First words sqlglot does not know as keywords but the dialect runs as non-SELECT statements
#: (upper case): rejected instead of deferred (MariaDB would run ``DO``, ``HANDLER`` ...).
DIALECT_REJECT_WORDS: dict[str, frozenset] = {
    "mysql": frozenset({"DO", "HANDLER", "CHECKSUM", "BINLOG", "XA", "SIGNAL", "RESIGNAL", "GET",
                        "PURGE", "FLUSH", "RESET", "SHUTDOWN", "INSTALL", "UNINSTALL", "HELP",
                        "BACKUP", "LOCK", "UNLOCK", "RENAME", "OPTIMIZE", "REPAIR", "ANALYZE",
                        "CACHE", "LOAD", "CALL", "KILL", "PREPARE", "EXECUTE", "DEALLOCATE"}),
}

#: Text the dialect's server *executes* although sqlglot reads it as a comment: MariaDB/MySQL
#: executable comments ``/*! ... */``, ``/*!50110 ... */``, ``/*M! ... */``. Refused outright,
#: so what the guard tokenizes is what the server runs.
EXECUTABLE_COMMENT: dict[str, re.Pattern] = {
    "mysql": re.compile(r"/\*\s*M?!", re.IGNORECASE),
}


#: Deepest parenthesis nesting accepted. Deeper SQL is refused (``rejected``) before any parser
#: sees it: the engines' own parsers stop far below (SQLite: "parser stack overflow" near 100
#: levels; SQLITE_MAX_EXPR_DEPTH 1000) and Python-side analysis (sqlglot, the structural check,
#: the gold shape) recurses once per level, so one verdict path for every engine, the sweep and
#: ``score_sql`` alike, instead of a ``RecursionError``.
MAX_NESTING = 200


@dataclass(frozen=True)
class GuardVerdict:
    """Outcome of :func:`check_statement`.

    Attributes:
        action: ``pass`` | ``reject`` | ``empty`` | ``defer``.
        message: why (for ``reject``/``empty``/``defer``), else "".
        statements: number of non-empty top-level statements found (0 when deferred).
    """

    action: str
    message: str = ""
    statements: int = 0


def check_statement(sql: str | None, dialect: str) -> GuardVerdict:
    """Decide whether ``sql`` is exactly one SELECT/WITH statement in ``dialect``.

    Args:
        sql: untrusted SQL text (None/blank -> ``empty``).
        dialect: sqlglot dialect name (``sqlite``, ``duckdb``, ``postgres`` ...).

    Returns: a :class:`GuardVerdict`; never raises.
    """
    if sql is None or not sql.strip() or not sql.strip().strip(";").strip():
        return GuardVerdict("empty", "no SQL to run")
    bad = malformed_text(sql)
    if bad is not None:
        return GuardVerdict("reject", bad)
    try:
        tokens = Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception as e:  # tokenizer failure: defer to the engine's own checks
        return GuardVerdict("defer", f"tokenizer failed ({type(e).__name__}); deferred to engine")
    statements: list[list] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(tok)
    statements = [s for s in statements if s]
    pattern = EXECUTABLE_COMMENT.get(dialect)
    if pattern is not None and pattern.search(sql):
        # checked before "empty": `/*!50000 SELECT 1 */` is only a comment to the tokenizer, but
        # the server runs it, so it is not "no SQL" (a missing prediction) but a refused statement
        return GuardVerdict("reject", "executable comment (/*! ... */ or /*M! ... */): the server "
                                      "would run text the statement guard cannot see", len(statements))
    if not statements:
        return GuardVerdict("empty", "no SQL to run (only comments/semicolons)")
    depth = nesting_depth(tokens)
    if depth > MAX_NESTING:
        return GuardVerdict("reject", f"parentheses nested {depth} levels deep; at most {MAX_NESTING} "
                                      f"are accepted", len(statements))
    if len(statements) > 1:
        return GuardVerdict("reject", f"{len(statements)} statements; exactly one SELECT/WITH "
                                      f"statement is allowed", len(statements))
    first = statements[0][0]
    if first.text.upper() in DIALECT_REJECT_WORDS.get(dialect, frozenset()):
        return GuardVerdict("reject", f"statement starts with {first.text!r}; only SELECT/WITH "
                                      f"statements are allowed", 1)
    if first.token_type in ALLOWED_FIRST_TOKENS or \
            first.token_type in DIALECT_FIRST_TOKENS.get(dialect, frozenset()):
        return GuardVerdict("pass", "", 1)
    if first.token_type in DEFER_FIRST_TOKENS:
        return GuardVerdict("defer", f"statement starts with unknown word {first.text!r}; "
                                     f"deferred to engine", 1)
    return GuardVerdict("reject", f"statement starts with {first.text!r}; only SELECT/WITH "
                                  f"statements are allowed", 1)


#: Dialects whose tokenizer makes :func:`runs_unrefused` exact (:func:`_plain_select_proven`).
_PLAIN_SELECT: dict[str, bool] = {}


def _plain_select_proven(dialect: str) -> bool:
    """Whether the facts :func:`runs_unrefused` rests on hold for ``dialect``'s tokenizer:

    * only the character ``;`` makes a SEMICOLON token and only ``(`` an L_PAREN token (one
      character each: ``SINGLE_TOKENS``; no keyword has those types; no keyword, comment or
      quote start contains ``;``);
    * ``SELECT`` and ``WITH`` are keywords of those types, none of their letters is a single
      token, and the keyword trie (multi-word keywords, comment and quote starts) holds no key
      that is a prefix of ``SELECT ``/``WITH `` (whitespace folds to one space in the trie walk),
      so the first word reaches ``_scan_var``, which ends it at the whitespace.
    """
    known = _PLAIN_SELECT.get(dialect)
    if known is not None:
        return known
    try:
        from sqlglot.tokens import Tokenizer

        cls = Dialect.get_or_raise(dialect).tokenizer_class
        singles = cls.SINGLE_TOKENS
        ok = {k for k, v in singles.items() if v == TokenType.SEMICOLON} == {";"} and \
            {k for k, v in singles.items() if v == TokenType.L_PAREN} == {"("} and \
            not any(v in (TokenType.SEMICOLON, TokenType.L_PAREN) for v in cls.KEYWORDS.values()) and \
            not any(";" in k for k in (*cls.KEYWORDS, *cls._COMMENTS, *cls._QUOTES, *cls._FORMAT_STRINGS))
        for word, tt in (("SELECT", TokenType.SELECT), ("WITH", TokenType.WITH)):
            ok = ok and cls.KEYWORDS.get(word) == tt and not any(ch in singles or ch.lower() in singles
                                                                  for ch in word)
            node = cls._KEYWORD_TRIE
            for ch in word + " ":
                node = node.get(ch) if isinstance(node, dict) else None
                if node is None:
                    break
                ok = ok and 0 not in node
            ok = ok and node is None
        ok = ok and issubclass(cls, Tokenizer)
    except Exception:  # noqa: BLE001 - unknown dialect or tokenizer layout: the full guard
        ok = False
    _PLAIN_SELECT[dialect] = ok
    return ok


_TRAILING = re.compile(r"[\s;]*\Z")


def runs_unrefused(sql: str, dialect: str) -> bool:
    """True only when :func:`check_statement` would *certainly* answer ``pass`` or ``defer``
    (both mean "go to the engine"), found without tokenizing; False means "ask it".

    It holds for text that, after leading whitespace, starts with the ASCII word ``SELECT`` or
    ``WITH`` followed by whitespace, has ``;`` only in its trailing run of whitespace and
    semicolons, at most :data:`MAX_NESTING` ``(`` characters, is not malformed, and carries no
    executable comment of the dialect. Then (for a dialect where :func:`_plain_select_proven`)
    the tokenizer either fails (``defer``) or its first token is SELECT/WITH, every SEMICOLON
    token comes from the trailing run (so one non-empty statement), and the nesting is at most
    the number of ``(`` characters; none of the ``reject``/``empty`` branches can be taken.
    """
    head = sql.lstrip()
    word = head[:6].upper() if head[:6].isascii() else ""
    if not ((word == "SELECT" and head[6:7].isspace()) or (word[:4] == "WITH" and head[4:5].isspace())):
        return False
    if not _plain_select_proven(dialect):
        return False
    core = sql[:_TRAILING.search(sql).start()]
    if ";" in core or sql.count("(") > MAX_NESTING or malformed_text(sql) is not None:
        return False
    pattern = EXECUTABLE_COMMENT.get(dialect)
    return pattern is None or pattern.search(sql) is None


def nesting_depth(tokens) -> int:
    """Deepest parenthesis nesting of a token list (sqlglot tokens; no recursion, linear)."""
    depth = deepest = 0
    for tok in tokens:
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
            deepest = max(deepest, depth)
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
    return deepest


def sql_too_deep(sql: str | None, dialect: str) -> str | None:
    """Why ``sql`` is too deeply nested to analyse (:data:`MAX_NESTING`), else None; text the
    tokenizer cannot read gives None (the engine reports it)."""
    if not sql:
        return None
    try:
        depth = nesting_depth(Dialect.get_or_raise(dialect).tokenize(sql))
    except Exception:  # noqa: BLE001 - unreadable text: the engine decides
        return None
    if depth > MAX_NESTING:
        return f"parentheses nested {depth} levels deep; at most {MAX_NESTING} are accepted"
    return None


def malformed_text(sql: str) -> str | None:
    """Why ``sql`` cannot be sent to any engine as text (a NUL character, a lone surrogate that
    has no UTF-8 encoding), else None."""
    if "\x00" in sql:
        return f"malformed text: NUL character at position {sql.index(chr(0))}"
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"malformed text: lone surrogate {sql[exc.start]!r} at position {exc.start}"
    return None


def embedded_refusal(sql: str, dialect: str, location: str, limits=None):
    """The typed result an embedded engine returns *before* touching the database, else None:
    REJECTED for SQL longer than ``limits.max_sql_chars``, EMPTY for no statement, REJECTED
    for anything but one SELECT/WITH (:func:`check_statement`), UNAVAILABLE when the database
    file does not exist (so the engine never creates one)."""
    import os

    from polysql_ray.engines.base import ExecStatus, ExecutionResult

    too_long = limits.refuse_length(sql) if limits is not None else None
    if too_long is not None:
        return too_long
    verdict = check_statement(sql, dialect)
    if verdict.action == "empty":
        return ExecutionResult.failure(ExecStatus.EMPTY, verdict.message)
    if verdict.action == "reject":
        return ExecutionResult.failure(ExecStatus.REJECTED, verdict.message)
    if not os.path.isfile(location):
        return ExecutionResult.failure(ExecStatus.UNAVAILABLE, f"database file not found: {location}")
    return None


# --------------------------------------------------------------------------- token-level refusals
# Client-side layers for engines whose server cannot enforce them (README "Untrusted SQL"):
# the DuckDB-backed warehouse stand-ins (fakesnow, bqemulator) and chdb. They work on sqlglot
# *tokens*, not on a parse tree, so SQL sqlglot cannot parse is judged too, and comments or
# quoting cannot hide a name.

#: DuckDB table functions that turn a *string* into SQL (not file readers, but they run text no
#: client-side check has seen): refused on the stand-ins beside the derived file readers.
DUCKDB_SQL_FROM_TEXT: frozenset[str] = frozenset({"query", "query_table", "json_execute_serialized_sql"})

#: Extensions of files DuckDB's replacement scan reads when a quoted name in FROM ends with one
#: (DuckDB docs "Replacement scans"; compressed forms end with these too).
DATA_FILE_SUFFIXES: tuple[str, ...] = (
    ".csv", ".tsv", ".txt", ".parquet", ".json", ".jsonl", ".ndjson", ".xlsx", ".arrow", ".db",
    ".duckdb", ".sqlite", ".avro", ".orc", ".gz", ".zst", ".bz2", ".xz", ".lz4")

#: Token types of names (identifiers and words); STRING is judged separately.
_NAME_TOKENS = frozenset({TokenType.VAR, TokenType.IDENTIFIER})

#: Keywords after which a FROM list ends (at the same parenthesis depth).
_END_OF_FROM = frozenset({"WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "QUALIFY", "WINDOW", "UNION",
                          "EXCEPT", "INTERSECT", "SELECT", "ON", "USING", "SETTINGS", "FORMAT"})

_DUCKDB_READERS: frozenset[str] | None = None


#: Run in a child process by :func:`duckdb_file_readers` (a probe may switch on profiling or
#: logging output of its connection; the child keeps that away from this process).
_READER_PROBE = r"""
import json, duckdb
con = duckdb.connect(config={"enable_external_access": False, "autoinstall_known_extensions": False,
                             "autoload_known_extensions": False})
names = [r[0] for r in con.execute(
    "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro') "
    "AND len(parameter_types) >= 1 AND upper(parameter_types[1]) IN ('VARCHAR', 'VARCHAR[]', 'ANY')").fetchall()]
found = [r[0].lower() for r in con.execute(
    "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro') "
    "AND (function_name LIKE 'duckdb\\_%' ESCAPE '\\' OR function_name LIKE 'pragma\\_%' ESCAPE '\\' "
    "OR function_name = 'which_secret')").fetchall()]
for name in names:
    try:
        con.execute("SELECT * FROM \"" + name.replace('"', '""') + "\"('/nonexistent/polysql_probe.csv')").fetchmany(1)
    except duckdb.Error as e:
        if isinstance(e, duckdb.PermissionException) or "disabled by configuration" in str(e):
            found.append(name.lower())
print("POLYSQL_READERS " + json.dumps(sorted(found)))
"""


def duckdb_file_readers() -> frozenset[str]:
    """Names (lower case) of every table function of the installed DuckDB that reaches the file
    system or the network, derived from ``duckdb_functions()`` rather than listed by hand: in a
    child process, each table function taking a VARCHAR first argument is called on a throwaway
    in-memory connection with ``enable_external_access=false`` with a path that does not exist,
    and those DuckDB refuses there with a permission error are the readers (read_csv,
    read_text, sniff_csv, glob, parquet_metadata, read_duckdb, query_table ...); plus DuckDB's
    own catalog and configuration functions (``duckdb_*``, ``pragma_*``, ``which_secret``: file
    paths of the attached databases, settings, secrets, extension folders) and
    :data:`DUCKDB_SQL_FROM_TEXT`. Computed once per process (about a second); only
    :data:`DUCKDB_SQL_FROM_TEXT` when DuckDB is not installed or the probe fails."""
    global _DUCKDB_READERS
    if _DUCKDB_READERS is None:
        found = _child_probe(_READER_PROBE, "POLYSQL_READERS", 120) or set()
        _DUCKDB_READERS = frozenset(found) | DUCKDB_SQL_FROM_TEXT
    return _DUCKDB_READERS


#: Run in a child process by :func:`duckdb_path_functions`: a throwaway read-only database in a
#: marker folder, opened as the engine opens a replica (no external access, locked configuration)
#: with the temp/secret/extension/home folders set under the marker, so that any output holding
#: the marker is a host path.
_PATH_PROBE = r"""
import json, os, re, shutil, sys, tempfile, duckdb
marker = tempfile.mkdtemp(prefix="polysql-pathprobe-")
try:
    db = os.path.join(marker, "probe.duckdb")
    duckdb.connect(db).close()
    con = duckdb.connect(db, read_only=True, config={
        "enable_external_access": False, "autoload_known_extensions": False,
        "autoinstall_known_extensions": False, "temp_directory": os.path.join(marker, "tmp"),
        "secret_directory": os.path.join(marker, "secrets"), "extension_directory": os.path.join(marker, "ext"),
        "home_directory": marker})
    con.execute("SET lock_configuration=true")
    q = lambda n: '"' + n.replace('"', '""') + '"'
    tables = {r[0] for r in con.execute("SELECT function_name FROM duckdb_functions() "
                                        "WHERE function_type IN ('table', 'table_macro')").fetchall()}
    calls = [(n, q(n) + "()") for n in sorted(tables)] + [
        ("pragma_" + r[0], q("pragma_" + r[0])) for r in con.execute(
            "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'pragma' "
            "AND len(parameters) = 0").fetchall() if "pragma_" + r[0] not in tables]
    pathish = re.compile(r"path|file|director", re.I)
    found = set()
    for name, call in calls:
        try:
            cols = [r[0] for r in con.execute("DESCRIBE SELECT * FROM " + call).fetchall()]
            if any(pathish.search(c) for c in cols) or marker in repr(con.execute("SELECT * FROM " + call).fetchmany(10000)):
                found.add(name.lower())
        except duckdb.Error as e:
            if marker in str(e):
                found.add(name.lower())
    settings = [r[0] for r in con.execute("SELECT name FROM duckdb_settings() WHERE value LIKE ?",
                                          ["%" + marker + "%"]).fetchall()]
    for (name,) in con.execute("SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'scalar' "
                               "AND len(parameter_types) = 1 AND parameter_types[1] IN ('VARCHAR', 'ANY')").fetchall():
        for setting in settings:
            try:
                if marker in repr(con.execute("SELECT " + q(name) + "(?)", [setting]).fetchall()):
                    found.add(name.lower())
                    break
            except duckdb.Error:
                pass
    print("POLYSQL_PATHS " + json.dumps(sorted(found)))
finally:
    shutil.rmtree(marker, ignore_errors=True)
"""

#: Used by :func:`duckdb_path_functions` only when its probe cannot run (the names DuckDB 2.0
#: derives; a fallback, never the source of truth).
DUCKDB_PATH_FALLBACK: frozenset[str] = frozenset({
    "current_setting", "duckdb_databases", "duckdb_extensions", "duckdb_extension_repositories",
    "duckdb_external_file_cache", "duckdb_secrets", "duckdb_settings", "duckdb_temporary_files",
    "pragma_database_list"})

_DUCKDB_PATHS: frozenset[str] | None = None


def duckdb_path_functions() -> frozenset[str]:
    """Names (lower case) of the installed DuckDB's functions that hand a statement a *host path*
    (the database file, the temp/secret/extension folders, extension install paths), derived
    rather than listed: in a child process a throwaway database in a marker folder is opened
    read-only with external access off and those folders under the marker, then every table
    function and argument-less pragma (``pragma_<name>``) is called without arguments - it is a
    path function when a result column is named like a path (``path``, ``file``, ``directory``)
    or its result or error holds the marker - and every one-VARCHAR scalar function is called
    with each setting whose value holds the marker (``current_setting('temp_directory')``).
    DuckDB 2.0: ``current_setting``, ``duckdb_databases``, ``duckdb_settings``,
    ``pragma_database_list``, ``duckdb_temporary_files``, ``duckdb_extensions`` ... Computed once
    per process; the probe (3-6 s of CPU) runs once per installed DuckDB and probe text: its
    answer is kept in ``$XDG_CACHE_HOME/polysql_ray/duckdb-paths-<version>-<hash>.json`` (every
    execution actor that builds a DuckDB engine reads it instead of probing again; the cache is
    written atomically and skipped when unwritable). :data:`DUCKDB_PATH_FALLBACK` when the probe
    cannot run (not cached)."""
    global _DUCKDB_PATHS
    if _DUCKDB_PATHS is None:
        import json

        cache = _duckdb_paths_cache()
        found: set[str] | None = None
        try:
            found = set(json.loads(cache.read_text())) if cache is not None and cache.is_file() else None
        except (OSError, ValueError):
            found = None
        if not found:
            found = _child_probe(_PATH_PROBE, "POLYSQL_PATHS", 300)
            if found and cache is not None:
                try:
                    cache.parent.mkdir(parents=True, exist_ok=True)
                    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(sorted(found)))
                    os.replace(tmp, cache)
                except OSError:
                    pass
        _DUCKDB_PATHS = frozenset(found) if found else DUCKDB_PATH_FALLBACK
    return _DUCKDB_PATHS


def _child_probe(code: str, marker: str, timeout_s: float) -> set[str] | None:
    """Run probe ``code`` in a child Python (a DuckDB that crashes or hangs takes only the
    child) and return the JSON list it prints after ``marker``; None when it prints none,
    fails or runs past ``timeout_s`` seconds."""
    import json
    import subprocess
    import sys

    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s).stdout
        for line in out.splitlines():
            if line.startswith(marker + " "):
                return set(json.loads(line.split(" ", 1)[1]))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return None


def _duckdb_paths_cache():
    """Where :func:`duckdb_path_functions` keeps its probe's answer (a :class:`pathlib.Path`),
    keyed by the installed DuckDB's version and the probe's text; None when DuckDB is not
    installed."""
    import hashlib
    from importlib import metadata
    from pathlib import Path

    try:
        version = metadata.version("duckdb")
    except metadata.PackageNotFoundError:
        return None
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "polysql_ray"
    digest = hashlib.sha256(_PATH_PROBE.encode()).hexdigest()[:12]
    return root / f"duckdb-paths-{version}-{digest}.json"


def named(sql: str, dialect: str, names: frozenset[str]) -> str | None:
    """The first name of ``names`` (lower case) that ``sql`` mentions as a name - a name token,
    quoted or not, or one dotted part of a quoted one, called or not (DuckDB runs an
    argument-less table function without parentheses: ``FROM pragma_database_list``) - else
    None. On a tokenizer failure the raw text is searched for the names as words."""
    if not names:
        return None
    toks = _tokens(sql, dialect)
    if toks is None:
        m = re.search(r"(?i)(?<![\w$])(" + "|".join(map(re.escape, sorted(names))) + r")(?![\w$])", sql)
        return m.group(1).lower() if m else None
    for tok in toks:
        if tok.token_type == TokenType.STRING:
            continue
        for part in (tok.text.split(".") if tok.token_type == TokenType.IDENTIFIER else [tok.text]):
            if part.lower() in names:
                return part.lower()
    return None


def duckdb_path_refusal(sql: str, dialect: str = "duckdb") -> str | None:
    """Why ``sql`` is refused on DuckDB (the engine and the DuckDB-backed stand-ins) because it
    would read a host path (:func:`duckdb_path_functions`) or run SQL from text that no check
    has seen (:data:`DUCKDB_SQL_FROM_TEXT`: ``query('SELECT current_setting(...)')``), else None."""
    name = called_function(sql, dialect, DUCKDB_SQL_FROM_TEXT)
    if name is not None:
        return f"function {name}() runs SQL from text; not allowed in the sandbox"
    name = named(sql, dialect, duckdb_path_functions())
    if name is not None:
        return f"{name} reveals host paths (database file, temp or extension folders); not allowed in the sandbox"
    return None


def _tokens(sql: str, dialect: str):
    """sqlglot tokens of ``sql`` in ``dialect``, or None when the tokenizer fails."""
    try:
        return Dialect.get_or_raise(dialect).tokenize(sql)
    except Exception:
        return None


def called_function(sql: str, dialect: str, names: frozenset[str]) -> str | None:
    """The first name of ``names`` (lower case) that ``sql`` calls - a name token, quoted or
    not, followed by ``(`` - else None. Unlike ``servers.denied_function`` it needs no parse, so
    SQL sqlglot cannot parse is judged too; on a tokenizer failure the raw text is searched."""
    toks = _tokens(sql, dialect)
    if toks is None:
        m = re.search(r"(?i)(?<![\w.$])[`\"]?(" + "|".join(map(re.escape, sorted(names))) + r")[`\"]?\s*\(",
                      sql) if names else None
        return m.group(1).lower() if m else None
    for i, tok in enumerate(toks[:-1]):
        if tok.token_type != TokenType.STRING and tok.text.lower() in names \
                and toks[i + 1].token_type == TokenType.L_PAREN:
            return tok.text.lower()
    return None


def replacement_scan(sql: str, dialect: str) -> str | None:
    """Why ``sql`` names a *file* where a table goes, else None: a string literal directly in a
    FROM list (``FROM '/tmp/x.csv'``, ``JOIN 'x.parquet'``, ``FROM t, 'y.csv'``), or a quoted
    name there that looks like a path (contains ``/``, ``\\``, ``~`` or ``:``, or ends with a
    :data:`DATA_FILE_SUFFIXES` suffix). DuckDB (and the stand-ins built on it) reads such names
    as files (replacement scans); no warehouse does."""
    toks = _tokens(sql, dialect)
    if toks is None:
        return None
    depth = 0
    in_from: dict[int, bool] = {}
    prev = None
    for tok in toks:
        tt, word = tok.token_type, tok.text.upper()
        if tt == TokenType.L_PAREN:
            depth += 1
        elif tt == TokenType.R_PAREN:
            in_from[depth] = False
            depth -= 1
        elif tt in (TokenType.FROM, TokenType.JOIN) or word in ("FROM", "JOIN"):
            in_from[depth] = True
        elif tt not in (TokenType.STRING, *_NAME_TOKENS) and word in _END_OF_FROM:
            in_from[depth] = False
        elif in_from.get(depth) and prev is not None and (
                prev.token_type in (TokenType.FROM, TokenType.JOIN, TokenType.COMMA)
                or prev.text.upper() in ("FROM", "JOIN")):
            text = tok.text
            if tt == TokenType.STRING:
                return f"a string in FROM ({text[:60]!r}) is read as a file by DuckDB (replacement scan)"
            if tt == TokenType.IDENTIFIER and (any(c in text for c in "/\\~:")
                                               or text.lower().endswith(DATA_FILE_SUFFIXES)):
                return f"a path-like name in FROM ({text[:60]!r}) is read as a file by DuckDB (replacement scan)"
        prev = tok
    return None


def foreign_name(sql: str, dialect: str, own: str, replica_pattern: str,
                 catalogs: frozenset[str] = frozenset(), own_catalog: str | None = None) -> str | None:
    """Why ``sql`` names a database/schema/dataset other than its own copy ``own``, else None.

    1. On sqlglot tokens (no parse needed), case-insensitively, each dotted part of a name
       token (a BigQuery ```project.dataset.table``` is one quoted token): a part matching
       ``replica_pattern`` (a regex: the names this project gives copies, e.g. ``pq_.*`` or
       ``r_[0-9a-f]{24}``) that is not ``own`` - another copy, another run's replica; a part
       in ``catalogs`` (``information_schema``, ``system`` ...) followed by a ``.`` - a catalog
       listing every copy.
    2. When sqlglot parses the statement: every table whose schema/database qualifier is set
       must be ``own``, and its catalog qualifier (Snowflake database, BigQuery project), when
       set, ``own_catalog`` - so a name outside the project's naming (a team's private
       schema) is refused too.

    Returns the sentence for the REJECTED result."""
    toks = _tokens(sql, dialect)
    if toks is None:
        return None
    pat = re.compile(replica_pattern, re.IGNORECASE)
    own_l = own.lower()
    cats = {c.lower() for c in catalogs}
    for i, tok in enumerate(toks):
        if tok.token_type not in _NAME_TOKENS:
            continue
        parts = tok.text.split(".") if tok.token_type == TokenType.IDENTIFIER else [tok.text]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        for j, part in enumerate(parts):
            low = part.lower()
            if pat.fullmatch(part) and low != own_l:
                return f"{part!r} names another copy's database; only this copy is visible"
            dotted = j < len(parts) - 1 or (nxt is not None and nxt.token_type == TokenType.DOT)
            if low in cats and dotted:
                return f"{part!r} is a catalog of every copy; only this copy is visible"
    try:
        import sqlglot
        from sqlglot import exp

        trees = sqlglot.parse(sql, read=dialect)
    except Exception:
        return None
    for tree in trees:
        for table in (tree.find_all(exp.Table) if tree is not None else ()):
            db, catalog = table.db, table.catalog
            if "." in table.name and not db:  # one quoted `a.b.c` the dialect did not split
                *quals, _ = table.name.split(".")
                catalog, db = (quals[0] if len(quals) > 1 else ""), quals[-1]
            if db and db.lower() != own_l:
                return f"{db!r} is not this copy's schema; only this copy is visible"
            if catalog and own_catalog is not None and catalog.lower() != own_catalog.lower():
                return f"{catalog!r} is not this copy's database; only this copy is visible"
    return None


def standin_refusal(sql: str, dialect: str, own: str, replica_pattern: str, catalogs: frozenset[str],
                    own_catalog: str | None, denied: frozenset[str] = frozenset()):
    """``(ExecStatus.REJECTED, message)`` for a warehouse statement that reaches beyond its copy,
    else None - the client-side layer of Snowflake and BigQuery (README "Untrusted SQL"):

    * a call of a DuckDB file/network reader or SQL-from-text function
      (:func:`duckdb_file_readers`, derived from the installed DuckDB) or of ``denied``: the
      DuckDB-backed stand-ins run them, no warehouse has them;
    * a function handing out host paths (:func:`duckdb_path_refusal`: ``current_setting``,
      ``pragma_database_list`` without parentheses ...);
    * a file named where a table goes (:func:`replacement_scan`);
    * another copy's schema/dataset, another database/project, or a catalog listing every copy
      (:func:`foreign_name`): on the warehouse the reader role / dataset grants refuse it too,
      the stand-ins have no privileges at all.
    """
    from polysql_ray.engines.base import ExecStatus

    name = called_function(sql, dialect, duckdb_file_readers() | denied)
    if name is not None:
        return ExecStatus.REJECTED, f"function {name}() is not allowed in the sandbox (reads files or runs text)"
    why = duckdb_path_refusal(sql, dialect) or replacement_scan(sql, dialect) or foreign_name(sql, dialect, own, replica_pattern, catalogs, own_catalog)
    return (ExecStatus.REJECTED, why) if why else None
