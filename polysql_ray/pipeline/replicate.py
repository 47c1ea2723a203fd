"""Stage 3 of the driver (:mod:`polysql_ray.pipeline.driver`): a verified copy of every source
database the pending cells need in every target engine, as Ray tasks, before any prediction
exists (cells x sources); the replication part of every cell key."""
from __future__ import annotations

import collections
import os
import time

import ray

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.errors import root_message, server_hint
from polysql_ray.pipeline.plan import Cell
from polysql_ray.pipeline.progress import Progress
from polysql_ray.pipeline.settings import server_settings


def replication_fingerprint(cfg: dict) -> str:
    """What about the replicas can change a score: the type mode and the type-map and
    replication versions (part of every cell key, so a run on other replicas never reuses
    these scores)."""
    from polysql_ray.replication.base import REPLICATION_VERSION
    from polysql_ray.replication.typemap import TYPE_MAP_VERSION

    types = (cfg.get("replication") or {}).get("types", "declared")
    return f"|repl-{types}-tm{TYPE_MAP_VERSION}-r{REPLICATION_VERSION}"


@ray.remote
def replicate_task(source: SourceDatabase, engine: str, replicas_dir: str, settings: dict | None,
                    source_settings: dict | None, types: str = "declared"):
    """Ray task: the verified copy of ``source`` in ``engine`` under ``replicas_dir`` (built, or
    reused when its manifest matches), under the node's build lock
    (:func:`polysql_ray.replication.pernode.replicate_locked`). ``settings``/``source_settings``:
    connection settings of the target/source server (None for embedded engines); ``types``:
    ``replication.types``. Returns ``(replica, seconds)``; raises the replication error, which
    :func:`replicate` reports with the database named."""
    from polysql_ray.replication.pernode import Recipe, replicate_locked

    t0 = time.perf_counter()  # under the node's build lock: an actor may rebuild it there too
    replica = replicate_locked(Recipe(source, engine, replicas_dir, types), settings, source_settings)
    return replica, time.perf_counter() - t0


def replicate(grid, cells: list[Cell], cfg: dict, progress: Progress, stats, clock=None):
    """Ensure a verified copy of every source database of the ``cells``' datasets in every
    target engine of those cells other than its source engine (known from cells x sources,
    before any prediction exists). ``grid``: the driver's :class:`~polysql_ray.pipeline.driver.Grid`
    (its ``sources``); ``stats``: its ``RunStats`` (replica counts and errors are added there);
    ``clock``: the run's stage clock, or None. Returns ``{(dataset, db_id, engine): location}``.

    Copies whose manifest matches are reused (seconds). A copy that fails (dead server,
    data that does not verify) is reported in ``stats.errors`` with the database, engine and
    the engine's own message; the driver then leaves exactly the work that needed it
    unscored (a rerun retries it) and scores everything else.
    """
    from polysql_ray.replication.sources import prepare

    for ds in sorted({c.dataset for c in cells}):  # install sources (run's settings)
        for src in grid.sources[ds]:
            prepare(src, server_settings(cfg, src.engine))
    needed: dict[tuple[str, str, str], SourceDatabase] = {}
    for cell in cells:
        for src in grid.sources[cell.dataset]:
            if src.exists and src.engine != cell.target_engine:
                needed[(src.dataset, src.db_id, cell.target_engine)] = src
    locations: dict[tuple[str, str, str], str] = {}
    if not needed:
        return locations
    rdir = os.path.abspath(cfg["replication"]["dir"])
    task = progress.add("replicate", len(needed))
    if clock is not None:
        clock.start("replicate")
    refs = {}
    for (ds, db, engine), src in sorted(needed.items()):
        refs[replicate_task.options(num_cpus=0.5).remote(
            src, engine, rdir, server_settings(cfg, engine), server_settings(cfg, src.engine),
            cfg["replication"].get("types", "declared"))] = (ds, db, engine)
    t0 = time.perf_counter()
    pending = list(refs)
    errors = []
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        key = refs[done[0]]
        try:
            replica, _ = ray.get(done[0])
            locations[key] = replica.location
            stats.replicas_reused += bool(replica.reused)
        except Exception as exc:  # noqa: BLE001 — reported with the database named
            stats.failed_replicas.add(key)
            errors.append(f"replicating {key[0]}/{key[1]} into {key[2]} failed: {root_message(exc)}"
                          f"{server_hint(key[2], str(exc))}")
        progress.advance(task)
    stats.replicas = len(locations)
    stats.replicate_s = time.perf_counter() - t0
    if clock is not None:
        clock.end("replicate")
    stats.errors.extend(_fold(errors))
    return locations


def _fold(errors: list[str], keep: int = 3) -> list[str]:
    """Many databases failing for one reason (a dead server) read as one error, not nineteen."""
    by_engine: dict[str, list[str]] = collections.defaultdict(list)
    for e in errors:
        by_engine[e.split(" into ", 1)[1].split(" ", 1)[0]].append(e)
    out = []
    for engine, errs in sorted(by_engine.items()):
        out.extend(errs[:keep])
        if len(errs) > keep:
            out.append(f"... and {len(errs) - keep} more databases into {engine}")
    return out
