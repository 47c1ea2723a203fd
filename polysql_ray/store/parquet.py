"""The keyed, append-only, resumable Parquet results store.

Layout under ``results_dir``::

    scores/<dataset>/<model>/<dialect>-L<instruction_level>-<cell8>/part-<utc>-<uuid8>.parquet
    runs/<run_id>/manifest.json        composed config, package versions, git SHA, cells
    runs/<run_id>/config.yaml
    ex_table.csv                       the EX table of the latest run (also copied into runs/<run_id>/)

Rows follow :data:`polysql_ray.store.schema.SCORE_SCHEMA`. Files are only ever added, never
rewritten: a crash loses at most the batch being written, and a rerun skips every stored key.
Read everything with DuckDB: ``SELECT * FROM read_parquet('<results_dir>/scores/**/*.parquet')``.
No ``key=value`` folder names are used, so DuckDB's hive-partition detection adds no columns.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from polysql_ray.store.schema import SCORE_SCHEMA


def stable_hash(*parts: object, n: int = 32) -> str:
    """sha256 over the JSON encoding of ``parts`` (sorted keys), hex, first ``n`` characters."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:n]


def cell_key(model: str, generator_fingerprint: str, dataset: str, dialect: str,
             instruction_level: str, policy_fingerprint: str, limits_fingerprint: str = "") -> str:
    """Deterministic key of one run cell (model x dataset x dialect x instruction level),
    including everything that could change a score: the generator's fingerprint (prediction
    file hash, model revision, sampling parameters), the comparison policy's fingerprint and
    the sandbox limits (a shorter timeout can turn a pass into a timeout)."""
    return stable_hash("cell-v1", model, generator_fingerprint, dataset, dialect,
                       instruction_level, policy_fingerprint, limits_fingerprint)


def score_key(cell: str, question_id: str) -> str:
    """Deterministic key of one scored prediction: run cell + question_id."""
    return stable_hash(cell, question_id)


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _safe(name: str) -> str:
    return _SAFE.sub("_", name)[:80] or "_"


class StoreError(OSError):
    """The results folder cannot be created or written; the message names ``results_dir``."""


class ResultsStore:
    """Append-only Parquet store of score rows.

    Args:
        results_dir: root folder; created when missing.

    Errors: :class:`StoreError` when the folder cannot be created (message names the path).
    """

    def __init__(self, results_dir: str | os.PathLike) -> None:
        self.root = Path(results_dir).expanduser().resolve()
        self.scores_dir = self.root / "scores"
        try:
            self.scores_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create results_dir {self.root}: {exc.strerror or exc}; "
                             f"set results_dir=<writable folder>") from exc

    # -- reading --------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """All score part files, sorted by path."""
        return sorted(self.scores_dir.rglob("*.parquet"))

    def existing_keys(self, cell_keys: Iterable[str] | None = None) -> set[str]:
        """Keys already stored, optionally restricted to some cells. Reads only two columns."""
        files = self.files()
        if not files:
            return set()
        ds = pads.dataset([str(f) for f in files], format="parquet")
        flt = None
        if cell_keys is not None:
            cells = list(set(cell_keys))
            if not cells:
                return set()
            flt = pads.field("cell_key").isin(cells)
        table = ds.to_table(columns=["key"], filter=flt)
        return set(table.column("key").to_pylist())

    def read(self, columns: list[str] | None = None, cell_keys: Iterable[str] | None = None) -> pa.Table:
        """All stored rows (latest ``scored_at`` per key), optionally restricted to cells."""
        files = self.files()
        if not files:
            return SCORE_SCHEMA.empty_table()
        ds = pads.dataset([str(f) for f in files], format="parquet", schema=SCORE_SCHEMA)
        flt = pads.field("cell_key").isin(list(set(cell_keys))) if cell_keys is not None else None
        table = ds.to_table(filter=flt)
        if table.num_rows:
            # keep the newest row per key (reruns after a policy change write new keys anyway)
            idx = (table.append_column("_i", pa.array(range(table.num_rows)))
                   .group_by("key").aggregate([("_i", "max")]).column("_i_max"))
            table = table.take(idx).sort_by([("key", "ascending")])
        return table.select(columns) if columns else table

    # -- writing --------------------------------------------------------------------------
    def append(self, rows: pa.Table) -> list[Path]:
        """Write rows (SCORE_SCHEMA) as new part files, one per cell. Returns the paths.

        Each file is written to a temporary name and renamed, so a crash never leaves a
        half-written part that a later read would trip on.
        """
        rows = rows.select(SCORE_SCHEMA.names).cast(SCORE_SCHEMA)
        out: list[Path] = []
        if rows.num_rows == 0:
            return out
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        for cell in sorted(set(rows.column("cell_key").to_pylist())):
            part = rows.filter(pc.equal(rows.column("cell_key"), cell))
            first = part.slice(0, 1).to_pylist()[0]
            folder = (self.scores_dir / _safe(first["dataset"]) / _safe(first["model"])
                      / f"{_safe(first['dialect'])}-L{_safe(first['instruction_level'])}-{cell[:8]}")
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
            tmp = path.with_suffix(".tmp")
            pq.write_table(part, tmp, compression="zstd")
            os.replace(tmp, path)
            out.append(path)
        return out

    def write_run(self, run_id: str, manifest: dict, config_yaml: str) -> Path:
        """Write ``runs/<run_id>/manifest.json`` and ``config.yaml``; returns the folder."""
        folder = self.root / "runs" / run_id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
        (folder / "config.yaml").write_text(config_yaml)
        return folder


class BufferedWriter:
    """Collects scored batches and writes them as few, larger part files.

    Scoring batches mix cells, so writing each batch at once gave one small file per cell per
    batch (1,620 files for the 20,680-row Spider sweep). Rows are held until ``flush_rows`` are
    buffered, then written (one file per cell); :meth:`close` writes the rest. Use it as a
    context manager: an interrupt or an error still flushes what was scored, so at most the
    batch being scored is lost.

    Args:
        store: the :class:`ResultsStore` to write into.
        flush_rows: rows buffered before a write (memory: rows hold SQL text, ~1 KB each).
    """

    def __init__(self, store: ResultsStore, flush_rows: int = 5000) -> None:
        self.store, self.flush_rows = store, max(1, int(flush_rows))
        self._parts: list[pa.Table] = []
        self._rows = 0
        self.files: list[Path] = []

    def add(self, rows: pa.Table) -> None:
        """Buffer one scored batch; writes when ``flush_rows`` are buffered."""
        if rows.num_rows:
            self._parts.append(rows)
            self._rows += rows.num_rows
        if self._rows >= self.flush_rows:
            self.flush()

    def flush(self) -> None:
        """Write everything buffered now."""
        if self._parts:
            self.files.extend(self.store.append(pa.concat_tables(self._parts)))
            self._parts, self._rows = [], 0

    close = flush

    def __enter__(self) -> "BufferedWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.flush()
