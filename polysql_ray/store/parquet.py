"""The keyed, append-only, resumable Parquet results store.

Layout under ``results_dir``::

    scores/<dataset>/<model>/<dialect>-L<instruction_level>-<cell8>/part-<utc>-<uuid8>.parquet
    runs/<run_id>/manifest.json        composed config, package versions, git SHA, cells
    runs/<run_id>/config.yaml
    ex_table.csv                       the EX table of the latest run (also copied into runs/<run_id>/)

    unavailable/part-<utc>-<uuid8>.parquet   rows that could not run (server down ...): not scores
    quarantine/...                     damaged part files moved aside (their keys are rescored)
    .lock                              held (``flock``) by the run writing into this results_dir

Rows follow :data:`polysql_ray.store.schema.SCORE_SCHEMA`.

Exactly once (what every reader sees holds at most one row per key):

* **One writer at a time.** A run holds an exclusive ``flock`` on ``<results_dir>/.lock`` from
  planning to its last write (:meth:`ResultsStore.lock`); a second run into the same folder
  waits, then plans against what the first stored, so it never scores a stored key again.
  (``flock`` is local to one machine: on a multi-node cluster only the driver writes.)
* **Commit by rename.** Each scored batch is written as it arrives, to a temporary name then
  renamed: ``kill -9`` loses at most the batch being written, never leaves half a file.
* **Compaction** at the end of a run merges each cell folder's parts into one file; a journal
  (``scores/.compact-*.json``) written before the merged file appears lets the next run finish
  a compaction that a crash interrupted, so a superseded part never outlives one crash.
* **Dedup on read** (:meth:`ResultsStore.read`: newest ``scored_at`` per key) as the last line.
* A part file that cannot be read (truncated, not Parquet) is moved to ``quarantine/`` with a
  one-line warning; its keys are then missing, so the run rescores them.
* Rows whose execution was ``unavailable`` (infrastructure trouble, not the model) live in
  ``unavailable/``, never in ``scores/``: the next run rescores them, and they leave
  ``unavailable/`` once scored.

Read scores with :meth:`ResultsStore.read`, or with DuckDB over the parts:
``SELECT * FROM read_parquet('<results_dir>/scores/**/*.parquet')``. No ``key=value`` folder
names are used, so DuckDB's hive-partition detection adds no columns.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import socket
import sys
import uuid
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from polysql_ray.store.schema import SCORE_SCHEMA

log = logging.getLogger("polysql_ray")


def stable_hash(*parts: object, n: int = 32) -> str:
    """sha256 over the JSON encoding of ``parts`` (sorted keys), hex, first ``n`` characters."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False).encode("utf-8", "surrogatepass")
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
    """Append-only Parquet store of score rows (exactly-once rules in the module docstring).

    Args:
        results_dir: root folder; created when missing.

    Errors: :class:`StoreError` when the folder cannot be created or written (message names
    the path and what to set).
    """

    def __init__(self, results_dir: str | os.PathLike) -> None:
        self.root = Path(results_dir).expanduser().resolve()
        self.scores_dir = self.root / "scores"
        self.unavailable_dir = self.root / "unavailable"
        self.quarantine_dir = self.root / "quarantine"
        try:
            self.scores_dir.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".write-probe-{uuid.uuid4().hex[:8]}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreError(f"cannot write to results_dir {self.root}: {exc.strerror or exc}; "
                             f"set results_dir=<writable folder>") from exc
        self.quarantined: list[Path] = []

    # -- one writer at a time --------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, run_id: str = "", wait: bool = True) -> Iterator[None]:
        """Hold the exclusive writer lock of this results_dir (``flock`` on ``.lock``).

        Waits (printing one line naming the holder) while another run holds it; with
        ``wait=False`` raises :class:`StoreError` instead. On entry finishes any compaction a
        crash interrupted. Released on exit and by the kernel when the process dies.
        """
        import fcntl

        path = self.root / ".lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 400, 0).decode("utf-8", "replace").strip() or "another run"
                if not wait:
                    raise StoreError(f"results_dir {self.root} is being written by {holder}")
                print(f"polysql_ray: results_dir {self.root} is being written by {holder}; "
                      f"waiting for it to finish", file=sys.stderr, flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"run {run_id} (pid {os.getpid()} on {socket.gethostname()})".encode(), 0)
            self.recover()
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the descriptor releases the flock

    # -- reading --------------------------------------------------------------------------
    def files(self) -> list[Path]:
        """All readable score part files, sorted by path. Damaged ones are quarantined."""
        return self._readable(sorted(self.scores_dir.rglob("*.parquet")))

    def unavailable_files(self) -> list[Path]:
        """All readable part files of ``unavailable/`` rows."""
        return self._readable(sorted(self.unavailable_dir.glob("*.parquet"))) \
            if self.unavailable_dir.is_dir() else []

    def _readable(self, paths: list[Path]) -> list[Path]:
        ok = []
        for p in paths:
            problem = damaged_part(p)
            if problem is None:
                ok.append(p)
            else:
                self.quarantine(p, problem)
        return ok

    def quarantine(self, path: Path, problem: str) -> Path | None:
        """Move a damaged part file to ``quarantine/`` (one-line warning). Its keys are then
        missing from the store, so the next planning pass rescores them."""
        dest = self.quarantine_dir / path.relative_to(self.root)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
        except FileNotFoundError:
            return None  # another reader moved it first
        except OSError as exc:
            print(f"polysql_ray: warning: damaged part file {path} ({problem}) could not be moved "
                  f"to {self.quarantine_dir}: {exc.strerror or exc}; it is skipped", file=sys.stderr)
            return None
        print(f"polysql_ray: warning: damaged part file {path} ({problem}) moved to {dest}; "
              f"its rows will be rescored", file=sys.stderr)
        self.quarantined.append(dest)
        return dest

    def existing_keys(self, cell_keys: Iterable[str] | None = None) -> set[str]:
        """Keys already scored (``scores/`` only: ``unavailable`` rows are pending work),
        optionally restricted to some cells. Reads only two columns."""
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

    def read(self, columns: list[str] | None = None, cell_keys: Iterable[str] | None = None,
             unavailable: bool = False) -> pa.Table:
        """Stored rows, one per key (the newest ``scored_at``), optionally restricted to cells.

        With ``unavailable=True`` the ``unavailable/`` rows of keys not scored yet are included
        (verdict ``unavailable``), so a summary can count what is left.
        """
        table = self._read_files(self.files(), cell_keys)
        if unavailable:
            extra = self._read_files(self.unavailable_files(), cell_keys)
            if extra.num_rows and table.num_rows:
                scored = pa.array(list(set(table.column("key").to_pylist())), pa.string())
                extra = extra.filter(pc.invert(pc.is_in(extra.column("key"), value_set=scored)))
            table = pa.concat_tables([table, extra]).sort_by([("key", "ascending")])
        return table.select(columns) if columns else table

    @staticmethod
    def _read_files(files: list[Path], cell_keys) -> pa.Table:
        if not files:
            return SCORE_SCHEMA.empty_table()
        ds = pads.dataset([str(f) for f in files], format="parquet", schema=SCORE_SCHEMA)
        flt = pads.field("cell_key").isin(list(set(cell_keys))) if cell_keys is not None else None
        table = ds.to_table(filter=flt)
        return dedup(table)

    # -- writing --------------------------------------------------------------------------
    def append(self, rows: pa.Table) -> list[Path]:
        """Write rows (SCORE_SCHEMA) as new part files, one per cell. Returns the paths.

        Each file is written to a temporary name and renamed, so a crash never leaves a
        half-written part that a later read would trip on. Rows with verdict ``unavailable``
        go to ``unavailable/`` instead (see the module docstring).
        """
        rows = rows.select(SCORE_SCHEMA.names).cast(SCORE_SCHEMA)
        out: list[Path] = []
        if rows.num_rows == 0:
            return out
        unav = pc.fill_null(pc.equal(rows.column("verdict"), "unavailable"), False)
        if pc.any(unav).as_py():
            self.unavailable_dir.mkdir(parents=True, exist_ok=True)
            out.append(self._write(rows.filter(unav), self.unavailable_dir))
            rows = rows.filter(pc.invert(unav))
        for cell in sorted(set(rows.column("cell_key").to_pylist())):
            part = rows.filter(pc.equal(rows.column("cell_key"), cell))
            out.append(self._write(part, self._cell_folder(part, cell)))
        return out

    def _cell_folder(self, part: pa.Table, cell: str) -> Path:
        first = part.slice(0, 1).to_pylist()[0]
        return (self.scores_dir / _safe(first["dataset"]) / _safe(first["model"])
                / f"{_safe(first['dialect'])}-L{_safe(first['instruction_level'])}-{cell[:8]}")

    @staticmethod
    def _write(part: pa.Table, folder: Path, tag: str = "") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        path = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}{tag}.parquet"
        tmp = path.with_suffix(".tmp")
        pq.write_table(part, tmp, compression="zstd")
        os.replace(tmp, path)
        return path

    # -- compaction (holding the lock) -----------------------------------------------------
    def compact(self) -> int:
        """Merge each cell folder's parts into one file and drop ``unavailable/`` rows whose
        keys are now scored. Call while holding :meth:`lock`. Returns files removed.

        Crash safety: a journal naming the merged file and the parts it replaces is written
        before the merged file is renamed into place; :meth:`recover` (run on every
        :meth:`lock`) deletes the replaced parts if the merged file exists, else drops the
        journal. Between the rename and the deletes a raw glob reader could see a row twice
        (readers through :meth:`read` never do).
        """
        removed = 0
        folders = sorted({p.parent for p in self.files()})
        for folder in folders:
            parts = sorted(folder.glob("*.parquet"))
            if len(parts) > 1:
                removed += self._merge(parts, folder, dedup(self._concat(parts)))
        unav = self.unavailable_files()
        if unav:
            rows = self._read_files(unav, None)
            if rows.num_rows:
                scored = pa.array(list(self.existing_keys(set(rows.column("cell_key").to_pylist()))),
                                  pa.string())
                rows = rows.filter(pc.invert(pc.is_in(rows.column("key"), value_set=scored)))
            if len(unav) > 1 or rows.num_rows != pq.read_metadata(unav[0]).num_rows:
                removed += self._merge(unav, self.unavailable_dir, rows)
        return removed

    @staticmethod
    def _concat(parts: list[Path]) -> pa.Table:
        return pa.concat_tables([pq.read_table(p).select(SCORE_SCHEMA.names).cast(SCORE_SCHEMA)
                                 for p in parts])

    def _merge(self, parts: list[Path], folder: Path, rows: pa.Table) -> int:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%f")
        merged = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}-c.parquet"
        journal = self.scores_dir / f".compact-{uuid.uuid4().hex}.json"
        journal.write_text(json.dumps({"merged": str(merged) if rows.num_rows else "",
                                       "replaces": [str(p) for p in parts]}))
        if rows.num_rows:
            tmp = merged.with_suffix(".tmp")
            pq.write_table(rows, tmp, compression="zstd")
            os.replace(tmp, merged)
        for p in parts:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
        journal.unlink()
        return len(parts)

    def recover(self) -> None:
        """Finish compactions a crash interrupted (see :meth:`compact`); remove stale ``.tmp``
        files of crashed writers. Call while holding :meth:`lock`."""
        for journal in self.scores_dir.glob(".compact-*.json"):
            try:
                entry = json.loads(journal.read_text())
            except (OSError, ValueError):
                journal.unlink(missing_ok=True)
                continue
            merged = entry.get("merged") or ""
            if not merged or Path(merged).exists():
                for p in entry.get("replaces", []):
                    Path(p).unlink(missing_ok=True)
            journal.unlink(missing_ok=True)
        for tmp in list(self.scores_dir.rglob("*.tmp")) + list(self.unavailable_dir.glob("*.tmp")):
            tmp.unlink(missing_ok=True)

    def write_run(self, run_id: str, manifest: dict, config_yaml: str) -> Path:
        """Write ``runs/<run_id>/manifest.json`` and ``config.yaml``; returns the folder."""
        folder = self.root / "runs" / run_id
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n")
            (folder / "config.yaml").write_text(config_yaml)
        except OSError as exc:
            raise StoreError(f"cannot write to results_dir {self.root}: {exc.strerror or exc}; "
                             f"set results_dir=<writable folder>") from exc
        return folder


