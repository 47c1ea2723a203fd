"""BigQuery engine through google-cloud-bigquery: one dataset per (dataset, db_id).

Behaviour as data: :data:`DEFAULTS`, :data:`REASON_STATUS` (BigQuery error ``reason`` ->
status), :data:`MESSAGE_STATUS` (message patterns for ``invalidQuery``, which covers syntax,
schema and GROUP BY errors alike), :data:`DENIED_FUNCTIONS`.

Per statement (BigQuery docs "Dry run", "Control costs", REST ``jobs.query``):

1. guard: exactly one SELECT/WITH statement, denied functions refused;
2. a **dry run** validates the statement and reports ``total_bytes_processed`` before anything
   runs; over ``maximum_bytes_billed`` -> TOO_LARGE without executing;
3. the query job runs with ``maximum_bytes_billed`` (the server refuses to bill more),
   ``job_timeout_ms`` = ``Limits.timeout_s`` (the server cancels), no query cache, the replica
   dataset as default dataset; a client-side watchdog (:mod:`~polysql_ray.engines.watchdog`)
   bounds dry run, job and fetch together by ``timeout_s + client_grace_s`` and cancels the
   job (its id is chosen client-side, so even a job whose insert never returned) when it
   gives up (TIMEOUT): bqemulator enforces no job timeout and runs even dry runs;
4. row cap from the result's ``total_rows`` before any row is fetched; rows as Arrow
   (``create_bqstorage_client=False``: REST only).

Credentials: Application Default Credentials (``google.auth.default``); ``anonymous: true`` is
accepted only together with an ``api_endpoint`` (a loopback emulator in tests). Read-only is
the credentials' job: give the evaluating principal ``roles/bigquery.dataViewer`` on the replica
datasets and ``roles/bigquery.jobUser`` on the project, nothing else.

One copy per statement: give the evaluating principal ``dataViewer`` on the replica datasets of
the run only (dataset-level IAM); beyond that, and because the emulator has no IAM, the engine
refuses client-side (:meth:`BigQueryEngine.scope_refusal`, ``guard.standin_refusal``) any name of
another copy's dataset (``pq_*``), of another project, of ``INFORMATION_SCHEMA``, a file where a
table goes and every DuckDB file reader the installed DuckDB offers.

Stand-in: tests run against bqemulator (DuckDB underneath, queries translated by sqlglot). It
is liberal: DuckDB functions and file reads work there (refused client-side, above), it enforces
neither job timeouts nor byte limits, and it reports 0 bytes in dry runs.
"""
from __future__ import annotations

import contextlib
import re
from typing import Any

from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.declaration import ConnectionBehaviour, Semantics, StructuralFacts
from polysql_ray.engines.identifiers import IdentifierRules
from polysql_ray.engines.servers import ServerEngine
from polysql_ray.extras import require

S = ExecStatus

#: Default settings (conf/engine/bigquery.yaml mirrors them).
DEFAULTS: dict[str, Any] = dict(project=None, location="US", api_endpoint=None, anonymous=False,
                                credentials_file=None, maximum_bytes_billed=1_000_000_000,
                                client_grace_s=10.0)

#: BigQuery error ``reason`` (``errors[0].reason``) -> status.
REASON_STATUS: dict[str, ExecStatus] = {
    "notFound": S.SCHEMA,               # table (a missing *dataset* is matched first, below)
    "duplicate": S.RUNTIME,
    "bytesBilledLimitExceeded": S.TOO_LARGE,
    "responseTooLarge": S.TOO_LARGE,
    "resourcesExceeded": S.RUNTIME,
    "accessDenied": S.REJECTED,
    "timeout": S.TIMEOUT,
    "stopped": S.TIMEOUT,               # job cancelled
    "quotaExceeded": S.UNAVAILABLE,
    "rateLimitExceeded": S.UNAVAILABLE,
    "backendError": S.UNAVAILABLE,
    "internalError": S.UNAVAILABLE,
    "invalidQuery": S.RUNTIME,          # refined by MESSAGE_STATUS
    "invalid": S.RUNTIME,
}

