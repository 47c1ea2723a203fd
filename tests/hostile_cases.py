"""The hostile-SQL catalogue: untrusted predictions per engine, organised by attack class.

Not a test module: ``test_hostile_embedded.py`` and ``test_hostile_servers.py`` run every case
through the real engine and assert (1) the typed status is one of ``expect`` (never a
traceback), (2) the replica and the source file are unchanged, (3) the next prediction on the
same engine (same pooled connection) still scores correctly, and - where a case sets
``after`` - that the state the attack tried to leave behind (locks, variables, aborted
transaction) is gone.

Attack classes (:data:`CLASSES`): file access, DDL/DML, multi-statement and comment tricks,
session and server control, resource exhaustion, information leaks, host facts, special values
(infinities, NaN, out-of-range dates and decimals), malformed text, and cross-replica reads
(:data:`CROSS_REPLICA`: run by ``test_isolation.py`` against a victim copy of another run).

Every attack is followed by its own canary (:func:`canary`: ``count(*) + k``, ``k`` distinct
per case), so a stale result, a session left in a state or a dead connection cannot pass as
the next answer. A test asserts through :func:`expect_status`, whose failure says ``ESCAPE``
when the attack got through (it ran where a refusal was due, changed a copy, wrote a file,
leaked another copy's data) and ``UNCONTAINED`` otherwise (an untyped or wrong status, a
canary that failed) - the two columns of ``benchmarks/sandbox_table.py --suite``.
"""
from __future__ import annotations

from dataclasses import dataclass

from polysql_ray.engines.base import ExecStatus as S, Limits

CLASSES = ("file_access", "ddl_dml", "multi_statement_comment", "session_server_control",
           "resource_exhaustion", "information_leak", "host_info", "special_values", "malformed_text",
           "cross_replica")

#: Limits of the suite: short timeout (the suite's wall time), small row cap and result bytes.
LIMITS = Limits(timeout_s=1.0, row_cap=1000, max_bytes=1_000_000, max_sql_chars=100_000)

#: The plain canary (singer has 6 rows); after an attack :func:`canary` gives a distinct one.
CANARY = ("SELECT count(*) FROM singer", 6)


def canary(engine: str, case: "Case") -> tuple[str, int]:
    """The canary that follows ``case`` on ``engine``: ``SELECT count(*) + k FROM singer`` with
    ``k`` the case's 1-based position in ``CASES[engine]`` (expected ``6 + k``)."""
    k = next(i for i, c in enumerate(CASES[engine], 1) if c is case)
    return f"SELECT count(*) + {k} FROM singer", 6 + k


def expect_status(res, case: "Case", expect=None) -> None:
    """Assert ``res`` is one of the case's statuses; the message starts ``ESCAPE`` when the
    attack *ran* although a refusal was due, else ``UNCONTAINED``."""
    from polysql_ray.engines.base import ExecStatus

    allowed = case.expect if expect is None else expect
    if res.status in allowed:
        return
    kind = "ESCAPE" if res.status is ExecStatus.OK else "UNCONTAINED"
    raise AssertionError(f"{kind}: {case.cls}/{case.name}: {res.status} not in "
                         f"{sorted(s.value for s in allowed)} ({res.error})")


def check_canary(res, expected: int) -> None:
    """Assert the canary's answer (``UNCONTAINED`` otherwise: the engine did not recover)."""
    if not (res.ok and res.table.column(0)[0].as_py() == expected):
        raise AssertionError(f"UNCONTAINED: canary {res.status} {res.error} "
                             f"{res.table.column(0)[0].as_py() if res.ok else ''} != {expected}")

REJ = {S.REJECTED}
#: A special value is an ordinary engine value or a typed error, never a traceback.
SPECIAL = {S.OK, S.RUNTIME, S.SYNTAX, S.TOO_LARGE}


@dataclass(frozen=True)
class Case:
    """One hostile prediction.

    Attributes:
        cls: attack class (one of :data:`CLASSES`).
        sql: the prediction.
        expect: statuses that are a correct, safe outcome.
        after: ``(probe_sql, expected first value)`` run next on the same engine: the attack's
            leftover state must be gone (None: only the canary).
        name: short id for test names.
    """

    cls: str
    sql: str
    expect: frozenset
    after: tuple | None = None
    name: str = ""


def C(cls, name, sql, expect=REJ, after=None) -> Case:
    return Case(cls, sql, frozenset(expect), after, name)


OR_CHAIN_5K = "SELECT count(*) FROM singer WHERE " + " OR ".join(f"{i} = {i + 1}" for i in range(5000))
OR_CHAIN_20K = "SELECT count(*) FROM singer WHERE " + " OR ".join(f"{i} = {i + 1}" for i in range(20000))
DEEP_PARENS = "SELECT " + "(" * 3000 + "1" + ")" * 3000

