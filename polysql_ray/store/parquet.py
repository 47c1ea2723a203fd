"""The keyed, append-only, resumable Parquet results store, on any pyarrow filesystem.

``results_dir`` is a local folder (``results``, ``/data/results``) or an object-store URI
(``s3://bucket/prefix``, ``gs://bucket/prefix``), opened with :mod:`pyarrow.fs`
(:func:`open_location`). Layout under it::

    scores/<dataset>/<model>/<dialect>-L<instruction_level>-<cell8>/part-<run_id>-<hash16>.parquet
    runs/<run_id>/manifest.json        composed config, package versions, git SHA, cells
    runs/<run_id>/config.yaml
    ex_table.csv                       the EX table of the latest run (also copied into runs/<run_id>/)

    unavailable/part-<run_id>-<hash16>.parquet   rows that could not run (server down ...): not scores
    quarantine/...                     damaged part files moved aside (their keys are rescored)
    .lock                              local: held (``flock``) by the run writing here;
                                       object store: the writer's lease (JSON, renewed)

Rows follow :data:`polysql_ray.store.schema.SCORE_SCHEMA`.

Part names are deterministic: ``part-<run_id>-<hash16>`` where ``hash16`` hashes the run id
and the sorted keys of the rows (:func:`part_name`), so writing the same batch again (a retried
write) replaces the part instead of doubling it. Compacted parts are ``part-<run_id>-c<hash16>``.

Exactly once (what every reader sees holds at most one row per key):

* **One writer at a time.** A run holds the writer lock from planning to its last write
  (:meth:`ResultsStore.lock`); a second run into the same store waits, then plans against
  what the first stored, so it never scores a stored key again. On a local folder the lock is
  an exclusive ``flock`` on ``<results_dir>/.lock`` (released by the kernel when the process
  dies; local to one machine: on a multi-node cluster only the driver writes). On an object
  store there is no lock primitive: the lock is a *lease* object ``.lock`` (run id, host, pid,
  expiry) renewed every ``lease_s / 3`` seconds; a run refuses (or waits) while another
  unexpired lease exists, and takes over an expired one (a killed driver's lease lapses after
  ``lease_s``). Best effort: S3 has no compare-and-swap through pyarrow, so two drivers that
  start within the same second could both believe they hold it; after writing its lease a run
  re-reads it after ``lease_settle_s`` and backs off if another run's lease replaced it. Only
  the driver writes: workers never touch the store.
* **Commit without half files.** Each scored batch is written as it arrives. Locally: to a
  temporary name, then renamed. On an object store: serialised in memory, then sent as one
  object under its final name (an S3/GCS PUT is atomic: a reader sees the whole object or
  nothing; an upload that dies midway leaves no object). ``kill -9`` loses at most the batch
  being written.
* **Compaction** (end of a run, or ``python -m jobs.compact``) merges each cell folder's parts
  into one file; a journal (``scores/.compact-<hash>.json``, naming the merged file and the
  parts it replaces) is written before the merged file appears, and the next
  :meth:`ResultsStore.lock` finishes a compaction that a crash interrupted (deletes the replaced
  parts if the merged file exists, else drops the journal), so a superseded part never
  outlives one crash.
* **Dedup on read** (:meth:`ResultsStore.read`: newest ``scored_at`` per key) is the last line:
  a raw reader between a compaction's merged write and its deletes, or a part written twice by
  two racing leases, still gives one row per key through it.
* A part file that cannot be read (truncated, not Parquet) is moved to ``quarantine/`` with a
  one-line warning; its keys are then missing, so the run rescores them.
* Rows whose execution was ``unavailable`` (infrastructure trouble, not the model) live in
  ``unavailable/``, never in ``scores/``: the next run rescores them, and they leave
  ``unavailable/`` once scored.

Object-store settings: credentials come from the SDK's usual chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_PROFILE`` / instance role; ``GOOGLE_APPLICATION_CREDENTIALS``
for ``gs://``), the endpoint from ``AWS_ENDPOINT_URL`` (or ``AWS_ENDPOINT_URL_S3``), and any of
them from the ``store.s3.*`` / ``store.gcs.*`` config keys (:func:`open_location`).

Read scores with :meth:`ResultsStore.read`, or with DuckDB over local parts:
``SELECT * FROM read_parquet('<results_dir>/scores/**/*.parquet')``. No ``key=value`` folder
names are used, so DuckDB's hive-partition detection adds no columns.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Union

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from polysql_ray.faults import FaultPoints
from polysql_ray.redaction import redact, redact_text
from polysql_ray.store.schema import SCORE_SCHEMA, conform

log = logging.getLogger("polysql_ray")

#: A part file as the store returns it: a :class:`~pathlib.Path` on a local store, the
#: filesystem path (``bucket/prefix/scores/...``, no scheme) on an object store.
PartPath = Union[Path, str]


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
    """``name`` as one folder name: characters outside ``[A-Za-z0-9_.-]`` become ``_``, at most
    80 characters, and a name of dots only (``.``, ``..``) becomes underscores, so no name
    ever leaves its folder."""
    out = _SAFE.sub("_", str(name))[:80] or "_"
    return "_" * len(out) if set(out) == {"."} else out


class StoreError(OSError):
    """The results store cannot be opened or written; the message names ``results_dir``."""


#: ``POLYSQL_FAULT=<point>:<ERRNO>[:<after>]`` makes the named fault point raise
#: ``OSError(ERRNO)`` from its ``after+1``-th call on (default 0: the first), in this process
#: and every process it starts: how the tests and ``benchmarks/fault_table.py`` stand a full
#: disk (``store.write:ENOSPC:3``) where no small filesystem can be mounted.
FAULT_ENV = "POLYSQL_FAULT"
_FAULT_CALLS: dict[str, int] = {}


def fault_point(name: str) -> None:
    """A named point where an injected fault (:data:`FAULT_ENV`) raises; a no-op otherwise."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    point, _, rest = spec.partition(":")
    if point != name:
        return
    code, _, after = rest.partition(":")
    import errno as _errno

    n = _FAULT_CALLS.get(spec, 0)
    _FAULT_CALLS[spec] = n + 1
    if n >= int(after or 0):
        num = getattr(_errno, code or "EIO", _errno.EIO)
        raise OSError(num, os.strerror(num) + f" (injected at {name})")