#: (message regex, status), first match wins; checked before :data:`REASON_STATUS`.
MESSAGE_STATUS: tuple[tuple[str, ExecStatus], ...] = (
    (r"Not found: Dataset", S.UNAVAILABLE),
    (r"Syntax error|Unexpected keyword|Unexpected identifier|Parser Error", S.SYNTAX),
    (r"No matching signature for operator|Cannot compare values", S.RUNTIME),
    (r"Function not found|No matching signature|No function matches|neither grouped nor aggregated"
     r"|must appear in the GROUP BY|Scalar Function with name .* does not exist", S.SYNTAX),
    (r"Unrecognized name|Name .* not found inside|not found in FROM clause|Not found: Table"
     r"|Column name .* is ambiguous|Ambiguous reference|Table with name .* does not exist", S.SCHEMA),
    (r"[Dd]ivision by zero|Bad (int64|double|numeric) value|Could not cast|Conversion Error", S.RUNTIME),
)

#: Functions refused before execution: cross-system reads (``EXTERNAL_QUERY``) and, for the
#: DuckDB-backed emulator, DuckDB's file readers (not GoogleSQL; BigQuery says "not found").
DENIED_FUNCTIONS: frozenset[str] = frozenset({
    "external_query", "read_csv", "read_csv_auto", "read_text", "read_blob", "read_parquet",
    "read_json", "read_json_auto", "read_ndjson", "parquet_scan", "glob",
})


#: Datasets that list every copy (refused as qualifiers, see ``guard.standin_refusal``).
CATALOGS: frozenset[str] = frozenset({"information_schema"})


def classify_error(exc: BaseException) -> ExecStatus:
    """Status of a google-api-core exception: message patterns, then reason, then HTTP code."""
    msg = str(exc)
    for pattern, status in MESSAGE_STATUS:
        if re.search(pattern, msg):
            return status
    errors = getattr(exc, "errors", None) or []
    reason = errors[0].get("reason") if errors and isinstance(errors[0], dict) else None
    if reason in REASON_STATUS:
        return REASON_STATUS[reason]
    code = getattr(exc, "code", None)
    if isinstance(code, int) and (code >= 500 or code in (401, 429)):
        return S.UNAVAILABLE
    return S.RUNTIME


def dataset_name(dataset: str, db_id: str, tag: str = "") -> str:
    """Replica dataset ``pq_<dataset>_<db_id>[_<tag>]`` (letters, digits, underscores)."""
    from polysql_ray.engines.servers import replica_name

    return replica_name(dataset, db_id, tag=tag)


def make_client(settings: dict):
    """A ``bigquery.Client`` from settings: ADC (Application Default Credentials:
    ``GOOGLE_APPLICATION_CREDENTIALS`` or ``gcloud auth application-default login``), or the
    service-account key file ``credentials_file``, or -- only with an ``api_endpoint`` (an
    emulator) -- ``anonymous``. No credential is ever a setting's value.

    Raises ValueError for ``anonymous`` without an endpoint (never against Google)."""
    bigquery = require("google.cloud.bigquery", "the bigquery engine")

    kw: dict[str, Any] = {}
    if settings.get("api_endpoint"):
        from google.api_core.client_options import ClientOptions

        kw["client_options"] = ClientOptions(api_endpoint=settings["api_endpoint"])
    if settings.get("anonymous"):
        if not settings.get("api_endpoint"):
            raise ValueError("engines.bigquery.anonymous=true needs an api_endpoint (an emulator)")
        from google.auth.credentials import AnonymousCredentials

        kw["credentials"] = AnonymousCredentials()
    elif settings.get("credentials_file"):
        from google.oauth2 import service_account

        kw["credentials"] = service_account.Credentials.from_service_account_file(
            settings["credentials_file"])
    return bigquery.Client(project=settings.get("project"), location=settings.get("location"), **kw)