#: Cases every engine must handle identically.
COMMON = [
    C("ddl_dml", "delete", "DELETE FROM singer"),
    C("ddl_dml", "update", "UPDATE singer SET Age = 0"),
    C("ddl_dml", "insert", "INSERT INTO singer (Singer_ID) VALUES (99)"),
    C("ddl_dml", "drop", "DROP TABLE singer"),
    C("ddl_dml", "create", "CREATE TABLE polysql_evil (a INT)"),
    C("ddl_dml", "alter", "ALTER TABLE singer ADD COLUMN evil INT"),
    C("ddl_dml", "create_view", "CREATE VIEW polysql_v AS SELECT 1"),
    C("multi_statement_comment", "select_then_delete", "SELECT 1; DELETE FROM singer"),
    C("multi_statement_comment", "trailing_drop", "SELECT 1;DROP TABLE singer;"),
    C("multi_statement_comment", "comment_hides_semicolon", "SELECT 1 /* ; */; DELETE FROM singer"),
    C("multi_statement_comment", "line_comment_then_drop", "SELECT 1 -- x\n; DROP TABLE singer"),
    C("multi_statement_comment", "string_with_semicolon_ok", "SELECT count(*) FROM singer WHERE 'a;DELETE FROM singer' <> ''",
      {S.OK}),
    C("resource_exhaustion", "sql_too_long", OR_CHAIN_20K),
    C("resource_exhaustion", "row_cap", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5000) "
      "SELECT n FROM r", {S.TOO_LARGE}),
    C("resource_exhaustion", "runaway_recursion", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
      "SELECT count(*) FROM r", {S.TIMEOUT}),
    C("resource_exhaustion", "or_chain_5k", OR_CHAIN_5K, {S.OK, S.RUNTIME, S.SYNTAX, S.TIMEOUT}),
    C("malformed_text", "lone_surrogate", "SELECT '\ud800' FROM singer"),
    C("malformed_text", "nul_char", "SELECT 1\x00; DROP TABLE singer"),
    C("malformed_text", "binary_junk", "\x00\xff\xfe\x01SELECT"),
    C("malformed_text", "unterminated_string", "SELECT 'abc FROM singer", {S.SYNTAX, S.REJECTED}),
    C("malformed_text", "unterminated_comment", "SELECT 1 /* never closed", {S.SYNTAX, S.REJECTED, S.OK}),
    C("malformed_text", "deep_parentheses", DEEP_PARENS, {S.SYNTAX, S.RUNTIME, S.REJECTED, S.OK}),
    C("malformed_text", "only_semicolons", ";;; ;", {S.EMPTY}),
    C("malformed_text", "only_comment", "/* nothing */ -- here", {S.EMPTY}),
]

SQLITE = [
    C("file_access", "attach", "ATTACH DATABASE '/tmp/polysql_evil.db' AS e"),
    C("file_access", "load_extension", "SELECT load_extension('/tmp/polysql_evil.so')"),
    C("file_access", "readfile", "SELECT readfile('/etc/passwd')", {S.REJECTED, S.SYNTAX}),
    C("file_access", "writefile", "SELECT writefile('/tmp/polysql_evil', 'x')", {S.REJECTED, S.SYNTAX}),
    C("file_access", "vacuum_into", "VACUUM INTO '/tmp/polysql_evil.db'"),
    C("ddl_dml", "replace", "REPLACE INTO singer (Singer_ID) VALUES (1)"),
    C("ddl_dml", "cte_delete", "WITH x AS (SELECT 1) DELETE FROM singer"),
    C("session_server_control", "pragma_query_only", "PRAGMA query_only = 0"),
    C("session_server_control", "pragma_writable_schema", "PRAGMA writable_schema = ON"),
    C("session_server_control", "pragma_function", "SELECT * FROM pragma_table_info('singer')"),
    C("session_server_control", "begin", "BEGIN IMMEDIATE"),
    C("session_server_control", "reindex", "REINDEX singer"),
    C("session_server_control", "savepoint", "SAVEPOINT a"),
    C("resource_exhaustion", "cartesian", "SELECT count(*) FROM singer a, singer b, singer c, singer d, "
      "singer e, singer f, singer g, singer h, singer i, singer j, singer k", {S.TIMEOUT}),
    C("resource_exhaustion", "huge_blob", "SELECT zeroblob(2000000000)", {S.RUNTIME, S.TOO_LARGE}),
    C("resource_exhaustion", "big_value", "SELECT hex(zeroblob(3000000))", {S.TOO_LARGE}),
    C("information_leak", "database_list", "SELECT * FROM pragma_database_list"),
    C("information_leak", "compile_options", "SELECT * FROM pragma_compile_options"),
    C("host_info", "sqlite_source_id", "SELECT sqlite_source_id()", {S.OK, S.REJECTED}),
    C("host_info", "pragma_temp_dir", "SELECT * FROM pragma_temp_store_directory", {S.REJECTED, S.SCHEMA}),
    C("special_values", "inf", "SELECT 1e999", SPECIAL),
    C("special_values", "minus_inf", "SELECT -1e999", SPECIAL),
    C("special_values", "nan_division", "SELECT 0.0 / 0", SPECIAL),
    C("special_values", "int_overflow", "SELECT 9223372036854775807 + 1", SPECIAL),
    C("special_values", "year_10000", "SELECT date('10000-01-01'), datetime(1e18, 'unixepoch')", SPECIAL),
    C("special_values", "huge_exponent", "SELECT CAST('1e400' AS REAL) * 0", SPECIAL),
]

