"""Load the Parquet results store into DuckDB, deduplicated, with derived counting columns.

The store is ``<results_dir>/scores/**/*.parquet`` with rows of
:data:`polysql_ray.store.schema.SCORE_SCHEMA` (one row per scored prediction). Files are read
with ``read_parquet([...], union_by_name=true)`` so files written by older schema versions
(missing columns) still load. ``results_dir`` may also be an object-store URI
(``s3://bucket/prefix``): the files are then read through pyarrow's filesystem (same rows,
same deduplication; see :func:`store_location`).

Deduplication. A rerun or a rescoring may store the same prediction twice. We keep, per
*analysis key* ``(model, dataset, dialect, instruction_level, question_id)``, the row with
the latest ``scored_at`` (ties broken by file name, then ``key``, descending, so the choice is
deterministic). Since the store ``key`` is a function of the analysis key plus the generator
and comparison-policy fingerprints, this also keeps the latest row per ``key``; and when one
question was scored under two comparison policies, only the latest scoring counts (filter
with ``policy_version=`` to pin one). All statistics need exactly one verdict per question
per cell, which is why we deduplicate on the analysis key.

This is the one EX definition of the project: the run's end-of-run EX table
(:mod:`polysql_ray.pipeline.summary`), the statistics job and the leaderboard all read the
store through :func:`load_scores` and count with :func:`polysql_ray.statistics.ex.ex_table`.

Counting policy (:class:`CountingPolicy`): a gold error (``verdict == "gold_error"``) is not the
model's fault, and neither is an unavailable target engine (``reason == "pred_unavailable"``):
such rows are *excluded* from the EX denominator and reported separately. Timeouts count as
incorrect in EX and are also reported separately, with an EX that excludes them
(README "Untrusted SQL": "report EX with and without timeouts").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # duckdb loads where a connection is opened (driver memory during a run)
    import duckdb

#: Columns that identify one question inside one evaluation cell, under one comparison policy
#: (``policy``: a run with ``policies=[...]`` stores one row per policy).
ANALYSIS_KEY = ("model", "dataset", "dialect", "instruction_level", "policy", "question_id")
#: Columns that identify one evaluation cell (one EX value) of one policy's rows (the statistics
#: read one policy at a time: :func:`load_scores` ``policy=``; the run's EX table adds ``policy``).
CELL = ("model", "dataset", "dialect", "instruction_level")
#: Columns that pair the same question across dialects (kappa, McNemar), within one policy.
PAIR_KEY = ("model", "dataset", "instruction_level", "policy", "question_id")
#: The name rows stored before the ``policy`` column existed are read under.
LEGACY_POLICY = "default"

#: Name of the deduplicated temporary table created by :func:`load_scores`.
SCORES_TABLE = "scores"


@dataclass(frozen=True)
class CountingPolicy:
    """Which rows count in the EX denominator, and which rows are timeouts.

    Attributes:
        excluded_verdicts: verdicts removed from the denominator (not the model's fault).
        excluded_reasons: reason codes removed from the denominator.
        timeout_statuses: ``pred_status`` values that mean the prediction timed out.
        timeout_reasons: ``reason`` values that mean the prediction timed out.
        version: recorded with every snapshot.
    """

    excluded_verdicts: tuple[str, ...] = ("gold_error", "unavailable")
    excluded_reasons: tuple[str, ...] = ("pred_unavailable",)
    timeout_statuses: tuple[str, ...] = ("timeout",)
    timeout_reasons: tuple[str, ...] = ("pred_timeout",)
    version: str = "counting-1"


DEFAULT_COUNTING = CountingPolicy()


def sql_list(values: tuple[str, ...] | list[str]) -> str:
    """Render strings as a SQL literal list ``('a', 'b')`` with quotes escaped.

    Used for constant policy data only (never for untrusted SQL). Empty input gives
    ``(NULL)`` so ``x IN (NULL)`` is never true.
    """
    if not values:
        return "(NULL)"
    return "(" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + ")"


def store_location(results_dir):
    """The opened store root of ``results_dir``: a :class:`~polysql_ray.store.parquet.ResultsStore`
    (its own location and settings), a local folder, or an object-store URI (``s3://bucket/prefix``,
    endpoint and credentials from the environment: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID`` ...).
    Returns a :class:`~polysql_ray.store.parquet.StoreLocation`."""
    from polysql_ray.store.parquet import ResultsStore, open_location

    if isinstance(results_dir, ResultsStore):
        return results_dir.location
    return open_location(results_dir)


#: ``(path, problem)`` of the damaged parts already reported by this process (one warning each,
#: however many times a job lists the store).
_WARNED: set[tuple[str, str]] = set()


def store_files(results_dir) -> list:
    """Sorted readable Parquet files of the store: ``<results_dir>/scores/**`` and the pending
    ``<results_dir>/unavailable/`` rows (verdict ``unavailable``: counted apart, never in EX; a
    scored row of the same key always wins in :func:`load_scores`). A damaged file (truncated,
    not Parquet, a checksum that does not match) is skipped with one warning per process.

    Args:
        results_dir: a local folder, an object-store URI or a ``ResultsStore`` (:func:`store_location`).

    Returns:
        ``Path`` objects for a local store; filesystem paths (``bucket/prefix/scores/...``) for
        an object store.

    Raises:
        FileNotFoundError: no readable Parquet file in either folder.
    """
    import sys

    from polysql_ray.store.parquet import damaged_part, list_files

    loc = store_location(results_dir)
    root = loc.join("scores")
    files = list_files(loc, root) + list_files(loc, loc.join("unavailable"), recursive=False)
    for bad in [p for p in files if damaged_part(p, loc.fs) is not None]:
        problem = damaged_part(bad, loc.fs)  # verified once per process (checksum, footer)
        files.remove(bad)
        if problem == "vanished" or (bad, problem) in _WARNED:
            continue
        _WARNED.add((bad, problem))
        print(f"polysql_ray: warning: skipping damaged part file {loc.display(bad)} "
              f"({problem}); the next run quarantines it and rescores its rows", file=sys.stderr)
    if not files:
        raise FileNotFoundError(f"no score files under {loc.display(root)}/**/*.parquet")
    return [loc.out(p) for p in files]


def _raw_source(con: duckdb.DuckDBPyConnection, loc, files: list) -> str:
    """A DuckDB relation text over the part files, with a ``filename`` column: DuckDB's own
    ``read_parquet`` for a local store; for an object store, the files read through the
    store's pyarrow filesystem (DuckDB's httpfs extension is not needed) and registered as
    one Arrow table (memory: the rows read, after the ``WHERE`` of the caller)."""
    if loc.local:
        file_list = "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"
        return f"read_parquet({file_list}, union_by_name=true, filename=true)"
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for f in files:
        t = pq.read_table(str(f), filesystem=loc.fs)
        tables.append(t.append_column("filename", pa.array([loc.display(str(f))] * t.num_rows, pa.string())))
    con.register("_store_parts", pa.concat_tables(tables, promote_options="permissive"))
    return "_store_parts"


@dataclass(frozen=True)
class LoadSummary:
    """What :func:`load_scores` read.

    Attributes:
        files: number of Parquet files.
        rows_read: rows in all files (after the optional policy filter).
        rows_kept: rows after deduplication (one per analysis key).
        policy_versions: sorted distinct ``policy_version`` values among kept rows.
    """

    files: int
    rows_read: int
    rows_kept: int
    policy_versions: tuple[str, ...]

    @property
    def duplicates_dropped(self) -> int:
        """Rows superseded by a later scoring of the same analysis key."""
        return self.rows_read - self.rows_kept


def load_scores(
    results_dir: str | Path,
    con: duckdb.DuckDBPyConnection | None = None,
    policy_version: str | None = None,
    counting: CountingPolicy = DEFAULT_COUNTING,
    exclude_generators: tuple[str, ...] = (),
    cell_keys: list[str] | None = None,
    only_generators: tuple[str, ...] = (),
    columns: tuple[str, ...] | None = None,
    files: list[Path] | None = None,
    policy: str | None = None,
    exclude_model_prefixes: tuple[str, ...] = (),
) -> tuple[duckdb.DuckDBPyConnection, LoadSummary]:
    """Create the deduplicated temp table ``scores`` in a DuckDB connection.

    Args:
        results_dir: the results directory (the store lives in its ``scores/`` folder): a
            local folder, an object-store URI or a ``ResultsStore`` (:func:`store_location`).
        con: connection to use; a new in-memory one when None.
        policy_version: keep only rows scored under this comparison policy version.
        counting: the counting policy that defines the derived columns.
        exclude_generators: leave out rows whose ``generator`` is one of these (``gold``).
        only_generators: keep only rows of these generators (``("gold",)`` for the
            gold-portability ceiling); empty keeps all.
        cell_keys: keep only rows of these store cells (``cell_key``); the end-of-run EX
            table of :mod:`polysql_ray.pipeline.summary` passes the run's cells.
        columns: store columns to load (the analysis key, ``key``, ``scored_at``,
            ``verdict``, ``reason``, ``pred_status`` and ``policy_version`` are always added);
            None loads all. A subset keeps SQL texts and errors out of memory on big stores.
        files: the part files to read, as :func:`store_files` lists them (a caller loading
            the store several times lists it once); None lists them here.
        policy: keep only rows scored under the comparison policy of this name (column
            ``policy``; rows stored without it count as :data:`LEGACY_POLICY`); None keeps
            every policy (deduplicated per policy: :data:`ANALYSIS_KEY`).
        exclude_model_prefixes: leave out rows whose ``model`` starts with one of these
            (``native_gold_``: the native-gold study's replayed gold, not a model).

    Returns:
        ``(con, summary)``. Table ``scores`` has all store columns plus
        ``excluded`` (bool: not in the EX denominator), ``is_pass`` (bool),
        ``is_timeout`` (bool), ``is_gold_error`` (bool).

    Raises:
        FileNotFoundError: the store has no Parquet file.
    """
    loc = store_location(results_dir)
    files = store_files(results_dir) if files is None else files
    if con is None:
        import duckdb

        con = duckdb.connect()
    conds = []
    if policy_version is not None:
        conds.append("policy_version = " + sql_list([policy_version])[1:-1])
    if exclude_generators:
        conds.append(f"coalesce(generator, '') NOT IN {sql_list(exclude_generators)}")
    if only_generators:
        conds.append(f"coalesce(generator, '') IN {sql_list(only_generators)}")
    for prefix in exclude_model_prefixes:
        conds.append("NOT starts_with(model, " + sql_list([prefix])[1:-1] + ")")
    if cell_keys is not None:
        conds.append(f"cell_key IN {sql_list(sorted(set(cell_keys)))}")
    source = _raw_source(con, loc, files)
    # the policy column is additive: a store written before it reads every row as the default's
    present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()}
    named = "policy" in present
    policy_expr = f"coalesce(policy, '{LEGACY_POLICY}')" if named else f"'{LEGACY_POLICY}'"
    if policy is not None:
        conds.append(f"{policy_expr} = " + sql_list([policy])[1:-1])
    where = ("WHERE " + " AND ".join(conds)) if conds else ""
    # additive columns (suite EX, policy) may be absent from every file of an older store: select
    # only what the files hold, then add the rest as NULL columns (same names, same types)
    select = f"* REPLACE ({policy_expr} AS policy)" if named else f"*, {policy_expr} AS policy"
    if columns is not None:
        need = dict.fromkeys((*ANALYSIS_KEY, "key", "scored_at", "verdict", "reason", "pred_status",
                              "policy_version", *columns, "filename"))
        select = ", ".join(f"{policy_expr} AS policy" if c == "policy" else f'"{c}"' for c in need
                           if c in present or c in ("filename", "policy"))
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE raw_scores AS "
        f"SELECT {select} FROM {source} {where}"
    )
    if not loc.local:
        con.unregister("_store_parts")
    _add_missing_columns(con, "raw_scores", present, None if columns is None else set(columns))
    key = ", ".join(ANALYSIS_KEY)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {SCORES_TABLE} AS
        SELECT * EXCLUDE (filename, _rn),
            (verdict IN {sql_list(counting.excluded_verdicts)}
             OR coalesce(reason, '') IN {sql_list(counting.excluded_reasons)}) AS excluded,
            (verdict = 'pass') AS is_pass,
            (verdict = 'gold_error') AS is_gold_error,
            (coalesce(pred_status, '') IN {sql_list(counting.timeout_statuses)}
             OR coalesce(reason, '') IN {sql_list(counting.timeout_reasons)}) AS is_timeout
        FROM (
            SELECT *, row_number() OVER (
                PARTITION BY {key}
                ORDER BY (verdict = 'unavailable') ASC NULLS FIRST, scored_at DESC NULLS LAST,
                         filename DESC, key DESC) AS _rn
            FROM raw_scores)
        WHERE _rn = 1
        """
    )
    rows_read = con.execute("SELECT count(*) FROM raw_scores").fetchone()[0]
    rows_kept = con.execute(f"SELECT count(*) FROM {SCORES_TABLE}").fetchone()[0]
    versions = tuple(
        r[0]
        for r in con.execute(
            f"SELECT DISTINCT coalesce(policy_version, '') FROM {SCORES_TABLE} ORDER BY 1"
        ).fetchall()
    )
    con.execute("DROP TABLE raw_scores")
    return con, LoadSummary(len(files), rows_read, rows_kept, versions)


def _add_missing_columns(con, table: str, present: set[str], wanted: set[str] | None) -> None:
    """Add each additive store column (:data:`~polysql_ray.store.schema.SUITE_COLUMNS`) that
    ``wanted`` names (all of them when None) and the files lack, as a NULL column of its type."""
    from polysql_ray.store.schema import SCORE_SCHEMA, SUITE_COLUMNS

    types = {"string": "VARCHAR", "int64": "BIGINT"}
    for c in SUITE_COLUMNS:
        if c not in present and (wanted is None or c in wanted):
            con.execute(f'ALTER TABLE {table} ADD COLUMN "{c}" {types[str(SCORE_SCHEMA.field(c).type)]}')


def dataset_index(results_dir: str | Path) -> tuple[dict, dict]:
    """Question texts and source databases of the datasets the store's runs used.

    Reads every run manifest (``<results_dir>/runs/*/manifest.json``, composed config), loads
    each dataset it names again (every distinct config of a name: runs on other subsets), and returns ``(question by (dataset, question_id), (engine,
    location) of the source database by (dataset, db_id))``. A dataset that cannot be loaded
    any more (moved folder) is left out; both maps are empty when no manifest exists.
    """
    import json

    from polysql_ray.datasets.registry import load_dataset

    from polysql_ray.store.parquet import list_files, read_bytes

    loc = store_location(results_dir)
    configs: dict[str, list[dict]] = {}  # every distinct config of a name (runs on subsets of it)
    manifests = [m for m in list_files(loc, loc.join("runs"), suffix="/manifest.json")
                 if m.count("/") == loc.join("runs").count("/") + 2]  # runs/<run_id>/manifest.json
    for mf in manifests:
        try:
            cfg = json.loads(read_bytes(loc, mf).decode("utf-8")).get("config") or {}
        except (OSError, ValueError):
            continue
        sweep_ds = (cfg.get("sweep") or {}).get("datasets") or []
        for d in [cfg.get("dataset"), *sweep_ds]:
            if isinstance(d, dict) and d.get("name") and d not in configs.setdefault(d["name"], []):
                configs[d["name"]].append(d)
    text, sources = {}, {}
    for name, cfg in [(n, c) for n in sorted(configs) for c in configs[n]]:
        try:
            examples = load_dataset(cfg)
        except Exception:  # noqa: BLE001 - a dataset that moved only costs the question text
            continue
        for e in examples:
            text[(name, e.question_id)] = e.question
            if e.database.exists:
                sources[(name, e.db_id)] = (e.database.engine, e.database.location)
    return text, sources
