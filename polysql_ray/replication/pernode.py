"""Embedded-engine replicas on a multi-node cluster: rebuilt per node, on first use.

An SQLite or DuckDB replica is a file under ``replication.dir``. That folder is node-local when
``results_dir`` is an object store (``${local_dir:...}``, :func:`polysql_ray.resolvers.local_dir`),
and nodes of a Kubernetes cluster share no disk. Instead of shipping files between nodes, each
node builds its own copy: a replica is a deterministic function of its source database and of
the replication procedure (:meth:`~polysql_ray.replication.base.Manifest.reuse_key`), and every
copy is certified (row counts and per-column checksums equal to the source's,
``certificate.verify``), so two nodes' copies hold the same data whatever their bytes.

* The driver's replication stage builds each copy once, on whichever node runs the task
  (:func:`replicate_locked`).
* An execution actor asked to run SQL on a replica that its node lacks (no file, or no manifest
  beside it: a copy is ready only once its manifest is written, after verification) rebuilds
  it there from the same source with the same settings (:func:`ensure_replica`), under a file
  lock so that the actors of one node build it once and never read a copy being built.
* A rebuild that fails (the source is not on that node, the copy does not verify) makes the
  execution ``UNAVAILABLE``: stored under ``unavailable/``, rescored by the next run, never a
  verdict.

Requirement: the *source* databases are at the same path on every node (in the image or on a
volume); the gold SQL runs on them on any node anyway. A ``replication.dir`` on a shared POSIX
filesystem (NFS, a ReadWriteMany volume) also works: every node then finds the ready copy.
Server targets (PostgreSQL, MySQL ...) need none of this: their copy lives in the server.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from dataclasses import dataclass
from typing import Iterator

from polysql_ray.datasets.example import SourceDatabase

#: Targets whose replica is one file, rebuilt per node (ClickHouse's folder replicas are not yet).
PER_NODE_ENGINES = ("sqlite", "duckdb")


@dataclass(frozen=True)
class Recipe:
    """How to (re)build one embedded replica: what :func:`replication.base.replicate` is given.

    Attributes:
        source: the source database (its file must exist on the node that builds).
        engine: the target engine (``sqlite``, ``duckdb``).
        replicas_dir: ``replication.dir`` (absolute; the same path on every node).
        types: ``replication.types`` (``declared`` or ``storage``).
    """

    source: SourceDatabase
    engine: str
    replicas_dir: str
    types: str = "declared"


@contextlib.contextmanager
def _build_lock(folder: str) -> Iterator[None]:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".build.lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes (or the process dies)
        yield


def replicate_locked(recipe: Recipe, settings: dict | None = None, source_settings: dict | None = None):
    """:func:`replication.base.replicate` under this node's build lock of the replica's folder
    (the lock :func:`ensure_replica` takes), so a copy is never built twice at once on a node.
    Returns the :class:`~polysql_ray.replication.base.Replica`; raises as ``replicate`` does."""
    from polysql_ray.replication.base import manifest_path_for, replicate

    src = recipe.source
    folder = os.path.dirname(manifest_path_for(recipe.engine, src.dataset, src.db_id, recipe.replicas_dir))
    with _build_lock(folder):
        return replicate(src, recipe.engine, recipe.replicas_dir, settings=settings,
                         source_settings=source_settings, types=recipe.types)


def is_ready(location: str) -> bool:
    """The embedded replica at ``location`` is on this node and verified (its manifest, written
    only after verification, is beside it)."""
    return os.path.exists(location) and os.path.exists(os.path.join(os.path.dirname(location), "manifest.json"))


def ensure_replica(location: str, recipe: Recipe) -> str | None:
    """Make the replica at ``location`` ready on this node, rebuilding it from ``recipe`` when
    it is missing. Returns None when it is ready, else one line saying why not (the caller
    reports the execution ``UNAVAILABLE``)."""
    if is_ready(location):
        return None
    try:
        replica = replicate_locked(recipe)
    except Exception as exc:  # noqa: BLE001 - any failure is infrastructure, never a verdict
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"replica {location} is not on node {socket.gethostname()} and rebuilding it failed: {first}"
    if replica.location != location:
        return f"replica rebuilt at {replica.location}, not at {location} (replication.dir differs between nodes?)"
    return None


def recipes_for(replicas, replicas_dir: str, types: str) -> dict[str, dict[str, Recipe]]:
    """``{engine: {replica location: Recipe}}`` for every embedded-engine replica of the run:
    what each execution actor needs to rebuild a copy its node lacks.

    Args:
        replicas: ``(source SourceDatabase, target engine, replica location)`` triples (the
            replication stage's result).
        replicas_dir: ``replication.dir`` made absolute.
        types: ``replication.types``.
    """
    out: dict[str, dict[str, Recipe]] = {}
    for src, engine, location in replicas:
        if engine != src.engine and engine in PER_NODE_ENGINES:
            out.setdefault(engine, {})[location] = Recipe(src, engine, replicas_dir, types)
    return out