DUCKDB = [
    C("file_access", "read_text", "SELECT * FROM read_text('/etc/passwd')"),
    C("file_access", "read_csv", "SELECT * FROM read_csv('/etc/passwd')"),
    C("file_access", "glob", "SELECT * FROM glob('/etc/*')"),
    C("file_access", "copy_to", "COPY (SELECT 1) TO '/tmp/polysql_evil.csv'"),
    C("file_access", "attach", "ATTACH '/tmp/polysql_evil.duckdb' AS e"),
    C("file_access", "install", "INSTALL httpfs"),
    C("file_access", "load", "LOAD httpfs"),
    C("file_access", "export", "EXPORT DATABASE '/tmp/polysql_evil_dir'"),
    C("file_access", "parquet_scan", "SELECT * FROM parquet_scan('/tmp/x.parquet')"),
    C("ddl_dml", "create_temp", "CREATE TEMP TABLE t AS SELECT 1"),
    C("ddl_dml", "create_macro", "CREATE MACRO m(a) AS a"),
    C("session_server_control", "set_threads", "SET threads = 64"),
    C("session_server_control", "reset_lock", "RESET lock_configuration"),
    C("session_server_control", "set_variable", "SET VARIABLE polysql_x = 1",
      after=("SELECT getvariable('polysql_x') IS NULL", True)),
    C("session_server_control", "pragma", "PRAGMA enable_profiling"),
    C("session_server_control", "checkpoint", "CHECKPOINT"),
    C("session_server_control", "detach", "DETACH DATABASE memory"),
    C("session_server_control", "use", "USE memory"),
    C("session_server_control", "call", "CALL pragma_version()"),
    C("session_server_control", "from_first_then_set", "FROM singer SELECT 1; SET threads = 8"),
    C("resource_exhaustion", "huge_range", "SELECT count(*) FROM range(1000000000000) a", {S.TIMEOUT}),
    C("resource_exhaustion", "cartesian", "SELECT count(*) FROM range(100000000) a, range(1000) b", {S.TIMEOUT}),
    C("resource_exhaustion", "big_value", "SELECT repeat('x', 3000000)", {S.TOO_LARGE}),
    C("information_leak", "secrets", "SELECT * FROM duckdb_secrets()"),
    C("information_leak", "getenv", "SELECT getenv('HOME')", {S.REJECTED, S.SYNTAX}),
    # enable_external_access=false: DuckDB does not look for the file, the name is a missing table
    C("file_access", "replacement_scan", "SELECT * FROM '/etc/passwd'", {S.REJECTED, S.SCHEMA}),
    C("file_access", "replacement_scan_quoted", 'SELECT * FROM "/etc/hostname"', {S.REJECTED, S.SCHEMA}),
    C("file_access", "sniff_csv", "SELECT * FROM sniff_csv('/etc/passwd')"),
    C("file_access", "query_table_file", "SELECT * FROM query_table('/etc/passwd')", {S.REJECTED, S.SCHEMA}),
    C("file_access", "read_blob", "SELECT * FROM read_blob('/etc/passwd')"),
    # DuckDB's own configuration (home_directory is empty in the engine's connection), not the host's
    C("host_info", "settings_home", "SELECT value FROM duckdb_settings() WHERE name = 'home_directory'",
      {S.OK, S.REJECTED}),
    C("host_info", "temp_directory", "SELECT current_setting('temp_directory')"),
    C("host_info", "database_list", "SELECT * FROM pragma_database_list"),
    C("host_info", "database_paths", "SELECT path FROM duckdb_databases()"),
    C("host_info", "settings_paths", "SELECT name, value FROM duckdb_settings() WHERE value LIKE '%/%'"),
    C("special_values", "infinity_timestamp", "SELECT 'infinity'::TIMESTAMP", SPECIAL),
    C("special_values", "minus_infinity_date", "SELECT '-infinity'::DATE", SPECIAL),
    C("special_values", "nan", "SELECT 'nan'::DOUBLE", SPECIAL),
    C("special_values", "inf", "SELECT 1e999", SPECIAL),
    C("special_values", "year_294247", "SELECT '294246-12-31'::TIMESTAMP", SPECIAL),
    C("special_values", "decimal_38", "SELECT 99999999999999999999999999999999999999::DECIMAL(38,0)", SPECIAL),
]