# ------------------------------------------------------------------ where the store lives

#: URI schemes opened as object stores (anything else with ``://`` goes to pyarrow as is).
_S3, _GCS = ("s3",), ("gs", "gcs")
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")


def is_uri(location: str | os.PathLike) -> bool:
    """True for ``scheme://...`` locations other than ``file://`` (object stores)."""
    m = _URI.match(str(location))
    return bool(m) and m.group(1).lower() != "file"


@dataclass(frozen=True)
class StoreLocation:
    """An opened store root.

    Attributes:
        fs: the pyarrow filesystem.
        base: the root's path inside ``fs`` (absolute local path, or ``bucket/prefix``).
        uri: the root as a user writes it (the local absolute path, or ``s3://bucket/prefix``).
        local: True on the local filesystem (flock, rename commit, ``Path`` results).
    """

    fs: pafs.FileSystem
    base: str
    uri: str
    local: bool

    def join(self, *parts: str) -> str:
        """``base/part/...`` (a filesystem path inside :attr:`fs`)."""
        return "/".join([self.base.rstrip("/"), *[p.strip("/") for p in parts if p]])

    def out(self, path: str) -> PartPath:
        """How a path is handed back: a ``Path`` locally, the ``fs`` path string otherwise."""
        return Path(path) if self.local else path

    def display(self, path: str) -> str:
        """``path`` as the user would write it (``s3://bucket/...`` on S3)."""
        if self.local:
            return path
        return self.uri.split("://", 1)[0] + "://" + path


def _clean(options: Mapping | None) -> dict:
    return {k: v for k, v in dict(options or {}).items() if v is not None and v != ""}


def open_location(results_dir: str | os.PathLike, options: Mapping | None = None) -> StoreLocation:
    """Open ``results_dir`` on its pyarrow filesystem.

    Args:
        results_dir: a local folder, ``file:///...``, ``s3://bucket/prefix``, ``gs://bucket/prefix``
            (or any URI :meth:`pyarrow.fs.FileSystem.from_uri` knows).
        options: the ``store`` config mapping: ``s3`` (keyword arguments of
            :class:`pyarrow.fs.S3FileSystem`: ``endpoint_override``, ``region``, ``scheme``,
            ``access_key``/``secret_key`` (prefer env), ``anonymous`` ...) and ``gcs`` (of
            :class:`pyarrow.fs.GcsFileSystem`). Unset keys fall back to the SDK's environment
            (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION`` ...). An
            ``endpoint_override`` written as ``http://host:port`` also sets ``scheme=http``.

    Raises:
        StoreError: the URI cannot be opened (unknown scheme, bad option); one line.
    """
    text = str(results_dir)
    m = _URI.match(text)
    if not m or m.group(1).lower() == "file":
        local = Path(m.group(2) if m else text).expanduser().resolve()
        return StoreLocation(pafs.LocalFileSystem(), str(local), str(local), True)
    scheme, rest = m.group(1).lower(), m.group(2).split("?", 1)[0].strip("/")
    opts = dict(options or {})
    try:
        if scheme in _S3:
            kw = _clean(opts.get("s3"))
            env_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            if kw and env_endpoint:  # the constructor, unlike from_uri, does not read it
                kw.setdefault("endpoint_override", env_endpoint)
            endpoint = str(kw.get("endpoint_override", ""))
            if "://" in endpoint:
                kw.setdefault("scheme", endpoint.split("://", 1)[0])
                kw["endpoint_override"] = endpoint.split("://", 1)[1].rstrip("/")
            fs = pafs.S3FileSystem(**kw) if kw else pafs.FileSystem.from_uri(text)[0]
        elif scheme in _GCS:
            kw = _clean(opts.get("gcs"))
            fs = pafs.GcsFileSystem(**kw) if kw else pafs.FileSystem.from_uri(text)[0]
        else:
            fs, rest = pafs.FileSystem.from_uri(text)
            rest = rest.rstrip("/")
    except (pa.ArrowException, TypeError, ValueError, OSError) as exc:
        raise StoreError(f"cannot open results_dir {text}: {str(exc).splitlines()[0] if str(exc) else exc}; "
                         f"check the URI and the store.s3/store.gcs settings (README: results store)") from exc
    if not rest:
        raise StoreError(f"results_dir {text} names no bucket; write {scheme}://<bucket>/<prefix>")
    return StoreLocation(fs, rest, f"{scheme}://{rest}", False)


