"""Distillation: keep a few candidate databases on which the gold's neighbors fail.

Zhong, Yu and Klein (EMNLP 2020, section 3.3) keep, from many fuzzed databases, a small set
on which each neighbor query of each gold returns a different result than the gold. Here:

1. every gold of the db_id runs on the source and on each candidate (the project's SQLite
   engine and sandbox); a gold is *non-trivial* on a database when it runs and returns at
   least one row with a non-NULL value;
2. every neighbor (:mod:`polysql_ray.suites.neighbors`) runs on the source and on each
   candidate; a neighbor is *distinguished* on a database when
   :func:`polysql_ray.comparison.verdict.decide` under the default policy (or the one given)
   says ``fail`` for it against the gold there: the verdict a prediction equal to that
   neighbor would get. Neighbors that do not run on the source (``syntax``/``schema``/
   ``rejected``) are not queries a model could be credited for and are left out of the totals;
3. a candidate is *eligible* when every gold that runs on the source runs on it;
4. greedy set cover: repeatedly keep the eligible candidate with the largest gain, the
   neighbors it distinguishes that no kept database does plus the golds non-trivial on the
   source that it makes non-trivial for the first time (ties: more golds non-trivial on it,
   then the lowest index), until ``size`` databases are kept or no candidate gains anything.
   The figures say how many golds are non-trivial on every kept database and on at least one
   (a gold whose filter matches nothing on a database still checks the predictions there,
   but weakly: any prediction returning nothing passes on it).

:func:`suite_for` is the one entry point: build (or reuse from the cache folder) the suite of
one source database, keyed by the source's content hash, the golds, the settings and
:data:`~polysql_ray.suites.spec.SUITE_VERSION`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from polysql_ray.comparison.policy import ComparisonPolicy
from polysql_ray.comparison.shape import analyze_gold
from polysql_ray.comparison.verdict import decide
from polysql_ray.engines.base import ExecStatus, ExecutionResult, Limits
from polysql_ray.engines.registry import make_engine
from polysql_ray.suites.generate import (
    GenerationError, content_fingerprint, generate_candidate, read_source, type_decisions,
)
from polysql_ray.suites.neighbors import Neighbor, neighbors
from polysql_ray.suites.portability import Portability
from polysql_ray.suites.spec import SUITE_VERSION, Suite, SuiteDatabase, SuiteSettings, suite_fingerprint

#: Sandbox limits for distillation runs (candidates are small; a neighbor that drops a join
#: predicate on the source may be slow or large: it still counts as having run).
LIMITS = Limits(timeout_s=10.0, row_cap=50_000)
#: Statuses that mean a neighbor is not a runnable query at all.
INVALID = (ExecStatus.SYNTAX, ExecStatus.SCHEMA, ExecStatus.REJECTED)


def nontrivial(result: ExecutionResult | None) -> bool:
    """The result ran and holds at least one row with a non-NULL value."""
    if result is None or not result.ok or not isinstance(result.table, pa.Table) or result.table.num_rows == 0:
        return False
    return any(col.null_count < len(col) for col in result.table.columns)


@dataclass
class _Gold:
    sql: str
    shape: object
    neighbors: list[Neighbor] = field(default_factory=list)


class _Runner:
    """Runs golds (with their probes) and neighbors on one database and decides each neighbor.

    The project's SQLite engine and sandbox run every statement; its statement guard (a parse,
    independent of the data) is decided once per SQL text, not once per candidate database."""

    def __init__(self, policy: ComparisonPolicy) -> None:
        self.engine = make_engine("sqlite")
        self.policy = policy
        refuse, cache = self.engine.refuse, {}

        def cached_refuse(sql: str, location: str, limits: Limits):
            if sql not in cache:
                cache[sql] = refuse(sql, location, limits)
            return cache[sql] if cache[sql] is not None else self.engine.missing(sql, location)

        self.engine.refuse = cached_refuse

    def run(self, location: str, sql: str | None) -> ExecutionResult | None:
        if not sql:
            return None
        return LIMITS.enforce(self.engine.execute(location, sql, LIMITS))

    def database(self, location: str, golds: list[_Gold]
                 ) -> tuple[list[bool], list[bool], list[list[str]], list[list[str]]]:
        """Per gold: ran?, non-trivial?; per gold, per neighbor: verdict and the neighbor's status."""
        ran, ok, verdicts, statuses = [], [], [], []
        for g in golds:
            gold = self.run(location, g.sql)
            ran.append(gold.ok)
            probe = self.run(location, g.shape.probe_sql) if gold.ok else None
            ties = self.run(location, g.shape.ties_probe_sql) if gold.ok else None
            ok.append(nontrivial(gold))
            vs, ss = [], []
            for n in g.neighbors:
                pred = self.run(location, n.sql) if gold.ok else None
                v = decide("ok", gold, probe, pred, g.shape, self.policy, LIMITS, ties_probe=ties) \
                    if pred is not None else None
                vs.append(v.verdict if v is not None else "gold_error")
                ss.append(pred.status.value if pred is not None else "not_run")
            verdicts.append(vs)
            statuses.append(ss)
        return ran, ok, verdicts, statuses

    def close(self) -> None:
        self.engine.close()