def storable_text(text: str | None) -> str | None:
    """``text`` as Parquet can store it: a lone surrogate (``"\\ud800"`` in JSON, no UTF-8
    encoding) becomes the escape ``\\ud800``; valid text is returned unchanged."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def damaged_part(path: Path) -> str | None:
    """Why ``path`` is not a readable score part (truncated, not Parquet, wrong columns), or
    None when its footer and schema read fine. Reads the footer only."""
    try:
        meta = pq.read_metadata(path)
        names = set(meta.schema.to_arrow_schema().names)
    except FileNotFoundError:
        return "vanished"
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for broken files
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'unreadable'}"
    if not {"key", "cell_key", "scored_at"} <= names:
        return "not a score part (no key/cell_key/scored_at columns)"
    return None


def dedup(table: pa.Table) -> pa.Table:
    """One row per ``key``: the newest ``scored_at`` (ties: the later row), sorted by key."""
    if table.num_rows == 0:
        return table
    order = table.append_column("_i", pa.array(range(table.num_rows), pa.int64())).sort_by(
        [("key", "ascending"), ("scored_at", "ascending"), ("_i", "ascending")])
    keys = order.column("key").combine_chunks()
    keep = pa.concat_arrays([pc.not_equal(keys.slice(0, len(keys) - 1), keys.slice(1)),
                             pa.array([True])])
    return order.filter(keep).drop_columns(["_i"])


class BufferedWriter:
    """Collects scored batches and writes them as few, larger part files.

    Rows are held until ``flush_rows`` are buffered, then written (one file per cell);
    :meth:`close` writes the rest. The pipeline uses ``flush_rows=1`` (every scored batch is
    written as it arrives, so ``kill -9`` loses at most the batch being written) and merges the
    small parts with :meth:`ResultsStore.compact` at the end of the run. Use it as a context
    manager: an interrupt or an error still flushes what was buffered.

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
