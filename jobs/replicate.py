"""Replication job: make verified copies of source databases in a target engine.

CLI::

    python -m jobs.replicate --source-dir ../shared/data/spider/database --dataset spider \
        --target duckdb --out replicas/

(``key=value`` arguments such as ``source_dir=... target=duckdb out=...`` are accepted too.)
Prints one line per database (reused / built, seconds, dropped constraints) and exits 1 if
any copy failed. The pipeline calls :func:`ensure_replicas` directly.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
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


def main(argv: list[str] | None = None) -> int:
    """CLI entry; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = [f"--{a.split('=', 1)[0].replace('_', '-')}={a.split('=', 1)[1]}"
            if "=" in a and not a.startswith("-") else a for a in argv]
    ap = argparse.ArgumentParser(prog="python -m jobs.replicate", description=__doc__.split("\n")[0])
    ap.add_argument("--source-dir", required=True, help="folder of <db_id>/<db_id>.sqlite")
    ap.add_argument("--dataset", default="spider")
    ap.add_argument("--target", default="duckdb")
    ap.add_argument("--out", default="replicas")
    ap.add_argument("--force", action="store_true", help="rebuild even when the manifest matches")
    ap.add_argument("--types", default="declared", choices=["declared", "storage"],
                    help="replication.types: keep declared types where every value conforms")
    ap.add_argument("--db-ids", default="", help="comma-separated db_ids (default: every folder)")
    args = ap.parse_args(argv)
    failed = 0
    manifests = []
    wanted = {d for d in args.db_ids.split(",") if d}
    for s in _sources_from_dir(Path(args.source_dir), args.dataset):
        if wanted and s.db_id not in wanted:
            continue
        if not s.exists:
            print(f"{s.db_id}: source missing ({s.location})")
            continue
        try:
            r = replicate(s, args.target, Path(args.out), force=args.force, types=args.types)
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
    raise SystemExit(main())