def golds_hash(gold_sqls: list[str]) -> str:
    return hashlib.sha256("\0".join(gold_sqls).encode()).hexdigest()


def suite_for(db_id: str, source: str | os.PathLike, seed: int, size: int, gold_sqls: list[str],
              cache_dir: str | os.PathLike, *, dataset: str = "spider", settings: SuiteSettings | None = None,
              policy: ComparisonPolicy | None = None, force: bool = False,
              portability: Portability | None = None) -> Suite:
    """The distilled suite of one SQLite source database (built, or reused from ``cache_dir``).

    Args:
        db_id: the source's database id.
        source: path of the source SQLite file.
        seed, size: generation seed and most databases kept (``suite.seed``, ``suite.size``).
        gold_sqls: the dataset's gold queries on this db_id (SQLite dialect).
        cache_dir: root folder; the suite lives in ``<cache_dir>/<dataset>/<db_id>-<key>/``
            (``suite.json`` and ``<db_id>_<k>.sqlite``).
        settings: ``candidates`` and ``max_rows`` (``seed``/``size`` above win).
        policy: comparison policy deciding "distinguished" (default policy).
        force: rebuild even when a matching suite is cached.
        portability: the cross-engine hazards generation avoids
            (:mod:`polysql_ray.suites.portability`; default: those of every declared engine, so
            one suite serves every dialect).

    Returns: the :class:`Suite`; ``figures`` holds the distillation figures.
    Raises: :class:`GenerationError` when the source is missing or unreadable.
    """
    settings = settings or SuiteSettings()
    policy = policy or ComparisonPolicy()
    source = str(Path(source).resolve())
    portability = portability if portability is not None else Portability.for_engines()
    model = read_source(source, db_id, gold_sqls, portability)
    inputs = {"version": SUITE_VERSION, "portability": list(portability.names), "source_hash": model.source_hash, "seed": seed, "size": size,
              "candidates": settings.candidates, "max_rows": settings.max_rows,
              "golds": golds_hash(gold_sqls), "policy": policy.fingerprint()}
    ikey = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:12]
    folder = Path(cache_dir) / dataset / f"{db_id}-{ikey}"
    manifest = folder / "suite.json"
    if manifest.exists() and not force:
        try:
            suite = Suite.from_json(manifest.read_text())
            if all(os.path.exists(d.path) and content_fingerprint(d.path) == d.fingerprint
                   for d in suite.databases):
                suite.figures["reused"] = True
                return suite
        except Exception:  # noqa: BLE001 - unreadable or stale manifest: rebuild
            pass
    t0 = time.perf_counter()
    if folder.exists():
        shutil.rmtree(folder)
    work = folder / "candidates"
    work.mkdir(parents=True)
    decisions = type_decisions(source)
    golds = [_Gold(sql, analyze_gold(sql, "sqlite"), neighbors(sql)) for sql in gold_sqls]
    runner = _Runner(policy)
    try:
        src_ran, src_ok, src_verdicts, src_status = runner.database(source, golds)
        # the neighbors that count: runnable on the source, for golds that run there
        valid = [[s not in {x.value for x in INVALID} and s != "not_run" for s in ss] for ss in src_status]
        ids = [(i, j) for i, row in enumerate(valid) for j, v in enumerate(row) if v]
        cand_paths, cand_rows, rejected = [], [], []
        covers: list[set] = []
        eligible: list[bool] = []
        oks: list[list[bool]] = []
        for k in range(settings.candidates):
            path = work / f"{db_id}_c{k:03d}.sqlite"
            try:
                rows = generate_candidate(model, k, seed, settings.max_rows, path, decisions)
            except GenerationError as e:
                rejected.append(str(e))
                continue
            ran, ok, verdicts, _ = runner.database(str(path), golds)
            cand_paths.append((k, path))
            cand_rows.append(sum(rows.values()))
            oks.append(ok)
            covers.append({(i, j) for (i, j) in ids if verdicts[i][j] == "fail"})
            eligible.append(all(ran[i] for i in range(len(golds)) if src_ran[i]))
    finally:
        runner.close()
    kept: list[int] = []
    covered: set = set()
    shown: set = set()  # golds non-trivial on some kept database
    wanted = {i for i in range(len(golds)) if src_ok[i]}
    while len(kept) < size:
        best, gain = None, (0, 0)
        for c, cov in enumerate(covers):
            if c in kept or not eligible[c]:
                continue
            g = (len(cov - covered) + len({i for i in wanted if oks[c][i]} - shown),
                 sum(oks[c][i] for i in wanted))
            if g > gain:
                best, gain = c, g
        if best is None or gain[0] == 0:
            break
        kept.append(best)
        covered |= covers[best]
        shown |= {i for i in wanted if oks[best][i]}
    dbs = []
    for n, c in enumerate(kept):
        k, path = cand_paths[c]
        final = folder / f"{db_id}_{n:02d}.sqlite"
        os.replace(path, final)
        dbs.append(SuiteDatabase(final.stem, str(final.resolve()), content_fingerprint(final), k))
    shutil.rmtree(work)
    src_cov = {(i, j) for (i, j) in ids if src_verdicts[i][j] == "fail"}
    golds_src = [i for i in range(len(golds)) if src_ok[i]]
    figures = {
        "candidates": settings.candidates, "generated": len(cand_paths), "rejected_type_drift": len(rejected),
        "rejections": rejected[:3], "eligible": sum(eligible), "kept": len(kept),
        "golds": len(golds), "golds_run_on_source": sum(src_ran),
        "golds_nontrivial_source": len(golds_src),
        "golds_nontrivial_every_kept": sum(1 for i in golds_src if kept and all(oks[c][i] for c in kept)),
        "golds_nontrivial_some_kept": len(shown),
        "neighbors_total": sum(len(g.neighbors) for g in golds), "neighbors_valid": len(ids),
        "distinguished_source": len(src_cov), "distinguished_suite": len(covered),
        "distinguished_source_or_suite": len(covered | src_cov),
        "distinguished_by_candidates": len(set().union(*covers)) if covers else 0,
        "rows_kept": [cand_rows[c] for c in kept], "seconds": round(time.perf_counter() - t0, 2),
        "by_rule": _by_rule(golds, ids, covered | src_cov),
        "portability": list(portability.names),
    }
    suite = Suite(dataset, db_id, SUITE_VERSION, seed, size, model.source_hash, dbs,
                  suite_fingerprint(SUITE_VERSION, [d.fingerprint for d in dbs]), figures)
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(suite.to_json())
    os.replace(tmp, manifest)
    return suite


def _by_rule(golds: list[_Gold], ids: list[tuple[int, int]], covered: set) -> dict[str, list[int]]:
    """rule -> [distinguished, valid] over all golds."""
    out: dict[str, list[int]] = {}
    for i, j in ids:
        r = out.setdefault(golds[i].neighbors[j].rule, [0, 0])
        r[1] += 1
        r[0] += (i, j) in covered
    return dict(sorted(out.items()))
