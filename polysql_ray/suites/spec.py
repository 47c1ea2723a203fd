"""The suite data model and settings: what a built suite is, and ``suite.*`` of the config.

A :class:`Suite` is the distilled set of databases of one source database (one ``db_id``):
the files, their content fingerprints, the suite's own fingerprint (over the kept databases'
contents and :data:`SUITE_VERSION`) and the distillation figures. :meth:`Suite.key` is the
short text a results-store cell key can carry (``suite-4:<fingerprint[:16]>``), so scores
under two different suites never mix.

Method: Zhong, Yu and Klein, EMNLP 2020, "Semantic Evaluation for Text-to-SQL with Distilled
Test Suites", sections 3-4 (fuzzing + distillation).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

#: Bumped whenever generation, neighbor rules or distillation change what a seed produces.
#: 2: no NULLs in a column a gold reads through NOT IN (subquery); 3: no value that makes the
#: declared engines disagree where the source does not (suites/portability.py: NULLs in ORDER BY
#: keys, case-only and trailing-space-only text variants); 4: no drawn NULL in an ORDER BY key
#: even where the source column has NULLs (copied source rows keep theirs)
SUITE_VERSION = "suite-4"


@dataclass(frozen=True)
class SuiteSettings:
    """``suite.*`` of the configuration (``conf/config.yaml``).

    Attributes:
        enabled: score suite EX beside EX in sweeps (off by default: the cell keys, and so the
            stored scores, stay those of runs without suites).
        size: most databases kept per db_id (>= 1).
        seed: the generation seed (any integer); same seed, same suite.
        candidates: databases generated per db_id before distillation (>= size).
        max_rows: most rows per generated table (>= 1).
        dir: folder of the suite cache a sweep builds into (``""``: ``<results_dir>/suites``).
    """

    enabled: bool = False
    size: int = 8
    seed: int = 0
    candidates: int = 40
    max_rows: int = 30
    dir: str = ""

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "SuiteSettings":
        """Build from ``suite.*``; ``ValueError`` naming ``suite.<key>`` for a bad value."""
        cfg = dict(cfg or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"suite: unknown key(s) {unknown}; known: {sorted(known)}")
        out = cls(**cfg)
        if not isinstance(out.dir, str):
            raise ValueError(f"suite.dir must be a folder path (got {out.dir!r})")
        if not isinstance(out.enabled, bool):
            raise ValueError(f"suite.enabled must be true or false (got {out.enabled!r})")
        for name, lo in (("size", 1), ("candidates", 1), ("max_rows", 1), ("seed", None)):
            v = getattr(out, name)
            if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo):
                raise ValueError(f"suite.{name} must be a whole number" + (f" >= {lo}" if lo else "")
                                 + f" (got {v!r})")
        if out.candidates < out.size:
            raise ValueError(f"suite.candidates ({out.candidates}) must be >= suite.size ({out.size})")
        return out


@dataclass(frozen=True)
class SuiteDatabase:
    """One kept database of a suite.

    Attributes:
        name: file stem (``<db_id>_<index>``), also its db_id when replicated.
        path: absolute path of the SQLite file.
        fingerprint: :func:`polysql_ray.suites.generate.content_fingerprint` of the file.
        candidate: the candidate index it was generated as (its generation seed).
    """

    name: str
    path: str
    fingerprint: str
    candidate: int


@dataclass
class Suite:
    """The distilled suite of one source database.

    Attributes:
        dataset, db_id: the source database.
        version: :data:`SUITE_VERSION` it was built with.
        seed, size: the settings it was built with.
        source_hash: sha256 of the source file.
        databases: the kept databases, in the order distillation chose them.
        fingerprint: sha256 over ``version`` and the kept databases' fingerprints.
        figures: distillation figures (candidates, kept, neighbors distinguished / total,
            golds non-trivial / total, seconds ...).
    """

    dataset: str
    db_id: str
    version: str
    seed: int
    size: int
    source_hash: str
    databases: list[SuiteDatabase] = field(default_factory=list)
    fingerprint: str = ""
    figures: dict = field(default_factory=dict)

    def key(self) -> str:
        """Short identity for a cell key: ``<version>:<fingerprint[:16]>``."""
        return f"{self.version}:{self.fingerprint[:16]}"

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Suite":
        d = json.loads(text)
        d["databases"] = [SuiteDatabase(**x) for x in d.get("databases", [])]
        return cls(**d)


def suite_fingerprint(version: str, fingerprints: list[str]) -> str:
    """sha256 hex over the suite version and its databases' content fingerprints, in order."""
    h = hashlib.sha256(version.encode())
    for fp in fingerprints:
        h.update(b"\0" + fp.encode())
    return h.hexdigest()


def suite_sources(examples) -> dict[str, tuple[str, list[str]]]:
    """The inputs of each db_id's suite: ``db_id -> (SQLite source location, distinct gold SQL
    texts in dataset order)``, over the examples (``datasets.example.Example``) whose source is
    SQLite, whose database exists and whose gold loaded (``gold_error is None``).

    The one place this list is decided: a sweep (``pipeline.suite_stage``) and ``jobs.suites``
    both pass it to :func:`~polysql_ray.suites.suite_for`, whose cache key hashes the golds, so
    both build, and reuse, the same suite. A gold repeated in the dataset counts once.
    """
    out: dict[str, tuple[str, list[str]]] = {}
    for ex in examples:
        if ex.source_engine != "sqlite" or not ex.database.exists or ex.gold_error is not None:
            continue
        golds = out.setdefault(ex.db_id, (ex.database.location, []))[1]
        if ex.gold_sql not in golds:
            golds.append(ex.gold_sql)
    return out
