"""Compaction job: merge each cell folder's part files of a results store into one file.

Usage (Hydra overrides, as every job)::

    python -m jobs.compact results_dir=DIR                 # a local results folder
    python -m jobs.compact results_dir=s3://bucket/prefix  # endpoint/credentials from the env
    python -m jobs.compact results_dir=... wait=false      # refuse instead of waiting for a writer

It takes the store's writer lock (``flock`` locally, the lease object on an object store), so it
never races a sweep writing into the same store; finishes any compaction a crash interrupted;
then merges, per cell folder, every part into one file holding the newest row per key, and
drops ``unavailable/`` rows whose keys are scored now (:meth:`ResultsStore.compact`: journal
first, so a crash at any point leaves a store that reads the same and that the next lock
finishes). Prints one line: folders, part files before and after, rows before and after.
Object-store settings come from the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``; README "Results store").
"""
from __future__ import annotations

from polysql_ray.jobs_cli import REQUIRED, parse_overrides, run_job

PROG = "jobs.compact"
KEYS = {"results_dir": REQUIRED, "wait": True}


def _rows(store, files) -> int:
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(str(f), filesystem=store.location.fs).num_rows for f in files)


def main(argv: list[str]) -> int:
    """Run the job on Hydra override strings; returns the exit code (0 on success)."""
    from polysql_ray.store.parquet import ResultsStore, is_uri
    from polysql_ray.jobs_cli import UsageError

    kv = parse_overrides(argv, KEYS, PROG)
    where = str(kv["results_dir"])
    if not isinstance(kv["wait"], bool):
        raise UsageError(f"wait must be true or false (got {kv['wait']!r})")
    if not is_uri(where):
        from pathlib import Path

        if not (Path(where).expanduser() / "scores").is_dir():
            raise FileNotFoundError(f"no score files under {where}/scores/**/*.parquet")
    store = ResultsStore(where)
    with store.lock(run_id="jobs.compact", wait=kv["wait"]):
        before = store.files() + store.unavailable_files()
        if not before:
            raise FileNotFoundError(f"no score files under {store.uri}/scores/**/*.parquet")
        rows_before = _rows(store, before)
        folders = len({str(f).rsplit("/", 1)[0] for f in before})
        store.compact()
        after = store.files() + store.unavailable_files()
        rows_after = _rows(store, after)
    print(f"{PROG}: {store.uri}: {folders} folders; part files {len(before)} -> {len(after)}; "
          f"rows {rows_before} -> {rows_after} ({rows_before - rows_after} superseded or scored rows dropped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
