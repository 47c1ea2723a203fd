"""The keyed, append-only Parquet store of model generations (issue 4, item 3).

Layout under ``results_dir``::

    generations/<model>/part-<utc>-<hash16>.parquet

One row per generated prediction (:data:`GENERATION_SCHEMA`). The key is
``stable_hash(generator fingerprint, prompt sha256)`` (:func:`generation_key`): the fingerprint
covers model id, revision, sampling parameters, seed and prompt template version
(:func:`polysql_ray.generation.prompts.generator_fingerprint`); the prompt sha256 covers the
rendered messages (:attr:`polysql_ray.generation.prompts.RenderedPrompt.sha256`). The same
prompt sent to the same generator is therefore generated once, whatever dataset, cell or
comparison policy asks for it.

``results_dir`` is a local folder or an object-store URI (``s3://bucket/prefix``), opened as
:class:`polysql_ray.store.parquet.ResultsStore` opens it. Files are only ever added, each
committed whole (locally a temporary name then a rename; on an object store one PUT of the
final object), under a deterministic name ``part-<utc>-<hash16>`` (creation time, then a hash
of it and the batch's keys), so a retried write of the same batch replaces it: a crash loses at most the part being
written. Read local parts with DuckDB:
``SELECT * FROM read_parquet('<results_dir>/generations/**/*.parquet')``.
Replay and gold generators never use this store (their predictions are files already).
"""
from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Mapping
from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.redaction import redact_text
from polysql_ray.store.parquet import (PartPath, StoreError, _safe, damaged_part, list_files, open_location, stable_hash,
                                       write_parquet)

#: Row schema of the generations store.
GENERATION_SCHEMA = pa.schema([
    pa.field("key", pa.string(), nullable=False),            # generation_key(fingerprint, prompt_sha256)
    pa.field("generator_fingerprint", pa.string()),
    pa.field("model", pa.string()),
    pa.field("dataset", pa.string()),
    pa.field("dialect", pa.string()),
    pa.field("instruction_level", pa.string()),
    pa.field("question_id", pa.string()),                    # the question that first asked for it
    pa.field("prompt_sha256", pa.string()),
    pa.field("raw_output", pa.string()),
    pa.field("pred_sql", pa.string()),
    pa.field("status", pa.string()),                         # GenStatus value
    pa.field("error", pa.string()),
    pa.field("prompt_tokens", pa.int64()),
    pa.field("completion_tokens", pa.int64()),
    pa.field("latency_s", pa.float64()),                     # wall seconds (amortised per batch for hf/vllm)
    pa.field("created_at", pa.timestamp("us", tz="UTC")),
])

#: Statuses a lookup treats as "not generated yet": a rerun retries them (a dead server,
#: a timeout). Their rows stay in the store for auditing.
RETRY_STATUSES: frozenset[GenStatus] = frozenset({GenStatus.ERROR})


def generation_key(generator_fingerprint: str, prompt_sha256: str) -> str:
    """Key of one generation: ``stable_hash("gen-v1", generator_fingerprint, prompt_sha256)``
    (32 hex characters)."""
    return stable_hash("gen-v1", generator_fingerprint, prompt_sha256)


