"""The generation stage: predictions for one grid cell, reusing stored generations, streamed
batch by batch.

For a generator that renders prompts (``uses_prompts = True``: ``hf``, ``openai``, ``vllm``)
the stage, per cell (model x dataset x dialect x instruction level):

1. renders every example's prompt once (:func:`polysql_ray.generation.prompts.render_all`,
   the same function the generators call, so the sha256 is the prompt the model sees);
2. looks the generations up in :class:`polysql_ray.store.generations.GenerationsStore` by
   ``generation_key(generator.fingerprint(), prompt sha256)`` and hands the ones found over at once;
3. calls ``generator.generate`` for the examples not found, ``batch_size`` examples per call
   (``pipeline.generation_batch_size``; 0: the whole remainder in one call, so vLLM batches it
   all), and after each call
4. appends that batch's generations to the store, then hands them over
   (:meth:`GenerationStage.stream` yields ``(example indices, predictions)``).

The driver executes and scores each batch while the next one generates (:class:`GenerationFeed`),
so execution and scoring start before generation ends, within a cell too. A rerun generates
nothing, and a crash mid-sweep loses at most the batch being generated: every batch handed over
is already stored, and the rerun reads it back. Replay and gold generators (no ``uses_prompts``)
are called directly, one batch per cell, and never touch the store. One generator instance per
model serves every cell of a sweep (the driver's ``grid.generators``), so a vLLM actor pool is
started once; :func:`close_generators` stops it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.faults import FaultPoints
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.store.generations import GenerationsStore, generation_key

log = logging.getLogger("polysql_ray")

#: Named fault point ``generated`` (:mod:`polysql_ray.faults`): a model's generation thread has
#: stored one batch of generations and handed it to the driver, before it generates the next.
_POINTS = FaultPoints()

#: One handed-over batch of a cell: example indices (into the cell's dataset) and their predictions.
Batch = tuple[list[int], list[Prediction]]


@dataclass
class GenerationStats:
    """Figures of the generation stage over one run.

    Attributes:
        cells: cells of prompt-based generators that asked for predictions (replay and gold
            read files and are not counted).
        generated: predictions produced by calling a model generator in this run.
        reused: predictions read back from the generations store.
        unrenderable: examples whose prompt could not be built (ERROR predictions, no model call).
        seconds: wall seconds spent in the stage (rendering, lookups, generation, writes).
        per_model: ``{model: generated}``.
    """

    cells: int = 0
    generated: int = 0
    reused: int = 0
    unrenderable: int = 0
    seconds: float = 0.0
    per_model: dict = field(default_factory=dict)


class GenerationStage:
    """Per-run generation stage: owns the (optional) store and the run's figures.

    Args:
        store: the generations store; None disables caching (every cell calls the generator).
    """

    def __init__(self, store: GenerationsStore | None) -> None:
        import threading

        self.store = store
        self.stats = GenerationStats()
        self._lock = threading.Lock()  # GenerationFeed calls stream() from one thread per model

    def predictions(self, gen: Any, examples: Sequence[Example], dataset: str, dialect: str,
                    instruction_level: str) -> list[Prediction]:
        """One Prediction per example, in example order, for one cell: :meth:`stream` with the
        whole remainder in one call, its batches joined.

        Args:
            gen: a :class:`polysql_ray.generation.base.Generator` (``model``, ``fingerprint()``,
                ``generate()``; ``uses_prompts`` and ``sample_rows`` read when present).
            examples: the cell's dataset examples.
            dataset / dialect / instruction_level: the cell's coordinates.

        Raises: as :meth:`stream`.
        """
        out: list[Prediction | None] = [None] * len(examples)
        for idx, preds in self.stream(gen, examples, dataset, dialect, instruction_level):
            for i, p in zip(idx, preds):
                out[i] = p
        return out  # type: ignore[return-value]

    def stream(self, gen: Any, examples: Sequence[Example], dataset: str, dialect: str,
               instruction_level: str, batch_size: int = 0,
               only: Iterable[int] | None = None) -> Iterator[Batch]:
        """The cell's predictions as batches ``(example indices, predictions)``, each batch
        stored before it is yielded; every example of ``only`` (default: all) is in exactly one.

        Order: the examples whose prompt cannot be rendered and those found in the store come
        first (one batch, when any), then one batch per ``generator.generate`` call of at most
        ``batch_size`` examples (0: all the rest in one call), in example order. Replay and gold
        generators: one batch of every example (``only`` ignored; reading a file is cheap).

        Args:
            batch_size: examples per generator call (``pipeline.generation_batch_size``).
            only: example indices wanted (the cell's pending questions); None: every example.

        Raises:
            RuntimeError: the generator returned a wrong number of predictions, or a prompt
                sha256 different from the one the stage rendered (a template drift that would
                poison the store).
            ValueError: unknown dialect or malformed level (from prompt rendering).
            GeneratorUnavailable: from the generator (engines down); the batches yielded
                before it are stored.
        """
        if not getattr(gen, "uses_prompts", False):  # replay/gold: reading files, not generating
            batches: Iterator[Batch] = self._files(gen, examples, dialect, instruction_level)
        else:
            with self._lock:
                self.stats.cells += 1
            wanted = list(range(len(examples))) if only is None else sorted(set(only))
            batches = self._batches(gen, examples, wanted, dataset, dialect, instruction_level,
                                    max(0, int(batch_size or 0)))
        while True:  # the stage's seconds count its own work, not the consumer's
            t0 = time.perf_counter()
            try:
                batch = next(batches, None)
            finally:
                with self._lock:
                    self.stats.seconds += time.perf_counter() - t0
            if batch is None:
                return
            yield batch

    # -- internals --------------------------------------------------------------------

    def _count(self, model: str, n: int) -> None:
        with self._lock:
            self.stats.generated += n
            self.stats.per_model[model] = self.stats.per_model.get(model, 0) + n

    @staticmethod
    def _call(gen: Any, examples: list[Example], dialect: str, level: str) -> list[Prediction]:
        preds = list(gen.generate(examples, dialect, level))
        if len(preds) != len(examples):
            raise RuntimeError(f"generator {gen.model} returned {len(preds)} predictions for "
                               f"{len(examples)} examples")
        return preds

    def _files(self, gen: Any, examples: Sequence[Example], dialect: str, level: str) -> Iterator[Batch]:
        yield list(range(len(examples))), self._call(gen, list(examples), dialect, level)

    def _batches(self, gen: Any, examples: Sequence[Example], wanted: list[int], dataset: str,
                 dialect: str, level: str, batch_size: int) -> Iterator[Batch]:
        """:meth:`stream` of a prompt-based generator over the example indices ``wanted``."""
        from polysql_ray.generation.prompts import render_all

        def cut(todo: list[int]) -> list[list[int]]:
            size = batch_size or max(1, len(todo))
            return [todo[k:k + size] for k in range(0, len(todo), size)]

        if self.store is None:  # no cache: the generator renders, every batch is generated
            for b in cut(wanted):
                new = self._call(gen, [examples[i] for i in b], dialect, level)
                self._count(gen.model, len(new))
                yield b, new
            return
        sub = [examples[i] for i in wanted]
        rendered, bad = render_all(sub, dialect, level, getattr(gen, "sample_rows", 0))
        prompts = {i: p for i, p in zip(wanted, rendered)}
        errors = {wanted[j]: msg for j, msg in bad.items()}
        fp = gen.fingerprint()
        first: dict[int, Prediction] = {i: Prediction(question_id=examples[i].question_id, pred_sql="",
                                                      status=GenStatus.ERROR, error=msg)
                                        for i, msg in errors.items()}
        keys = {i: generation_key(fp, p.sha256) for i, p in prompts.items() if p is not None}
        with self._lock:
            self.stats.unrenderable += len(errors)
            found = self.store.lookup(gen.model, keys.values())
        todo = []
        for i, k in keys.items():
            if k in found:
                first[i] = replace(found[k], question_id=examples[i].question_id)
            else:
                todo.append(i)
        with self._lock:
            self.stats.reused += len(keys) - len(todo)
        if first:
            idx = sorted(first)
            yield idx, [first[i] for i in idx]
        for b in cut(todo):
            new = self._call(gen, [examples[i] for i in b], dialect, level)
            for i, p in zip(b, new):
                want = prompts[i].sha256
                if p.prompt_sha256 and p.prompt_sha256 != want:
                    raise RuntimeError(
                        f"generator {gen.model} saw prompt {p.prompt_sha256[:12]} for question "
                        f"{examples[i].question_id}, the pipeline rendered {want[:12]}")
                p.prompt_sha256 = want
            with self._lock:
                self.store.append(gen.model, fp, dataset, dialect, level, new)
            self._count(gen.model, len(new))
            yield b, new


def close_generators(generators: Mapping[str, Any]) -> list[str]:
    """Call ``close()`` on every generator that has one (vLLM actor pools, HTTP sessions).

    Call once at the end of a run (in a ``finally``), after the last cell was generated.
    A failing ``close`` is logged and does not stop the others. Returns the model names closed.
    """
    closed = []
    for name, gen in generators.items():
        close = getattr(gen, "close", None)
        if not callable(close):
            continue
        try:
            close()
            closed.append(name)
        except Exception as exc:  # noqa: BLE001 — shutdown must reach every generator
            log.warning("closing generator %s failed: %s", name, exc)
    return closed


class GenerationFeed:
    """Predictions cell by cell and batch by batch, model generators running ahead of the consumer.

    For every model whose generator renders prompts (``uses_prompts``: hf, openai, vllm) a
    daemon thread generates that model's cells in grid order, each through
    :meth:`GenerationStage.stream` (``batch_size`` examples per generator call), and queues
    every stored batch as soon as it exists: the driver plans, executes and scores a batch while
    the next one generates (the generator itself may be a Ray actor pool: the thread only waits
    on it). The thread starts a cell only while fewer than ``prefetch + 1`` of its cells are
    started and not yet taken to their last batch, so at most that many cells' predictions are
    held per model. Replay and gold generators read files: their cells are produced on demand
    by :meth:`take`, in the caller's thread, as one batch.

    Args:
        stage: the run's :class:`GenerationStage` (store, figures).
        generators: ``{model: generator}``.
        datasets: ``{dataset: examples}``.
        cells: objects with ``model``, ``dataset``, ``dialect``, ``instruction_level`` and
            ``key``, in the order :meth:`take` will ask.
        prefetch: cells started ahead of the one being taken, per model (>= 0).
        clock: optional :class:`polysql_ray.pipeline.scheduler.StageClock`; each model's
            generation is recorded as stage ``generate[<model>]``.
        batch_size: examples per generator call (``pipeline.generation_batch_size``; 0: a
            cell's whole remainder in one call).
        pending: ``{cell key: example indices | None}``: the questions of each cell to
            generate (None or absent: all); the driver's pending work, so a resumed cell
            generates only what is not scored yet.

    Errors: an exception raised by a generator is re-raised by :meth:`take` for the cell that
    raised it (in the driver's thread), after the batches stored before it.

    Fault point ``generated`` (:mod:`polysql_ray.faults`): reached by a model's thread after it
    queued a batch, before it generates the next one.
    """

    def __init__(self, stage: GenerationStage, generators: Mapping[str, Any], datasets: Mapping[str, Sequence[Example]],
                 cells: Sequence[Any], prefetch: int = 1, clock=None, batch_size: int = 0,
                 pending: Mapping[str, Any] | None = None) -> None:
        import queue
        import threading

        self.stage, self.generators, self.datasets, self.clock = stage, generators, datasets, clock
        self.batch_size, self.pending = max(0, int(batch_size or 0)), dict(pending or {})
        self._stop = threading.Event()
        self._queues: dict[str, queue.Queue] = {}
        self._slots: dict[str, threading.Semaphore] = {}
        self._threads: list[threading.Thread] = []
        by_model: dict[str, list] = {}
        for c in cells:
            if getattr(generators[c.model], "uses_prompts", False):
                by_model.setdefault(c.model, []).append(c)
        for model, mcells in by_model.items():
            # unbounded: the cell slots bound what it holds (prefetch + 1 cells per model)
            self._queues[model] = queue.Queue()
            self._slots[model] = threading.Semaphore(max(0, int(prefetch)) + 1)
            self._threads.append(threading.Thread(target=self._produce, args=(model, mcells), daemon=True,
                                                  name=f"generate-{model}"))
        for t in self._threads:
            t.start()

    def _produce(self, model: str, cells: list) -> None:
        q, slots = self._queues[model], self._slots[model]
        for c in cells:
            while not slots.acquire(timeout=0.5):  # a cell slot: the consumer took a cell to its end
                if self._stop.is_set():
                    return
            if self._stop.is_set():
                return
            if self.clock is not None:
                self.clock.start(f"generate[{model}]")
            failed, batches = None, 0
            try:
                for idx, preds in self.stage.stream(self.generators[model], self.datasets[c.dataset], c.dataset,
                                                    c.dialect, c.instruction_level, self.batch_size,
                                                    self.pending.get(c.key)):
                    if self.clock is not None:  # generation's end is its last batch's, not the hand-over's
                        self.clock.end(f"generate[{model}]")
                    q.put((c.key, idx, preds, None, False))
                    batches += 1
                    _POINTS.reach("generated")
                    if self._stop.is_set():
                        return
            except BaseException as exc:  # noqa: BLE001 — handed to the consumer, who re-raises
                failed = exc
            if self.clock is not None and (failed is not None or not batches):
                self.clock.end(f"generate[{model}]")
            q.put((c.key, [], [], failed, True))  # the cell's end (or its failure)
            if failed is not None:
                return

    def take(self, cell, timeout: float | None = None) -> tuple[list[int], list[Prediction], bool] | None:
        """The next batch of ``cell``: ``(example indices, predictions, last)``, ``last`` True
        for the cell's final (possibly empty) batch; None when a model generator has not
        produced one within ``timeout`` seconds (None: wait), so the caller can keep its
        executions moving and ask again. Every question of the cell's ``pending`` is in exactly
        one batch (replay/gold: every question, in one batch). Cells of a model generator must
        be taken to their last batch in the order given to the constructor.

        Raises: the generator's exception for the cell it raised in (after its stored batches).
        """
        import queue

        q = self._queues.get(cell.model)
        if q is None:
            ex = self.datasets[cell.dataset]
            idx, preds = next(self.stage.stream(self.generators[cell.model], ex, cell.dataset, cell.dialect,
                                                cell.instruction_level))
            return idx, preds, True
        try:
            key, idx, preds, exc, last = q.get(timeout=timeout) if timeout is None or timeout > 0 else q.get_nowait()
        except queue.Empty:
            return None
        if last:
            self._slots[cell.model].release()
        if exc is not None:
            raise exc
        if key != cell.key:
            raise RuntimeError(f"generation feed out of order: got cell {key[:8]}, asked {cell.key[:8]}")
        return idx, preds, last

    def close(self) -> None:
        """Stop the generation threads (a thread inside a generator call finishes that call)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5.0)