POSTGRES = [
    C("file_access", "pg_read_file", "SELECT pg_read_file('/etc/passwd')"),
    C("file_access", "pg_read_file_from", "SELECT * FROM pg_read_file('/etc/passwd')"),
    C("file_access", "pg_ls_dir", "SELECT * FROM pg_ls_dir('.')"),
    C("file_access", "copy_program", "COPY (SELECT 1) TO PROGRAM 'id'"),
    C("file_access", "copy_to_file", "COPY (SELECT 1) TO '/tmp/polysql_evil'"),
    C("file_access", "lo_import", "SELECT lo_import('/etc/passwd')"),
    # OPERATOR(pg_catalog.=) keeps sqlglot from parsing, so only the server can refuse it
    C("file_access", "pg_read_file_unparseable",
      "SELECT pg_read_file('/etc/passwd') WHERE 1 OPERATOR(pg_catalog.=) 1"),
    C("ddl_dml", "cte_delete", "WITH d AS (DELETE FROM singer RETURNING *) SELECT * FROM d",
      {S.REJECTED, S.RUNTIME}),
    C("ddl_dml", "select_into", "SELECT * INTO polysql_evil FROM singer", {S.REJECTED, S.SYNTAX}),
    C("ddl_dml", "nextval", "SELECT nextval('polysql_seq')", {S.REJECTED, S.SCHEMA}),
    C("multi_statement_comment", "dollar_quote", "SELECT $$a$$; DELETE FROM singer"),
    # PostgreSQL nests block comments: this is one statement, SELECT 1 (no DELETE runs)
    C("multi_statement_comment", "nested_comment", "SELECT 1 /* /* */ ; DELETE FROM singer */",
      {S.REJECTED, S.SYNTAX, S.OK}),
    C("session_server_control", "terminate", "SELECT pg_terminate_backend(pg_backend_pid())"),
    C("session_server_control", "terminate_unparseable",
      "SELECT pg_terminate_backend(pid) FROM pg_stat_get_activity(NULL) WHERE 1 OPERATOR(pg_catalog.=) 1"),
    C("session_server_control", "cancel_unparseable",
      "SELECT pg_cancel_backend(pg_backend_pid()) WHERE 1 OPERATOR(pg_catalog.=) 1"),
    C("session_server_control", "set_config", "SELECT set_config('statement_timeout', '0', false)"),
    C("session_server_control", "set_config_unparseable",
      "SELECT set_config('statement_timeout', '0', false) WHERE 1 OPERATOR(pg_catalog.=) 1"),
    C("session_server_control", "set", "SET statement_timeout = 0"),
    C("session_server_control", "reload_conf", "SELECT pg_reload_conf()"),
    C("session_server_control", "advisory_lock", "SELECT pg_advisory_lock(4242)", {S.OK},
      after=("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'", 0)),
    C("session_server_control", "aborted_transaction", "SELECT 1 / 0", {S.RUNTIME},
      after=("SELECT 7", 7)),
    C("session_server_control", "begin", "BEGIN"),
    C("session_server_control", "listen", "LISTEN polysql", {S.REJECTED, S.SYNTAX}),
    C("resource_exhaustion", "sleep", "SELECT pg_sleep(30)", {S.TIMEOUT}),
    C("resource_exhaustion", "slow_fetch",  # each row is fast; the whole fetch is not
      "SELECT g, pg_sleep(0.005) FROM generate_series(1, 900) g", {S.TIMEOUT}),
    C("resource_exhaustion", "cancel_mid_transfer",
      "SELECT g, pg_sleep(CASE WHEN g > 500 THEN 5 ELSE 0 END) FROM generate_series(1, 900) g",
      {S.TIMEOUT}, after=("SELECT 8", 8)),
    C("resource_exhaustion", "big_value", "SELECT repeat('x', 3000000)", {S.TOO_LARGE}),
    C("resource_exhaustion", "many_rows", "SELECT * FROM generate_series(1, 100000000)", {S.TOO_LARGE, S.TIMEOUT}),
    C("information_leak", "stat_activity", "SELECT query FROM pg_stat_activity"),
    C("information_leak", "stat_activity_unparseable",
      "SELECT query FROM pg_stat_activity WHERE 1 OPERATOR(pg_catalog.=) 1"),
    C("information_leak", "backend_activity",
      "SELECT pg_stat_get_backend_activity(s) FROM pg_stat_get_backend_idset() s"),
    C("information_leak", "shadow", "SELECT * FROM pg_shadow"),
    C("information_leak", "databases", "SELECT datname FROM pg_database"),
    C("information_leak", "roles", "SELECT rolname FROM pg_roles"),
    C("information_leak", "database_by_oid", "SELECT pg_describe_object(1262, g::oid, 0) FROM generate_series(1, 20000) g"),
    C("host_info", "tablespace_location", "SELECT pg_tablespace_location(1663)"),
    C("information_leak", "authid", "SELECT rolpassword FROM pg_authid"),
    C("information_leak", "data_directory", "SELECT current_setting('data_directory')"),
    C("information_leak", "hba_file", "SELECT * FROM pg_hba_file_rules"),
    C("host_info", "inet_server_addr", "SELECT inet_server_addr(), inet_server_port()", {S.OK, S.REJECTED}),
    C("host_info", "config_file", "SELECT current_setting('config_file')"),
    C("host_info", "pg_ls_logdir", "SELECT * FROM pg_ls_logdir()"),
    C("special_values", "infinity_date", "SELECT 'infinity'::date", SPECIAL),
    C("special_values", "minus_infinity_timestamp", "SELECT '-infinity'::timestamp", SPECIAL),
    C("special_values", "nan_numeric", "SELECT 'NaN'::numeric", SPECIAL),
    C("special_values", "infinity_float", "SELECT 'infinity'::float8, '-infinity'::float8", SPECIAL),
    C("special_values", "year_294276", "SELECT '294276-12-31'::timestamp", SPECIAL),
    C("special_values", "huge_numeric", "SELECT 1e1000::numeric", SPECIAL),
]

MYSQL = [
    C("file_access", "load_file", "SELECT LOAD_FILE('/etc/passwd')"),
    C("file_access", "into_outfile", "SELECT * FROM singer INTO OUTFILE '/tmp/polysql_x'"),
    C("file_access", "into_dumpfile", "SELECT Name FROM singer INTO DUMPFILE '/tmp/polysql_y'"),
    C("file_access", "load_data", "LOAD DATA INFILE '/etc/passwd' INTO TABLE singer"),
    C("file_access", "load_file_exec_comment", "SELECT /*! LOAD_FILE('/etc/passwd') , */ 1"),
    C("ddl_dml", "replace", "REPLACE INTO singer (Singer_ID) VALUES (1)"),
    C("ddl_dml", "create_temp", "CREATE TEMPORARY TABLE t (a INT)"),
    C("ddl_dml", "select_into_var", "SELECT Name INTO @polysql_n FROM singer LIMIT 1"),
    C("multi_statement_comment", "exec_comment_delete", "/*!DELETE FROM singer*/ SELECT 1"),
    C("multi_statement_comment", "exec_comment_semicolon", "SELECT 1 /*! ; DROP TABLE singer */"),
    C("multi_statement_comment", "versioned_exec_comment", "SELECT 1 /*!50000 , SLEEP(30) */"),
    C("multi_statement_comment", "mariadb_exec_comment_timeout_off",
      "/*M!100000 SET STATEMENT max_statement_time=0 FOR */ SELECT SLEEP(30)"),
    C("multi_statement_comment", "trailing_semicolon_ok", "SELECT count(*) FROM singer; -- done", {S.OK}),
    C("session_server_control", "set_global", "SET GLOBAL max_connections = 1"),
    C("session_server_control", "set_statement", "SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(30)"),
    C("session_server_control", "kill", "KILL 1"),
    C("session_server_control", "do_sleep", "DO SLEEP(0.1)"),
    C("session_server_control", "handler_open", "HANDLER singer OPEN"),
    C("session_server_control", "checksum_table", "CHECKSUM TABLE singer"),
    C("session_server_control", "shutdown", "SHUTDOWN"),
    C("session_server_control", "flush", "FLUSH PRIVILEGES"),
    C("session_server_control", "lock_tables", "LOCK TABLES singer READ"),
    C("session_server_control", "get_lock", "SELECT GET_LOCK('polysql_evil', 0)", {S.OK},
      after=("SELECT IS_FREE_LOCK('polysql_evil')", 1)),
    C("session_server_control", "user_variable", "SELECT @polysql_v := 5", {S.OK},
      after=("SELECT @polysql_v IS NULL", 1)),
    C("session_server_control", "session_timeout_off", "SELECT 1 FROM singer WHERE (@@max_statement_time := 0)",
      {S.SYNTAX, S.REJECTED, S.RUNTIME}),
    C("resource_exhaustion", "sleep", "SELECT SLEEP(30)", {S.TIMEOUT}),
    C("resource_exhaustion", "benchmark", "SELECT BENCHMARK(100000000000, MD5('a'))", {S.TIMEOUT}),
    C("resource_exhaustion", "cartesian", "SELECT count(*) FROM information_schema.columns a, "
      "information_schema.columns b, information_schema.columns c", {S.TIMEOUT}),
    C("resource_exhaustion", "big_value", "SELECT REPEAT('x', 3000000)", {S.TOO_LARGE}),
    C("information_leak", "processlist", "SELECT * FROM information_schema.PROCESSLIST"),
    C("information_leak", "processlist_folded", "SELECT info FROM information_schema.`PROCESSLİST`"),
    C("information_leak", "show_processlist", "SHOW PROCESSLIST"),
    # 1142 "SELECT command denied": a table outside the copy, typed schema (engines/mysql.py)
    C("information_leak", "mysql_user", "SELECT * FROM mysql.user", {S.SCHEMA}),
    C("information_leak", "performance_schema", "SELECT * FROM performance_schema.threads", {S.SCHEMA, S.REJECTED}),
    C("host_info", "hostname_var", "SELECT @@hostname", {S.OK, S.REJECTED}),
    C("host_info", "datadir", "SELECT @@datadir", {S.OK, S.REJECTED}),
    C("special_values", "max_datetime", "SELECT CAST('9999-12-31 23:59:59.999999' AS DATETIME(6))", SPECIAL),
    C("special_values", "zero_date", "SELECT CAST('0000-00-00' AS DATE)", SPECIAL),
    C("special_values", "double_overflow", "SELECT 1e308 * 10", SPECIAL),
    C("special_values", "bigint_overflow", "SELECT 18446744073709551615 + 1", SPECIAL),
    C("special_values", "decimal_65", "SELECT CAST(1e64 AS DECIMAL(65,0))", SPECIAL),
    C("special_values", "unsigned_max", "SELECT ~0", SPECIAL),
]

