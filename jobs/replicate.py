"""Replication job: make verified copies of source databases in a target engine.

Usage (Hydra overrides, as every job)::

    python -m jobs.replicate source_dir=../shared/data/spider/database [dataset=spider] \
        [target=duckdb] [out=replicas] [force=false] [types=declared|storage] \
        ['db_ids=[concert_singer,pets_1]']

Prints one line per database (reused / built, seconds, dropped constraints, tables whose
certificate verified), then the per-column type decisions (columns per type, every column whose
declared type was not kept, with its count and examples), and exits 1 if any copy failed. The pipeline calls :func:`ensure_replicas` directly.
"""
from __future__ import annotations

from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.jobs_cli import REQUIRED, UsageError, parse_overrides, run_job
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
        "force": False, "types": "declared", "db_ids": ""}


def main(argv: list[str]) -> int:
    """Replicate every database of ``source_dir`` (or the comma-separated ``db_ids``) and print
    the per-column type decisions; returns the exit code (1 if a copy failed)."""
    kv = parse_overrides(argv, KEYS, PROG)
    source_dir = Path(str(kv["source_dir"]))
    if not source_dir.is_dir():
        raise NotADirectoryError(f"source_dir={source_dir} is not a folder "
                                 f"(expected <source_dir>/<db_id>/<db_id>.sqlite)")
    from polysql_ray.replication.base import WRITERS

    if str(kv["target"]) not in WRITERS:
        raise UsageError(f"target={kv['target']}: no target writer; known: {sorted(WRITERS)}")
    if str(kv["types"]) not in ("declared", "storage"):
        raise UsageError(f"types={kv['types']}: expected types=declared or types=storage")
    failed = 0
    manifests = []
    raw = kv["db_ids"]
    wanted = {str(d) for d in raw} if isinstance(raw, (list, tuple)) else \
        {d for d in str(raw or "").split(",") if d}
    for s in _sources_from_dir(source_dir, str(kv["dataset"])):
        if wanted and s.db_id not in wanted:
            continue
        if not s.exists:
            print(f"{s.db_id}: source missing ({s.location})")
            continue
        try:
            r = replicate(s, str(kv["target"]), Path(str(kv["out"])), force=bool(kv["force"]),
                          types=str(kv["types"]))
        except ReplicationError as e:
            failed += 1
            print(f"{s.db_id}: FAILED {e}")
            continue
        m = r.manifest
        manifests.append(m)
        print(f"{s.db_id}: {'reused' if r.reused else 'built'} {r.location} "
              f"({m.seconds:.2f}s, {len(m.tables)} tables, "
              f"{len(m.dropped_constraints)} dropped constraints, certificate verified: "
              f"{len(m.checksums)} tables)")
        for name, how in m.schema_names.items():
            print(f"  qualified {name}.<table>: {how}")
    print(type_report(manifests))
    return 1 if failed else 0


def type_report(manifests) -> str:
    """Per-column type decisions over ``manifests``: columns per logical type (declared length
    counted apart), renamed names, and every fallback with its count and examples."""
    import collections

    kinds: collections.Counter = collections.Counter()
    fallbacks, renamed = [], 0
    for m in manifests:
        renamed += len(m.names)
        for t in m.tables:
            for c in t.columns:
                kinds[c.logical_type + ("(n)" if c.length else "")] += 1
                if c.fallback:
                    fallbacks.append(f"  {m.db_id}.{t.name}.{c.name}: {c.fallback}")
    lines = [f"type decisions over {len(manifests)} databases: "
             + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())),
             f"name notes (folded or kept quoted): {renamed}",
             f"columns whose declared type was not kept as declared: {len(fallbacks)}", *fallbacks]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(run_job(PROG, main))
