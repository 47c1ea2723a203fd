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
    if not statements:
        return GuardVerdict("empty", "no SQL to run (only comments/semicolons)")
    depth = nesting_depth(tokens)
    if depth > MAX_NESTING:
        return GuardVerdict("reject", f"parentheses nested {depth} levels deep; at most {MAX_NESTING} "
                                      f"are accepted", len(statements))
    if len(statements) > 1:
        return GuardVerdict("reject", f"{len(statements)} statements; exactly one SELECT/WITH "
                                      f"statement is allowed", len(statements))
    pattern = EXECUTABLE_COMMENT.get(dialect)
    if pattern is not None and pattern.search(sql):
        return GuardVerdict("reject", "executable comment (/*! ... */ or /*M! ... */): the server "
                                      "would run text the statement guard cannot see", 1)
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