#: A runaway query every engine can parse, bounded in work (6^13 = 1.3e10 joined rows, about a
#: minute of one core in DuckDB) so that a stand-in that cannot cancel it stops by itself, yet runs
#: far past the watchdog's deadline (``timeout_s`` + ``client_grace_s`` = 5 s in the suite).
def cross_join(n: int) -> str:
    """``n`` copies of singer (6 rows) cross-joined and summed: 6**n joined rows."""
    return ("SELECT sum(" + " + ".join(f"t{i}.Singer_ID" for i in range(n)) + ") FROM "
            + ", ".join(f"singer t{i}" for i in range(n)))


CROSS_13 = cross_join(13)
#: BigQuery's runaway: bqemulator cannot cancel a job, so every check after the attack waits until
#: the whole join has run (13-way: 156 s on an idle core, 415 s under a CPU hog, the slowest case
#: of CI). Twelve tables are 6x less work (2.2e9 rows, ~26 s idle), still ~5x past the watchdog's
#: deadline, so the case still shows the watchdog's timeout and the health gate after it.
CROSS_12 = cross_join(12)

#: COMMON for the warehouses: the unbounded recursion is replaced by :data:`CROSS_13` (a stand-in
#: that cannot cancel would run it until the stand-in stops) and per-dialect runaways below; the
#: recursive row-cap case by each dialect's own row generator (ClickHouse's recursive CTE needed
#: over 1 s for 5000 rows on a loaded machine, ending as timeout).
WAREHOUSE_COMMON = [c for c in COMMON if c.name not in ("runaway_recursion", "row_cap")] + [
    C("resource_exhaustion", "cross_join_13", CROSS_13, {S.TIMEOUT}),
]