def list_infos(loc: StoreLocation, folder: str, suffix: str = ".parquet",
               recursive: bool = True) -> list[pafs.FileInfo]:
    """``FileInfo`` (path, size) of the files under ``folder`` whose names end with ``suffix``,
    sorted by path (none when the folder does not exist). One listing: on S3, one LIST request
    per 1,000 objects, no request per file."""
    sel = pafs.FileSelector(folder, recursive=recursive, allow_not_found=True)
    return sorted((i for i in loc.fs.get_file_info(sel) if i.type == pafs.FileType.File and i.path.endswith(suffix)),
                  key=lambda i: i.path)


def list_files(loc: StoreLocation, folder: str, suffix: str = ".parquet", recursive: bool = True) -> list[str]:
    """Sorted paths of the files under ``folder`` whose names end with ``suffix`` (none when
    the folder does not exist)."""
    return [i.path for i in list_infos(loc, folder, suffix, recursive)]


def exists(loc: StoreLocation, path: str) -> bool:
    """True when ``path`` is a file of the store."""
    return loc.fs.get_file_info(path).type == pafs.FileType.File


def write_bytes(loc: StoreLocation, path: str, data: bytes) -> None:
    """Write one file whole: locally to ``<path>.tmp`` then renamed; on an object store as one
    PUT of the final object (atomic: readers see all of it or nothing)."""
    if loc.local:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = path + ".tmp"
        try:
            fault_point("store.write")
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):  # a full disk keeps no half file either
                os.unlink(tmp)
            raise
        return
    with loc.fs.open_output_stream(path) as out:
        out.write(data)


def read_bytes(loc: StoreLocation, path: str) -> bytes:
    """The bytes of one file (``FileNotFoundError`` when absent)."""
    if loc.local:
        return Path(path).read_bytes()
    try:
        with loc.fs.open_input_stream(path) as src:
            return src.read()
    except OSError as exc:
        if not exists(loc, path):
            raise FileNotFoundError(f"{loc.display(path)} does not exist") from exc
        raise


#: Footer key-value entry of a part holding the sha256 (hex) of the whole file as written with
#: :data:`_PLACEHOLDER` in that entry's place: data pages and footer are covered alike, and the
#: digest then fills the placeholder's 64 bytes (no offset moves). :func:`damaged_part` verifies it.
CHECKSUM_KEY = b"polysql.sha256"
_PLACEHOLDER = b"polysql.sha256:" + b"-" * 49