class GenerationsStore:
    """Append-only Parquet store of generations, one folder per model.

    Args:
        results_dir: the run's results folder or object-store URI; generations go to
            ``<results_dir>/generations`` (a local folder is created when missing).
        options: the ``store`` config mapping (see :func:`polysql_ray.store.parquet.open_location`).

    Errors: ``OSError`` (a :class:`~polysql_ray.store.parquet.StoreError`) when the store cannot
    be opened or the folder created (message names the path).
    """

    def __init__(self, results_dir: str | os.PathLike, options: Mapping | None = None) -> None:
        self.location = loc = open_location(results_dir, options)
        self._dir = loc.join("generations")
        self.root = loc.out(loc.base)
        self.dir = loc.out(self._dir)
        self._warned: set[str] = set()  # damaged files already reported
        if loc.local:
            try:
                os.makedirs(self._dir, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create generations folder {self._dir}: {exc}; "
                                 "set results_dir=<writable folder>") from exc

    def model_dir(self, model: str) -> PartPath:
        """``<results_dir>/generations/<model>`` (model name made filesystem-safe)."""
        return self.location.out(f"{self._dir}/{_safe(model)}")

    def files(self, model: str | None = None) -> list[PartPath]:
        """Part files of one model (or of all models), sorted by path."""
        base = self._dir if model is None else f"{self._dir}/{_safe(model)}"
        out = []
        for p in list_files(self.location, base):
            problem = damaged_part(p, self.location.fs, ("key", "created_at"))
            if problem is None:
                out.append(self.location.out(p))
            elif problem != "vanished" and p not in self._warned:
                self._warned.add(p)  # its generations count as missing: generated again
                print(f"polysql_ray: warning: skipping damaged generations file {self.location.display(p)} "
                      f"({problem}); its predictions are generated again", file=sys.stderr)
        return out

    def read(self, model: str | None = None, keys: Iterable[str] | None = None) -> pa.Table:
        """Stored rows in write order (oldest first), optionally restricted to keys."""
        files = self.files(model)
        if not files:
            return GENERATION_SCHEMA.empty_table()
        import pyarrow.dataset as pads  # on first read: it loads pandas (store/parquet.py)

        ds = pads.dataset([str(f) for f in files], format="parquet", schema=GENERATION_SCHEMA,
                          filesystem=self.location.fs)
        flt = pads.field("key").isin(list(set(keys))) if keys is not None else None
        return ds.to_table(filter=flt)

    def count(self, model: str | None = None) -> int:
        """Number of stored rows (every attempt, retried errors included)."""
        files = self.files(model)
        return sum(pq.read_metadata(str(f), filesystem=self.location.fs).num_rows for f in files)

    def lookup(self, model: str, keys: Iterable[str]) -> dict[str, Prediction]:
        """Stored generations by key: ``{key: Prediction}`` for the keys found.

        The newest usable row per key wins; rows whose status is in :data:`RETRY_STATUSES`
        count as missing. The returned Prediction's ``question_id`` is the one stored (the
        caller re-labels it for the asking example).
        """
        keys = list(set(keys))
        if not keys:
            return {}
        table = self.read(model, keys)
        retry = {s.value for s in RETRY_STATUSES}
        found: dict[str, Prediction] = {}
        for row in table.to_pylist():  # oldest first: later rows overwrite earlier ones
            if row["status"] in retry:
                continue
            found[row["key"]] = Prediction(
                question_id=row["question_id"], pred_sql=row["pred_sql"] or "",
                status=GenStatus(row["status"]), raw_output=row["raw_output"] or "",
                error=row["error"], prompt_tokens=int(row["prompt_tokens"] or 0),
                completion_tokens=int(row["completion_tokens"] or 0),
                latency_s=float(row["latency_s"] or 0.0), prompt_sha256=row["prompt_sha256"] or "")
        return found

    def append(self, model: str, generator_fingerprint: str, dataset: str, dialect: str,
               instruction_level: str, predictions: Sequence[Prediction]) -> PartPath | None:
        """Write one part file with a row per prediction (each must carry ``prompt_sha256``).

        Returns the part's path (None when ``predictions`` is empty).

        Raises:
            ValueError: a prediction has no ``prompt_sha256`` (it could never be looked up).
        """
        if not predictions:
            return None
        missing = [p.question_id for p in predictions if not p.prompt_sha256]
        if missing:
            raise ValueError(f"predictions without prompt_sha256 cannot be stored: question_ids {missing[:5]}")
        now = dt.datetime.now(dt.timezone.utc)
        rows = [{
            "key": generation_key(generator_fingerprint, p.prompt_sha256),
            "generator_fingerprint": generator_fingerprint, "model": model, "dataset": dataset,
            "dialect": dialect, "instruction_level": instruction_level, "question_id": p.question_id,
            "prompt_sha256": p.prompt_sha256, "raw_output": p.raw_output, "pred_sql": p.pred_sql,
            "status": GenStatus(p.status).value, "error": redact_text(p.error), "prompt_tokens": int(p.prompt_tokens),
            "completion_tokens": int(p.completion_tokens), "latency_s": float(p.latency_s),
            "created_at": now,
        } for p in predictions]
        stamp = now.strftime("%Y%m%dT%H%M%S%f")
        digest = stable_hash("gen-part-v1", stamp, sorted(r["key"] for r in rows), n=16)
        path = f"{self._dir}/{_safe(model)}/part-{stamp}-{digest}.parquet"
        try:
            write_parquet(self.location, path, pa.Table.from_pylist(rows, schema=GENERATION_SCHEMA))
        except OSError as exc:
            raise StoreError(f"cannot write generations to results_dir {self.location.uri}: "
                             f"{getattr(exc, 'strerror', None) or exc}; the generations not stored are "
                             f"generated again by the next run: free space or make the folder writable, "
                             f"then rerun") from exc
        return self.location.out(path)