CLICKHOUSE = [
    C("file_access", "file_table", "SELECT * FROM file('/etc/passwd', 'LineAsString')"),
    C("file_access", "file_scalar", "SELECT file('/etc/passwd')"),
    C("file_access", "url", "SELECT * FROM url('http://127.0.0.1:9/x', 'CSV')"),
    C("file_access", "s3", "SELECT * FROM s3('http://127.0.0.1:9/bucket/key.csv', 'CSV')"),
    C("file_access", "executable", "SELECT * FROM executable('id', 'LineAsString', 'x String')"),
    C("file_access", "sqlite", "SELECT * FROM sqlite('/tmp/polysql_evil.db', 't')"),
    C("file_access", "into_outfile", "SELECT 1 INTO OUTFILE '/tmp/polysql_evil'"),
    C("ddl_dml", "alter_update", "ALTER TABLE singer UPDATE Age = 0 WHERE 1"),
    C("ddl_dml", "truncate", "TRUNCATE TABLE singer"),
    C("ddl_dml", "optimize", "OPTIMIZE TABLE singer FINAL"),
    C("ddl_dml", "create_temp", "CREATE TEMPORARY TABLE t (a Int8)"),
    C("session_server_control", "set_readonly", "SET readonly = 0"),
    C("session_server_control", "settings_clause_timeout", "SELECT count() FROM singer SETTINGS max_execution_time = 0"),
    C("session_server_control", "settings_clause_rows", "SELECT count() FROM singer SETTINGS max_result_rows = 0"),
    # an allowed result setting (pre-applied to the session) never carries a sandbox setting with it
    C("session_server_control", "settings_allowed_plus_timeout",
      "SELECT count() FROM singer SETTINGS join_use_nulls = 1, max_execution_time = 0"),
    C("session_server_control", "settings_allowed_plus_readonly",
      "SELECT count() FROM singer SETTINGS join_use_nulls = 1, readonly = 0"),
    C("session_server_control", "settings_allowed_plus_memory",
      "SELECT count() FROM singer SETTINGS aggregate_functions_null_for_empty = 1, max_memory_usage = 0"),
    C("resource_exhaustion", "settings_allowed_runaway",
      "SELECT count() FROM numbers(1e12) AS a, numbers(1e12) AS b SETTINGS join_use_nulls = 1", {S.TIMEOUT}),
    C("resource_exhaustion", "settings_subquery_timeout",
      "SELECT count() FROM (SELECT sum(number) FROM numbers(1e13) SETTINGS max_execution_time = 0) "
      "SETTINGS join_use_nulls = 1", {S.TIMEOUT}),
    C("file_access", "settings_allowed_file_table",
      "SELECT * FROM file('/etc/passwd', 'LineAsString') SETTINGS join_use_nulls = 1"),
    C("session_server_control", "system_shutdown", "SYSTEM SHUTDOWN"),
    C("session_server_control", "kill_query", "KILL QUERY WHERE 1"),
    C("session_server_control", "use_system", "USE system"),
    C("resource_exhaustion", "numbers_cross", "SELECT count() FROM numbers(1e12) AS a, numbers(1e12) AS b", {S.TIMEOUT}),
    C("resource_exhaustion", "many_rows", "SELECT number FROM numbers(100000000)", {S.TOO_LARGE}),
    C("resource_exhaustion", "big_value", "SELECT concat(repeat('x', 1000000), repeat('y', 1000000))",
      {S.TOO_LARGE}),
    C("information_leak", "hostname", "SELECT hostName()"),
    C("information_leak", "server_setting", "SELECT getServerSetting('path')"),
    C("host_info", "fqdn", "SELECT FQDN()"),
    C("host_info", "full_host_name", "SELECT fullHostName()"),
    C("host_info", "hostname_lower", "SELECT hostname()"),
    C("host_info", "display_name", "SELECT displayName()"),
    C("host_info", "os_kernel", "SELECT getOSKernelVersion()"),
    C("host_info", "server_uuid", "SELECT serverUUID()"),
    C("host_info", "fqdn_backquoted", "SELECT `FQDN`()"),
    C("file_access", "filesystem_table", "SELECT * FROM filesystem('/etc')", {S.REJECTED}),
    C("file_access", "merge_all", "SELECT * FROM merge(REGEXP('.*'), '.*')"),
    C("file_access", "loop_table", "SELECT * FROM loop(currentDatabase(), 'singer') LIMIT 1"),
    C("special_values", "datetime64_2299", "SELECT toDateTime64('2299-12-31', 3)", SPECIAL),
    C("special_values", "inf", "SELECT inf, -inf", SPECIAL),
    C("special_values", "nan", "SELECT nan", SPECIAL),
    C("special_values", "date32_1900", "SELECT toDate32('1900-01-01')", SPECIAL),
    C("special_values", "uint64_wrap", "SELECT 18446744073709551615 + 1", SPECIAL),
    C("special_values", "int256_max", "SELECT toInt256('57896044618658097711785492504343953926634992332820282019728792003956564819967')",
      SPECIAL),
]

#: DuckDB functions the stand-ins (fakesnow, bqemulator: DuckDB underneath) would run.
_DUCKDB_READERS = [
    C("file_access", "duckdb_read_csv", "SELECT * FROM read_csv('/etc/passwd')"),
    C("file_access", "duckdb_read_text", "SELECT * FROM read_text('/etc/passwd')"),
    C("file_access", "duckdb_glob", "SELECT * FROM glob('/etc/*')", {S.REJECTED, S.SYNTAX}),
    C("information_leak", "duckdb_getenv", "SELECT getenv('HOME')", {S.REJECTED, S.SYNTAX, S.SCHEMA}),
    C("file_access", "duckdb_replacement_scan", "SELECT * FROM '/etc/passwd'"),
    C("file_access", "duckdb_replacement_scan_join", "SELECT * FROM singer JOIN '/etc/hostname' ON true"),
    C("file_access", "duckdb_replacement_scan_comma", "SELECT * FROM singer, '/etc/hostname'"),
    C("file_access", "duckdb_sniff_csv", "SELECT * FROM sniff_csv('/etc/passwd')"),
    C("file_access", "duckdb_query", "SELECT * FROM query('SELECT * FROM read_text(''/etc/passwd'')')"),
    C("file_access", "duckdb_query_table", "SELECT * FROM query_table('/etc/passwd')"),
    C("file_access", "duckdb_read_blob", "SELECT * FROM read_blob('/etc/hostname')"),
    C("file_access", "duckdb_read_json", "SELECT * FROM read_json_auto('/etc/passwd')"),
    C("file_access", "duckdb_parquet_metadata", "SELECT * FROM parquet_metadata('/tmp/x.parquet')"),
    C("file_access", "duckdb_read_duckdb", "SELECT * FROM read_duckdb('/tmp/x.duckdb')"),
    C("file_access", "duckdb_reader_in_subquery", "SELECT (SELECT count(*) FROM read_text('/etc/passwd'))"),
    C("file_access", "duckdb_reader_quoted", 'SELECT * FROM "read_text"(\'/etc/passwd\')'),
    C("information_leak", "duckdb_settings", "SELECT * FROM duckdb_settings()"),
    C("information_leak", "duckdb_databases", "SELECT path FROM duckdb_databases()"),
    C("host_info", "duckdb_temp_directory", "SELECT current_setting('temp_directory')", {S.REJECTED, S.SYNTAX}),
    C("host_info", "duckdb_database_list", "SELECT * FROM pragma_database_list"),
    C("cross_replica", "information_schema_tables", "SELECT * FROM INFORMATION_SCHEMA.TABLES"),
    C("cross_replica", "other_copy", "SELECT * FROM pq_someone_else_x1.singer"),
]