class BigQueryEngine(ServerEngine):
    """BigQuery engine (``dialect = "bigquery"``); ``location`` is the replica dataset id.

    Args:
        settings: mapping with :data:`DEFAULTS` keys (``project``, ``api_endpoint`` ...).
    """

    tokenizer_guard = True  # servers.warehouse_refusal before sending
    name = "bigquery"
    dialect = "bigquery"
    settings = {}
    # BigQuery "Lexical structure": table names case-sensitive, column names case-insensitive
    identifiers = IdentifierRules(fold=None, tables_ci=False, columns_ci=True, quote="`")
    semantics = Semantics(
        integer_division=False,  # "Operators: Arithmetic operators": INT64 / INT64 is FLOAT64 (DIV is
                                 # integer division)
        nulls_asc="first", nulls_desc="last",  # "Query syntax: ORDER BY clause": NULLS FIRST is the
                                               # default for ASC, NULLS LAST for DESC
        ci_equals=False,         # "Collation": the default is binary (case-sensitive)
        ci_like=False,           # "Operators: LIKE": case-sensitive under the default collation
        empty_sum_null=True,     # "Aggregate functions: SUM": NULL if the input contains no rows
        string_number="error",   # "Conversion rules": no implicit coercion between STRING and INT64 /
                                 # FLOAT64 (no matching signature for operator =)
    )
    structural = StructuralFacts()  # nothing proven across it yet
    # BigQuery: a time zone-less TIMESTAMP is a DATETIME.
    type_map = {"SMALLINT": "INT64", "INTEGER": "INT64", "BIGINT": "INT64", "DOUBLE": "FLOAT64",
                "VARCHAR": "STRING", "BLOB": "BYTES", "DECIMAL": "NUMERIC", "BOOLEAN": "BOOL",
                "DATE": "DATE", "TIMESTAMP": "DATETIME"}
    varchar_with_length = "STRING"
    writer = "polysql_ray.replication.bigquery_writer:BigQueryWriter"
    reader = None
    sandbox = {"dry_run_first": True, "maximum_bytes_billed": DEFAULTS["maximum_bytes_billed"],
               "job_timeout_ms": "limits.timeout_s", "use_query_cache": False,
               "credentials": "roles/bigquery.dataViewer + roles/bigquery.jobUser only"}
    error_table = {**REASON_STATUS, **dict(MESSAGE_STATUS)}
    denied_functions = DENIED_FUNCTIONS
    transient_unavailable = False
    connection = ConnectionBehaviour("client")
    prompt_rules = "bigquery.yaml"
    unreachable = "bigquery unreachable"

    def __init__(self, settings: dict | None = None) -> None:
        self.settings = {**DEFAULTS, **(settings or {})}
        self.queries = 0
        self._client = None
        #: dry-run bytes of the last statement (reported before it ran)
        self.last_dry_run_bytes: int | None = None

    def identity(self) -> dict:
        """BigQuery publishes no server version: the endpoint and location identify it; a
        stand-in when ``api_endpoint`` is set to anything but ``*.googleapis.com``
        (``standin`` setting: its name). No request is made."""
        endpoint = self.settings.get("api_endpoint")
        real = not endpoint or "googleapis.com" in str(endpoint)
        standin = "" if real else str(self.settings.get("standin") or f"stand-in at {endpoint}")
        return {"product": "BigQuery", "version": "", "standin": standin,
                "settings": {"location": str(self.settings.get("location")),
                             "maximum_bytes_billed": str(self.settings.get("maximum_bytes_billed"))},
                "endpoint": str(endpoint or "bigquery.googleapis.com")}

    @property
    def client(self):
        """The BigQuery client (google-cloud-bigquery ``Client``), made on first use from the
        engine settings (Application Default Credentials, or an emulator endpoint)."""
        if self._client is None:
            self._client = make_client(self.settings)
        return self._client

    # ------------------------------------------------------------------ execution hooks
    def driver_errors(self) -> tuple[tuple, tuple]:
        """API call errors on a statement; retry exhaustion, socket errors, bad settings and
        missing credentials when making the client."""
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as gauth

        unreachable = (gexc.RetryError, OSError, ValueError, gauth.DefaultCredentialsError)
        return (gexc.GoogleAPICallError, *unreachable), unreachable

    @contextlib.contextmanager
    def acquire(self, limits: Limits, location: str = ""):
        """The one client, as a lease (never discarded: it holds no session)."""
        from polysql_ray.engines.servers import Lease

        yield Lease(self.client)

    def run(self, lease, location: str, sql: str, limits: Limits) -> ExecutionResult:
        """Dry run (TOO_LARGE past ``maximum_bytes_billed``), then the job with
        ``job_timeout_ms``; the client cancels it after ``timeout_s + client_grace_s``."""
        import concurrent.futures
        import time
        import uuid

        bigquery = require("google.cloud.bigquery", "the bigquery engine")

        from polysql_ray.engines.watchdog import DeadlineExceeded, call_with_deadline

        t0 = time.perf_counter()
        client = lease.conn
        cap = int(self.settings["maximum_bytes_billed"])
        default = f"{client.project}.{location}"
        job_id = f"polysql_{uuid.uuid4().hex}"  # chosen here, so the job can be cancelled even
        deadline = limits.timeout_s + float(self.settings["client_grace_s"])  # if submit hangs

        def dry_run_then_run():
            dry = client.query(sql, job_config=bigquery.QueryJobConfig(
                dry_run=True, use_query_cache=False, default_dataset=default))
            self.last_dry_run_bytes = int(dry.total_bytes_processed or 0)
            if self.last_dry_run_bytes > cap:
                return ExecutionResult.failure(
                    S.TOO_LARGE, f"dry run: would process {self.last_dry_run_bytes} bytes > "
                    f"maximum_bytes_billed={cap}")
            job = client.query(sql, job_id=job_id, job_retry=None, job_config=bigquery.QueryJobConfig(
                use_query_cache=False, default_dataset=default, maximum_bytes_billed=cap,
                job_timeout_ms=int(limits.timeout_s * 1000)))
            rows = job.result(timeout=deadline, max_results=limits.row_cap + 1)
            if rows.total_rows is not None and rows.total_rows > limits.row_cap:
                return ExecutionResult.failure(S.TOO_LARGE, f"{rows.total_rows} rows > row cap {limits.row_cap}")
            return ExecutionResult(S.OK, rows.to_arrow(create_bqstorage_client=False), None)

        try:
            return call_with_deadline(dry_run_then_run, deadline, on_timeout=lambda: client.cancel_job(
                job_id, location=client.location, timeout=5))
        except (DeadlineExceeded, concurrent.futures.TimeoutError) as e:
            if self._client is client:  # a fresh client (HTTP session) for the next statement; the
                self._client = None     # abandoned call still holds the old one, left unclosed
            return ExecutionResult.failure(
                S.TIMEOUT, f"client gave up after {time.perf_counter() - t0:.1f}s and cancelled job {job_id} "
                f"(job_timeout_ms={int(limits.timeout_s * 1000)} not enforced by the server; {e})")

    def scope_refusal(self, sql: str, location: str):
        """``guard.standin_refusal``: DuckDB file readers (derived), replacement scans, another
        copy's dataset (``pq_*``), another project, ``INFORMATION_SCHEMA``."""
        from polysql_ray.engines.guard import standin_refusal
        from polysql_ray.engines.servers import REPLICA_PREFIX

        return standin_refusal(sql, self.dialect, location, REPLICA_PREFIX + ".*", CATALOGS,
                               self.settings.get("project"), DENIED_FUNCTIONS)

    def failure(self, e: BaseException, lease, limits: Limits, elapsed_s: float) -> ExecutionResult:
        """:func:`classify_error` for API errors; the rest means BigQuery is unreachable."""
        from google.api_core import exceptions as gexc

        if isinstance(e, gexc.GoogleAPICallError):
            return ExecutionResult.failure(classify_error(e), str(e), elapsed_s)
        return ExecutionResult.failure(S.UNAVAILABLE, f"{self.unreachable}: {e}", elapsed_s)

    def ping(self) -> None:
        """``SELECT 1`` as a job of a fresh client (its own HTTP session), closed after."""
        client = make_client(self.settings)
        try:
            client.query("SELECT 1", job_retry=None).result(timeout=float(self.settings.get("health_probe_s", 10.0)))
        finally:
            client.close()

    def close(self) -> None:
        """Close the HTTP session."""
        if self._client is not None:
            self._client.close()
            self._client = None