def parquet_bytes(table: pa.Table) -> bytearray:
    """``table`` as the bytes of one Parquet file (zstd) whose footer carries the sha256 of the
    file itself (:data:`CHECKSUM_KEY`). Memory: the file once (plus pyarrow's buffer while
    it is copied out)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata({**(table.schema.metadata or {}), CHECKSUM_KEY: _PLACEHOLDER}),
                   sink, compression="zstd")
    data = bytearray(sink.getvalue())
    del sink
    at = data.rfind(_PLACEHOLDER)  # the footer's entry: key-value metadata follow the row groups
    data[at:at + len(_PLACEHOLDER)] = hashlib.sha256(data).hexdigest().encode()
    return data


def _checksum_problem(data: bytes, stored: bytes) -> str | None:
    """Why ``data`` (a whole part) does not match the checksum its footer holds, or None."""
    footer_start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.rfind(stored, max(0, footer_start))
    if len(stored) != len(_PLACEHOLDER) or at < 0:
        return "checksum entry damaged"
    buf = bytearray(data)
    buf[at:at + len(stored)] = _PLACEHOLDER
    actual = hashlib.sha256(buf).hexdigest().encode()
    if actual != stored:
        return (f"checksum mismatch (footer sha256 {stored[:12].decode(errors='replace')}..., "
                f"content {actual[:12].decode()}...)")
    return None


def write_parquet(loc: StoreLocation, path: str, table: pa.Table) -> None:
    """Write ``table`` as one checksummed Parquet file (:func:`parquet_bytes`) without ever
    exposing half a file (:func:`write_bytes`)."""
    write_bytes(loc, path, parquet_bytes(table))


def delete(loc: StoreLocation, path: str) -> None:
    """Delete one file; absent is fine."""
    with contextlib.suppress(FileNotFoundError):
        loc.fs.delete_file(path)


def part_name(rows: pa.Table, tag: str = "") -> str:
    """Deterministic part file name ``part-<run_id>-<tag><hash16>.parquet``: the hash covers the
    run id and the sorted ``key`` column, so the same rows written again get the same name
    (a retried write replaces, never doubles). ``run_id`` is the newest of the rows
    (``norun`` when absent); run ids start with a UTC stamp, so names sort by run."""
    runs = [r for r in pc.unique(rows.column("run_id")).to_pylist() if r] if "run_id" in rows.column_names else []
    run = _safe(max(runs)) if runs else "norun"
    keys = sorted(rows.column("key").to_pylist())
    return f"part-{run}-{tag}{stable_hash('part-v1', run, keys, n=16)}.parquet"


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0]


class ResultsStore:
    """Append-only Parquet store of score rows (exactly-once rules in the module docstring).

    Args:
        results_dir: root folder (created when missing) or object-store URI (the bucket must
            exist).
        options: the ``store`` config mapping (:func:`open_location`; ``lease_s``,
            ``lease_settle_s`` for the object-store lease).

    Attributes:
        location: the opened :class:`StoreLocation`.
        root: a ``Path`` for a local store, the URI string (``s3://bucket/prefix``) otherwise;
            ``scores_dir``, ``unavailable_dir``, ``quarantine_dir`` likewise.
        quarantined: part files moved to ``quarantine/`` by this instance.

    Errors: :class:`StoreError` when the store cannot be opened, created or written (message
    names the location and what to set).
    """

    def __init__(self, results_dir: str | os.PathLike, options: Mapping | None = None) -> None:
        self.options = dict(options or {})
        self.location = loc = open_location(results_dir, self.options)
        self._scores, self._unavailable = loc.join("scores"), loc.join("unavailable")
        self._quarantine = loc.join("quarantine")
        if loc.local:
            self.root = Path(loc.base)
            self.scores_dir, self.unavailable_dir = Path(self._scores), Path(self._unavailable)
            self.quarantine_dir = Path(self._quarantine)
        else:
            self.root = loc.uri
            self.scores_dir, self.unavailable_dir = loc.display(self._scores), loc.display(self._unavailable)
            self.quarantine_dir = loc.display(self._quarantine)
        probe = loc.join(f".write-probe-{uuid.uuid4().hex[:8]}")
        try:
            if loc.local:
                self.scores_dir.mkdir(parents=True, exist_ok=True)
            write_bytes(loc, probe, b"")
            delete(loc, probe)
        except OSError as exc:
            raise StoreError(f"cannot write to results_dir {loc.uri}: "
                             f"{getattr(exc, 'strerror', None) or str(exc).splitlines()[0]}; "
                             f"set results_dir=<writable folder> (or s3://<bucket>/<prefix>)") from exc
        self.quarantined: list[PartPath] = []
        #: the one-line reason this store stopped taking writes (full disk, read-only folder);
        #: None while it writes. Once set, :class:`BufferedWriter` drops what it holds (the next
        #: run rescores it) and :meth:`compact` leaves the parts as they are.
        self.failed: str | None = None
        self._checked: dict[str, tuple] = {}  # part path -> (size, mtime_ns) that verified

    @property
    def uri(self) -> str:
        """The store root as a user writes it (absolute local path or ``s3://bucket/prefix``)."""
        return self.location.uri

    # -- one writer at a time --------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, run_id: str = "", wait: bool = True) -> Iterator[None]:
        """Hold the exclusive writer lock of this store: ``flock`` on ``.lock`` locally, a
        renewed lease object ``.lock`` on an object store (module docstring).

        Waits (printing one line naming the holder) while another run holds it; with
        ``wait=False`` raises :class:`StoreError` instead. On entry finishes any compaction a
        crash interrupted. Released on exit; locally also by the kernel when the process
        dies, on an object store when the lease expires (``store.lease_s``, default 120 s).
        """
        ctx = self._flock(run_id, wait) if self.location.local else self._lease(run_id, wait)
        with ctx:
            self.recover()
            yield

    @contextlib.contextmanager
    def _flock(self, run_id: str, wait: bool) -> Iterator[None]:
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
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the descriptor releases the flock

    def read_lease(self) -> dict | None:
        """The object-store lease as stored (``run_id``, ``host``, ``pid``, ``token``,
        ``expires`` in epoch seconds), or None when there is none (or it is unreadable)."""
        try:
            return json.loads(read_bytes(self.location, self.location.join(".lock")))
        except (OSError, ValueError):
            return None

    @contextlib.contextmanager
    def _lease(self, run_id: str, wait: bool) -> Iterator[None]:
        loc, path = self.location, self.location.join(".lock")
        ttl = float(self.options.get("lease_s") or 120.0)
        settle = float(self.options.get("lease_settle_s", 1.0))
        mine = {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(),
                "token": uuid.uuid4().hex, "expires": 0.0}
        announced = False
        while True:
            held = self.read_lease()
            if held and held.get("token") != mine["token"] and float(held.get("expires", 0)) > time.time():
                left = float(held["expires"]) - time.time()
                holder = (f"run {held.get('run_id', '?')} (pid {held.get('pid', '?')} on "
                          f"{held.get('host', '?')}, lease for {left:.0f}s more)")
                if not wait:
                    raise StoreError(f"results_dir {loc.uri} is being written by {holder}")
                if not announced:
                    print(f"polysql_ray: results_dir {loc.uri} is being written by {holder}; "
                          f"waiting for it to finish", file=sys.stderr, flush=True)
                    announced = True
                time.sleep(min(5.0, max(0.2, ttl / 10)))
                continue
            mine["expires"] = time.time() + ttl
            write_bytes(loc, path, json.dumps(mine).encode())
            time.sleep(settle)  # a racing writer's PUT lands now; the last PUT wins
            held = self.read_lease()
            if held and held.get("token") == mine["token"]:
                break
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(ttl / 3):
                mine["expires"] = time.time() + ttl
                with contextlib.suppress(Exception):
                    write_bytes(loc, path, json.dumps(mine).encode())

        renewer = threading.Thread(target=renew, name="polysql-store-lease", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()
            held = self.read_lease()
            if held and held.get("token") == mine["token"]:
                delete(loc, path)

    # -- reading --------------------------------------------------------------------------
    def files(self) -> list[PartPath]:
        """All readable score part files, sorted by path. Damaged ones are quarantined."""
        return [self.location.out(p) for p in self._readable(list_infos(self.location, self._scores))]

    def unavailable_files(self) -> list[PartPath]:
        """All readable part files of ``unavailable/`` rows."""
        infos = list_infos(self.location, self._unavailable, recursive=False)
        return [self.location.out(p) for p in self._readable(infos)]

    def _readable(self, infos: list[pafs.FileInfo]) -> list[str]:
        """Paths of the listed parts that verify (:func:`damaged_part`: checksum, footer,
        columns); each (path, size, mtime) is verified once per instance, so a part rewritten,
        truncated or damaged in place is verified again. Damaged ones are quarantined."""
        ok = []
        for info in infos:
            p = info.path
            if self._checked.get(p) == (info.size, info.mtime_ns):
                ok.append(p)
                continue
            problem = damaged_part(p, self.location.fs)
            if problem is None:
                self._checked[p] = (info.size, info.mtime_ns)
                ok.append(p)
            elif problem != "vanished":  # vanished: removed since the listing (a compaction)
                self.quarantine(p, problem)
        return ok

    def quarantine(self, path: PartPath, problem: str) -> PartPath | None:
        """Move a damaged part file to ``quarantine/`` (one-line warning). Its keys are then
        missing from the store, so the next planning pass rescores them."""
        loc, src = self.location, str(path)
        rel = src[len(loc.base):].lstrip("/")
        dest = loc.join("quarantine", rel)
        try:
            if loc.local:
                Path(dest).parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dest)
            else:
                loc.fs.move(src, dest)
        except FileNotFoundError:
            return None  # another reader moved it first
        except OSError as exc:
            print(f"polysql_ray: warning: damaged part file {loc.display(src)} ({problem}) could not be "
                  f"moved to {self.quarantine_dir}: {getattr(exc, 'strerror', None) or exc}; it is skipped",
                  file=sys.stderr)
            return None
        print(f"polysql_ray: warning: damaged part file {loc.display(src)} ({problem}) moved to "
              f"{loc.display(dest)}; its rows will be rescored", file=sys.stderr)
        self.quarantined.append(loc.out(dest))
        return loc.out(dest)

    def _dataset(self, files: list[PartPath], schema: pa.Schema | None = None):
        """A pyarrow Dataset over ``files``. pyarrow.dataset is imported here, on first read:
        it loads pandas (~50 MiB RSS), which a run over a fresh store never needs before its end."""
        import pyarrow.dataset as pads

        return pads.dataset([str(f) for f in files], format="parquet", schema=schema,
                            filesystem=self.location.fs)

    def existing_keys(self, cell_keys: Iterable[str] | None = None) -> set[str]:
        """Keys already scored, optionally restricted to some cells. Reads only three columns.

        Pending work, so not included: ``unavailable`` rows (they live apart, in
        ``unavailable/``) and rows whose distilled-suite check could not run
        (``suite_verdict = unavailable``: a suite copy failed or a suite execution met
        infrastructure trouble). A suite-unavailable key is rescored by the next run, and the
        newer row wins as everywhere (latest ``scored_at``); a key with any other stored row is
        done."""
        files = self.files()
        if not files:
            return set()
        flt = None
        if cell_keys is not None:
            cells = list(set(cell_keys))
            if not cells:
                return set()
            flt = pc.field("cell_key").isin(cells)
        done = pc.is_null(pc.field("suite_verdict")) | (pc.field("suite_verdict") != "unavailable")
        flt = done if flt is None else flt & done
        table = self._dataset(files).to_table(columns=["key"], filter=flt)
        return set(table.column("key").to_pylist())

    def read(self, columns: list[str] | None = None, cell_keys: Iterable[str] | None = None,
             unavailable: bool = False) -> pa.Table:
        """Stored rows, one per key (the newest ``scored_at``), optionally restricted to cells.

        Only ``columns`` (plus ``key`` and ``scored_at``, which deduplication needs) are read
        from the files, so an aggregate over a few columns reads a fraction of the store.
        With ``unavailable=True`` the ``unavailable/`` rows of keys not scored yet are included
        (verdict ``unavailable``), so a summary can count what is left.
        """
        wanted = None if columns is None else list(dict.fromkeys([*columns, "key", "scored_at"]))
        table = self._read_files(self.files(), cell_keys, wanted)
        if unavailable:
            extra = self._read_files(self.unavailable_files(), cell_keys, wanted)
            if extra.num_rows and table.num_rows:
                scored = pa.array(list(set(table.column("key").to_pylist())), pa.string())
                extra = extra.filter(pc.invert(pc.is_in(extra.column("key"), value_set=scored)))
            table = pa.concat_tables([table, extra]).sort_by([("key", "ascending")])
        return table.select(columns) if columns else table

    def _read_files(self, files: list[PartPath], cell_keys, columns: list[str] | None = None) -> pa.Table:
        if not files:
            schema = SCORE_SCHEMA if columns is None else pa.schema([SCORE_SCHEMA.field(c) for c in columns])
            return schema.empty_table()
        flt = pc.field("cell_key").isin(list(set(cell_keys))) if cell_keys is not None else None
        table = self._dataset(files, SCORE_SCHEMA).to_table(columns=columns, filter=flt)
        return dedup(table)

    # -- writing --------------------------------------------------------------------------
    def append(self, rows: pa.Table) -> list[PartPath]:
        """Write rows (SCORE_SCHEMA) as new part files, one per cell. Returns the paths.

        Each part is committed whole (module docstring) under its deterministic name
        (:func:`part_name`). Rows with verdict ``unavailable`` go to ``unavailable/`` instead.
        """
        rows = conform(rows)
        out: list[PartPath] = []
        if rows.num_rows == 0:
            return out
        if self.failed is not None:
            raise StoreError(self.failed)
        rows = _redact_columns(rows, REDACTED_COLUMNS)
        try:
            unav = pc.fill_null(pc.equal(rows.column("verdict"), "unavailable"), False)
            if pc.any(unav).as_py():
                out.append(self._write(rows.filter(unav), self._unavailable))
                rows = rows.filter(pc.invert(unav))
            for cell in sorted(set(rows.column("cell_key").to_pylist())):
                part = rows.filter(pc.equal(rows.column("cell_key"), cell))
                out.append(self._write(part, self._cell_folder(part, cell)))
        except OSError as exc:
            raise self._fail(exc, f"storing {rows.num_rows} scored rows") from exc
        return out

    def _fail(self, exc: OSError, doing: str) -> StoreError:
        """Mark the store failed (:attr:`failed`) and return the one-line error to raise."""
        if isinstance(exc, StoreError):
            self.failed = self.failed or str(exc)
            return exc
        self.failed = (f"cannot write to results_dir {self.uri} ({doing}): "
                       f"{getattr(exc, 'strerror', None) or str(exc).splitlines()[0]}; nothing stored "
                       f"before is lost and what was not stored is rescored by the next run: free space "
                       f"or make the folder writable, then rerun")
        return StoreError(self.failed)

    def _cell_folder(self, part: pa.Table, cell: str) -> str:
        first = part.slice(0, 1).to_pylist()[0]
        return self.location.join("scores", _safe(first["dataset"]), _safe(first["model"]),
                                  f"{_safe(first['dialect'])}-L{_safe(first['instruction_level'])}-{cell[:8]}")

    def _write(self, part: pa.Table, folder: str, tag: str = "") -> PartPath:
        path = f"{folder}/{part_name(part, tag)}"
        write_parquet(self.location, path, part)
        return self.location.out(path)

    def write_bytes(self, relpath: str, data: bytes) -> PartPath:
        """Write ``<results_dir>/<relpath>`` whole (rename or one PUT); returns its path."""
        path = self.location.join(relpath)
        try:
            write_bytes(self.location, path, data)
        except OSError as exc:
            raise self._fail(exc, f"writing {relpath}") from exc
        return self.location.out(path)

    def read_bytes(self, relpath: str) -> bytes:
        """The bytes of ``<results_dir>/<relpath>`` (``FileNotFoundError`` when absent)."""
        return read_bytes(self.location, self.location.join(relpath))

    # -- compaction (holding the lock) -----------------------------------------------------
    def compact(self) -> int:
        """Merge each cell folder's parts into one file and drop ``unavailable/`` rows whose
        keys are now scored. Call while holding :meth:`lock`. Returns files removed.

        Crash safety: a journal naming the merged file and the parts it replaces is written
        before the merged file is committed; :meth:`recover` (run on every :meth:`lock`)
        deletes the replaced parts if the merged file exists, else drops the journal. Between
        the commit and the deletes a raw glob reader could see a row twice (readers through
        :meth:`read` never do).
        """
        if self.failed is not None:
            return 0  # a store that took no more writes keeps its parts as they are
        try:
            return self._compact()
        except OSError as exc:
            raise self._fail(exc, "compacting; the part files stay as they were") from exc

    def _compact(self) -> int:
        removed = 0
        by_folder: dict[str, list[str]] = {}
        for p in self.files():
            by_folder.setdefault(_parent(str(p)), []).append(str(p))
        for folder, parts in sorted(by_folder.items()):
            if len(parts) > 1:
                removed += self._merge(parts, folder, dedup(self._concat(parts)))
        unav = [str(p) for p in self.unavailable_files()]
        if unav:
            rows = self._read_files(unav, None)
            if rows.num_rows:
                scored = pa.array(list(self.existing_keys(set(rows.column("cell_key").to_pylist()))),
                                  pa.string())
                rows = rows.filter(pc.invert(pc.is_in(rows.column("key"), value_set=scored)))
            if len(unav) > 1 or rows.num_rows != self._num_rows(unav[0]):
                removed += self._merge(unav, self._unavailable, rows)
        return removed

    def _num_rows(self, path: str) -> int:
        return pq.read_metadata(path, filesystem=self.location.fs).num_rows

    def _concat(self, parts: list[PartPath]) -> pa.Table:
        return pa.concat_tables([conform(pq.read_table(str(p), filesystem=self.location.fs)) for p in parts])

    def _merge(self, parts: list[str], folder: str, rows: pa.Table) -> int:
        loc = self.location
        merged = f"{folder}/{part_name(rows, 'c')}" if rows.num_rows else ""
        replaces = [p for p in parts if p != merged]
        journal = loc.join("scores", f".compact-{stable_hash('journal', merged, replaces)}.json")
        write_bytes(loc, journal, json.dumps({"merged": merged, "replaces": replaces}).encode())
        if rows.num_rows:
            write_parquet(loc, merged, rows)
        for p in replaces:
            delete(loc, p)
        delete(loc, journal)
        return len(replaces)

    def recover(self) -> None:
        """Finish compactions a crash interrupted (see :meth:`compact`); locally also remove
        stale ``.tmp`` files of crashed writers. Call while holding :meth:`lock`."""
        loc = self.location
        for journal in list_files(loc, self._scores, suffix=".json", recursive=False):
            if not journal.rsplit("/", 1)[-1].startswith(".compact-"):
                continue
            try:
                entry = json.loads(read_bytes(loc, journal))
            except (OSError, ValueError):
                delete(loc, journal)
                continue
            merged = entry.get("merged") or ""
            if not merged or exists(loc, merged):
                for p in entry.get("replaces", []):
                    if p != merged:
                        delete(loc, p)
            delete(loc, journal)
        if loc.local:
            for folder in (self._scores, self._unavailable):
                for tmp in list_files(loc, folder, suffix=".tmp"):
                    delete(loc, tmp)

    def write_run(self, run_id: str, manifest: dict, config_yaml: str) -> PartPath:
        """Write ``runs/<run_id>/manifest.json`` and ``config.yaml``; returns the folder."""
        self.write_bytes(f"runs/{run_id}/manifest.json",
                         (json.dumps(redact(manifest), indent=2, sort_keys=True, default=str) + "\n").encode())
        self.write_bytes(f"runs/{run_id}/config.yaml", redact_text(config_yaml).encode())
        return self.location.out(self.location.join("runs", run_id))


#: Score columns holding engine or generator messages: secrets in them (a URL's credentials,
#: a conninfo password) are masked before they are stored (:func:`polysql_ray.redaction.redact_text`).
REDACTED_COLUMNS = ("gold_error", "pred_error")


def _redact_columns(rows: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    for name in columns:
        col = rows.column(name)
        if col.null_count == len(col):
            continue
        values = col.to_pylist()
        clean = [redact_text(v) for v in values]
        if clean != values:
            rows = rows.set_column(rows.schema.get_field_index(name), name, pa.array(clean, col.type))
    return rows


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


#: ``(path, size, mtime_ns) -> problem or None`` of the parts verified in this process (a part
#: rewritten or damaged in place changes its mtime and is verified again).
_VERIFIED: dict[tuple, str | None] = {}


#: Columns every score part has (a file without them is no score part).
SCORE_PART_COLUMNS = ("key", "cell_key", "scored_at")


def damaged_part(path: PartPath, filesystem: pafs.FileSystem | None = None,
                 columns: tuple[str, ...] = SCORE_PART_COLUMNS) -> str | None:
    """Why ``path`` is not a sound score part, or None when it is. Reads the whole file once
    per process (per size and mtime): magic bytes, the footer, the score columns, and the
    sha256 of the file against the footer's :data:`CHECKSUM_KEY`, so a part damaged
    anywhere (truncated, bytes zeroed mid-file, not Parquet) is found before any reader
    trips on it. A part written before checksums existed is decoded whole instead.
    ``filesystem``: the store's (local when None). Returns ``"vanished"`` for a file removed
    since it was listed."""
    fs = filesystem or pafs.LocalFileSystem()
    info = fs.get_file_info(str(path))
    if info.type == pafs.FileType.NotFound:
        return "vanished"
    ident = (str(path), info.size, info.mtime_ns, columns)
    if ident not in _VERIFIED:
        _VERIFIED[ident] = _verify(str(path), fs, columns)
    return _VERIFIED[ident]


def _verify(path: str, fs: pafs.FileSystem, columns: tuple[str, ...]) -> str | None:
    try:
        with fs.open_input_stream(path) as src:
            data = src.read()
    except FileNotFoundError:
        return "vanished"
    except OSError as exc:
        return f"unreadable: {getattr(exc, 'strerror', None) or exc}"
    if len(data) < 12 or data[:4] != b"PAR1" or data[-4:] != b"PAR1":
        return f"not Parquet ({len(data)} bytes, no PAR1 magic at both ends)"
    try:
        meta = pq.read_metadata(pa.BufferReader(data))
        names = set(meta.schema.to_arrow_schema().names)
        stored = (meta.metadata or {}).get(CHECKSUM_KEY)
        if stored is None:  # a part of an older version: decode every page instead
            pq.read_table(pa.BufferReader(data))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for broken files
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else 'unreadable'}"
    if stored is not None and _checksum_problem(data, stored):
        return _checksum_problem(data, stored)
    if not set(columns) <= names:
        return f"not a part of this store (no {'/'.join(columns)} columns)"
    return None


def storable_sql(text: str | None, max_chars: int) -> str | None:
    """A SQL text as stored (:func:`storable_text`); longer than ``max_chars`` (the
    ``limits.max_sql_chars`` the sandbox refuses it for) it is cut to its first ``max_chars``
    characters followed by ``/* polysql_ray: truncated: N characters in all */``, so a 50 MB
    prediction costs the store ``max_chars``, not 50 MB, and its row still says how long it was."""
    if text is not None and len(text) > max_chars:
        text = f"{text[:max_chars]}\n/* polysql_ray: truncated: {len(text)} characters in all */"
    return storable_text(text)


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


#: Named fault point ``part_written`` (after score rows reached the store), :mod:`polysql_ray.faults`.
_POINTS = FaultPoints()


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
        flush_s: also write once this many seconds passed since the last write (checked on
            :meth:`add` and :meth:`tick`), so ``kill -9`` loses at most ``flush_s`` seconds of
            scoring; None: by rows only.
    """

    def __init__(self, store: ResultsStore, flush_rows: int = 5000, flush_s: float | None = None) -> None:
        import time

        self.store, self.flush_rows = store, max(1, int(flush_rows))
        self.flush_s = None if flush_s is None else float(flush_s)
        self._clock = time.monotonic
        self._last = self._clock()
        self._parts: list[pa.Table] = []
        self._rows = 0
        self.dropped = 0
        self.files: list[Path] = []

    def _due(self) -> bool:
        return self.flush_s is not None and self._clock() - self._last >= self.flush_s

    def add(self, rows: pa.Table) -> None:
        """Buffer one scored batch; writes when ``flush_rows`` are buffered or ``flush_s`` passed."""
        if rows.num_rows:
            self._parts.append(rows)
            self._rows += rows.num_rows
        if self._rows >= self.flush_rows or self._due():
            self.flush()

    def tick(self) -> None:
        """Write the buffer if ``flush_s`` passed since the last write (call while waiting)."""
        if self._due():
            self.flush()

    def flush(self) -> None:
        """Write everything buffered now. Raises :class:`StoreError` (one line) when the store
        cannot take the write; after that the store is failed and later flushes drop what is
        buffered (counted in :attr:`dropped`; the next run rescores those rows)."""
        if self._parts:
            if getattr(self.store, "failed", None) is not None:
                self.dropped += self._rows
            else:
                try:
                    self.files.extend(self.store.append(pa.concat_tables(self._parts)))
                except StoreError:
                    self.dropped += self._rows
                    self._parts, self._rows = [], 0
                    raise
            self._parts, self._rows = [], 0
            _POINTS.reach("part_written")
        self._last = self._clock()

    close = flush

    def __enter__(self) -> "BufferedWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.flush()
            return
        with contextlib.suppress(StoreError):  # the error already propagating is the one to show
            self.flush()