SNOWFLAKE = _DUCKDB_READERS + [
    C("file_access", "put", "PUT file:///etc/passwd @~"),
    C("file_access", "get", "GET @~/x file:///tmp/"),
    C("file_access", "copy_into_stage", "COPY INTO @~/polysql_evil FROM singer"),
    C("file_access", "list_stage", "LIST @~"),
    C("ddl_dml", "create_or_replace", "CREATE OR REPLACE TABLE singer AS SELECT 1 AS x"),
    C("ddl_dml", "truncate", "TRUNCATE TABLE singer"),
    C("ddl_dml", "merge", "MERGE INTO singer s USING singer t ON s.Singer_ID = t.Singer_ID "
      "WHEN MATCHED THEN DELETE"),
    C("ddl_dml", "insert_overwrite", "INSERT OVERWRITE INTO singer SELECT * FROM singer WHERE 1 = 0"),
    C("session_server_control", "alter_session_timeout", "ALTER SESSION SET STATEMENT_TIMEOUT_IN_SECONDS = 0"),
    C("session_server_control", "use_role", "USE ROLE ACCOUNTADMIN"),
    C("session_server_control", "use_warehouse", "USE WAREHOUSE big"),
    C("session_server_control", "set_variable", "SET polysql_v = 1"),
    C("session_server_control", "begin", "BEGIN"),
    C("session_server_control", "execute_immediate", "EXECUTE IMMEDIATE 'DELETE FROM singer'"),
    C("session_server_control", "call", "CALL polysql_proc()"),
    C("resource_exhaustion", "generator_rows", "SELECT 1 FROM TABLE(GENERATOR(ROWCOUNT => 5000))", {S.TOO_LARGE}),
    C("resource_exhaustion", "big_value", "SELECT REPEAT('x', 3000000)", {S.TOO_LARGE}),
    C("information_leak", "query_history", "SELECT * FROM TABLE(INFORMATION_SCHEMA.QUERY_HISTORY())",
      {S.REJECTED, S.SCHEMA, S.SYNTAX}),
    C("information_leak", "show_users", "SHOW USERS"),
    C("host_info", "current_ip", "SELECT CURRENT_IP_ADDRESS()", {S.OK, S.REJECTED, S.SYNTAX, S.SCHEMA, S.RUNTIME}),
    C("cross_replica", "account_usage", "SELECT * FROM SNOWFLAKE.ACCOUNT_USAGE.QUERY_HISTORY"),
    C("cross_replica", "other_database", "SELECT * FROM OTHERDB.PUBLIC.T"),
    C("special_values", "inf", "SELECT 'inf'::FLOAT", SPECIAL),
    C("special_values", "nan", "SELECT 'NaN'::FLOAT", SPECIAL),
    C("special_values", "max_date", "SELECT TO_DATE('9999-12-31')", SPECIAL),
    C("special_values", "double_overflow", "SELECT 1e308 * 10", SPECIAL),
    C("special_values", "year_1", "SELECT '0001-01-01'::TIMESTAMP", SPECIAL),
]

BIGQUERY = _DUCKDB_READERS + [
    C("file_access", "external_query", "SELECT * FROM EXTERNAL_QUERY('us.conn', 'SELECT 1')"),
    C("file_access", "load_data", "LOAD DATA INTO singer FROM FILES (format = 'CSV', uris = ['gs://b/x.csv'])"),
    C("file_access", "export_data", "EXPORT DATA OPTIONS (uri = 'gs://b/x-*.csv', format = 'CSV') AS SELECT 1"),
    C("file_access", "external_table", "CREATE EXTERNAL TABLE polysql_evil OPTIONS (format = 'CSV', "
      "uris = ['gs://b/x.csv'])"),
    C("ddl_dml", "truncate", "TRUNCATE TABLE singer"),
    C("ddl_dml", "merge", "MERGE singer s USING singer t ON s.Singer_ID = t.Singer_ID WHEN MATCHED THEN DELETE"),
    C("ddl_dml", "create_temp_function", "CREATE TEMP FUNCTION f() AS (1)"),
    C("session_server_control", "declare_set", "DECLARE x INT64; SET x = 1"),
    C("session_server_control", "set_system_variable", "SET @@dataset_id = 'other'"),
    C("session_server_control", "execute_immediate", "EXECUTE IMMEDIATE 'DELETE FROM singer WHERE true'"),
    C("session_server_control", "begin_end", "BEGIN SELECT 1; END"),
    C("session_server_control", "call", "CALL polysql.proc()"),
    C("resource_exhaustion", "array_rows", "SELECT x FROM UNNEST(GENERATE_ARRAY(1, 5000)) AS x", {S.TOO_LARGE}),
    C("resource_exhaustion", "big_value", "SELECT REPEAT('x', 3000000)", {S.TOO_LARGE}),
    C("information_leak", "jobs", "SELECT query FROM `region-us`.INFORMATION_SCHEMA.JOBS",
      {S.REJECTED, S.SCHEMA, S.UNAVAILABLE, S.RUNTIME}),
    C("host_info", "session_user", "SELECT SESSION_USER()", {S.OK, S.REJECTED, S.SYNTAX, S.SCHEMA, S.RUNTIME}),
    C("cross_replica", "other_project", "SELECT * FROM `otherproject.pq_x.singer`"),
    C("cross_replica", "schemata", "SELECT * FROM INFORMATION_SCHEMA.SCHEMATA"),
    C("special_values", "inf", "SELECT CAST('inf' AS FLOAT64)", SPECIAL),
    C("special_values", "nan", "SELECT CAST('nan' AS FLOAT64)", SPECIAL),
    C("special_values", "max_date", "SELECT DATE '9999-12-31'", SPECIAL),
    C("special_values", "year_1", "SELECT TIMESTAMP '0001-01-01 00:00:00'", SPECIAL),
    C("special_values", "numeric_max", "SELECT CAST('99999999999999999999999999999.999999999' AS NUMERIC)", SPECIAL),
    C("special_values", "ieee_divide", "SELECT IEEE_DIVIDE(1, 0)", SPECIAL),
]

