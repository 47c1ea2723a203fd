"""Replication job: make verified copies of source databases in a target engine.

Usage (Hydra overrides, as every job)::

    python -m jobs.replicate source_dir=../shared/data/spider/database [dataset=spider] \
        [target=duckdb] [out=replicas] [force=false]

Prints one line per database (reused / built, seconds, dropped constraints) and exits 1 if
any copy failed. The pipeline calls :func:`ensure_replicas` directly.
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.jobs_cli import REQUIRED, parse_overrides, run_job
from polysql_ray.replication.base import Replica, ReplicationError, replicate


def ensure_replicas(sources: list[SourceDatabase], target: str, replicas_dir: Path,
                    strict: bool = False) -> dict[tuple[str, str], Replica]:
    """Make or reuse a verified copy of every existing source in ``target``.

    Args:
        sources: source databases; those with ``exists`` False (Spider's ``wta_1``) are skipped
            (their examples carry a gold error) and absent from the result.
        target: target engine name with a registered writer (``duckdb``).
        replicas_dir: root folder of copies/manifests.
        strict: raise on the first failed copy instead of leaving it out.

    Returns: ``(dataset, db_id) -> Replica`` for every copy that verified (a failed copy is
    left out unless ``strict``; its examples should then be reported, not crash the run).

    Raises: :class:`ReplicationError` when ``strict`` and a copy fails.
    """
    out: dict[tuple[str, str], Replica] = {}
    seen = set()
    for s in sources:
        key = (s.dataset, s.db_id)
        if key in seen or not s.exists:
            continue
        seen.add(key)
        try:
            out[key] = replicate(s, target, replicas_dir)
        except ReplicationError:
            if strict:
                raise
    return out


def _sources_from_dir(source_dir: Path, dataset: str) -> list[SourceDatabase]:
    """Spider layout: ``<dir>/<db_id>/<db_id>.sqlite``."""
    out = []
    for d in sorted(p for p in Path(source_dir).iterdir() if p.is_dir()):
        f = d / f"{d.name}.sqlite"
        out.append(SourceDatabase(dataset, d.name, "sqlite", str(f.resolve()), f.exists()))
    return out


PROG = "jobs.replicate"
KEYS = {"source_dir": REQUIRED, "dataset": "spider", "target": "duckdb", "out": "replicas",
        "force": False}


def main(argv: list[str]) -> int:
    """Replicate every database of ``source_dir``; returns the exit code (1 if a copy failed)."""
    kv = parse_overrides(argv, KEYS, PROG)
    source_dir = Path(str(kv["source_dir"]))
    if not source_dir.is_dir():
        raise NotADirectoryError(f"source_dir={source_dir} is not a folder "
                                 f"(expected <source_dir>/<db_id>/<db_id>.sqlite)")
    failed = 0
    for s in _sources_from_dir(source_dir, str(kv["dataset"])):
        if not s.exists:
            print(f"{s.db_id}: source missing ({s.location})")
            continue
        try:
            r = replicate(s, str(kv["target"]), Path(str(kv["out"])), force=bool(kv["force"]))
        except ReplicationError as e:
            failed += 1
            print(f"{s.db_id}: FAILED {e}")
            continue
        m = r.manifest
        print(f"{s.db_id}: {'reused' if r.reused else 'built'} {r.location} "
              f"({m.seconds:.2f}s, {len(m.tables)} tables, "
              f"{len(m.dropped_constraints)} dropped constraints)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