#: (engine, case name) -> statuses accepted on the *stand-in* that differ from the case's own,
#: each a stand-in artifact, not the engine's contract (tests run only against stand-ins).
STANDIN_EXPECT: dict[tuple[str, str], frozenset] = {
    # bqemulator cannot cancel a job: after the watchdog gives up, the health probe finds the
    # stand-in still busy with the runaway, so the statement is stored unavailable (never the
    # model's timeout while the server does not answer; README "Untrusted SQL")
    ("bigquery", "cross_join_12"): frozenset({S.TIMEOUT, S.UNAVAILABLE}),
}

CASES: dict[str, list[Case]] = {
    "sqlite": COMMON + SQLITE, "duckdb": COMMON + DUCKDB,
    "postgres": COMMON + POSTGRES, "mysql": COMMON + MYSQL,
    "clickhouse": WAREHOUSE_COMMON + CLICKHOUSE, "snowflake": WAREHOUSE_COMMON + SNOWFLAKE,
    "bigquery": [c for c in WAREHOUSE_COMMON if c.name != "cross_join_13"]
                + [C("resource_exhaustion", "cross_join_12", CROSS_12, {S.TIMEOUT})] + BIGQUERY,
}


#: Cross-replica reads (class ``cross_replica``), per engine: templates run by
#: ``test_isolation.py`` from the attacking run's copy against a *victim* copy another run made
#: (another results folder) on the same server / stand-in / chdb process. ``{db}`` = the victim's
#: database/schema/dataset name, ``{path}`` = a file of the victim run, ``{oid}`` = the victim
#: database's oid (PostgreSQL). Every one must come back
#: refused or without the victim's secret and name.
CROSS_REPLICA: dict[str, list[str]] = {
    "sqlite": ["ATTACH DATABASE '{path}' AS v", "SELECT * FROM v.hidden",
               "SELECT * FROM pragma_table_info('hidden')"],
    "duckdb": ["SELECT * FROM '{path}'", "ATTACH '{path}' AS v (READ_ONLY)", "SELECT * FROM read_duckdb('{path}')",
               "SELECT * FROM duckdb_databases()", "SELECT * FROM pragma_database_list",
               "SELECT current_setting('temp_directory')", "SELECT * FROM duckdb_settings()",
               "SELECT * FROM duckdb_temporary_files()", "SELECT * FROM query('SELECT path FROM duckdb_databases()')"],
    # catalogs of every database (issue 23): names only, yet another copy's name must not be listable
    "postgres": ["SELECT * FROM {db}.public.hidden", "SELECT * FROM dblink('dbname={db}', 'SELECT secret FROM hidden') "
                 "AS t(s text)", "SELECT datname FROM pg_database WHERE datname = '{db}' AND false",
                 "SELECT datname FROM pg_database", "SELECT datname FROM pg_catalog . pg_stat_database",
                 "SELECT datname FROM pg_stat_database_conflicts", "SELECT * FROM pg_shdescription",
                 "SELECT setconfig::text FROM pg_db_role_setting", "SELECT pg_describe_object(1262, {oid}, 0)",
                 "SELECT * FROM pg_identify_object_as_address(1262, {oid}, 0)",
                 # a Unicode-escaped name no client-side check reads: the server's revocation refuses it
                 'SELECT datname FROM U&"pg_d\\0061tabase"'],
    "mysql": ["SELECT secret FROM {db}.hidden", "SELECT secret FROM `{db}`.`hidden`",
              "SELECT table_schema, table_name FROM information_schema.tables WHERE table_name = 'hidden'",
              "SELECT schema_name FROM information_schema.schemata",
              "SELECT * FROM {db}.hidden UNION SELECT 1", "SELECT (SELECT secret FROM {db}.hidden LIMIT 1)",
              "SELECT User FROM mysql.user"],
    "clickhouse": ["SELECT * FROM {db}.hidden", "SELECT * FROM merge(REGEXP('.*'), '^hidden$')",
                   "SELECT * FROM merge('{db}', 'hidden')", "SELECT * FROM `{db}`.`hidden`",
                   "SELECT * FROM view(SELECT * FROM {db}.hidden)", "SELECT database, name FROM system.tables",
                   "SELECT * FROM INFORMATION_SCHEMA.TABLES", "SELECT hasColumnInTable('{db}', 'hidden', 'secret')",
                   "SELECT * FROM loop('{db}', 'hidden') LIMIT 1", "SELECT * FROM mergeTreeIndex('{db}', 'hidden')"],
    "snowflake": ["SELECT * FROM {db}.HIDDEN", "SELECT * FROM POLYSQL.{db}.HIDDEN", 'SELECT * FROM "{db}"."HIDDEN"',
                  "SELECT * FROM INFORMATION_SCHEMA.TABLES", "SELECT * FROM query_table('{db}.HIDDEN')",
                  "SELECT * FROM query('SELECT * FROM {db}.HIDDEN')", "SELECT (SELECT MAX(SECRET) FROM {db}.HIDDEN)"],
    "bigquery": ["SELECT * FROM {db}.hidden", "SELECT * FROM `polysql.{db}.hidden`", "SELECT * FROM `polysql`.`{db}`.`hidden`",
                 "SELECT * FROM {db}.INFORMATION_SCHEMA.TABLES", "SELECT * FROM INFORMATION_SCHEMA.SCHEMATA",
                 "SELECT * FROM query_table('{db}.hidden')", "SELECT (SELECT MAX(secret) FROM {db}.hidden)"],
}


def case_id(case: Case) -> str:
    return f"{case.cls}-{case.name}"


def counts() -> dict[str, dict[str, int]]:
    """Statements per engine and attack class, cross-replica templates included (the figures
    the report quotes)."""
    return {engine: {cls: sum(c.cls == cls for c in cases) + (len(CROSS_REPLICA[engine]) if cls == "cross_replica" else 0)
                     for cls in CLASSES}
            for engine, cases in CASES.items()}
