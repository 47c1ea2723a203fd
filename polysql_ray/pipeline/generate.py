"""The generation stage: predictions for one grid cell, reusing stored generations.

For a generator that renders prompts (``uses_prompts = True``: ``hf``, ``openai``, ``vllm``)
the stage, per cell (model x dataset x dialect x instruction level):

1. renders every example's prompt once (:func:`polysql_ray.generation.prompts.render_all`,
   the same function the generators call, so the sha256 is the prompt the model sees);
2. looks the generations up in :class:`polysql_ray.store.generations.GenerationsStore` by
   ``generation_key(generator.fingerprint(), prompt sha256)``;
3. calls ``generator.generate`` only for the examples not found (one call per cell, so vLLM
   still batches the whole remainder);
4. appends the new generations to the store and returns one Prediction per example, in
   example order.

A rerun therefore generates nothing, and a crash mid-sweep loses at most the cell being
generated. Replay and gold generators (no ``uses_prompts``) are called directly and never
touch the store. One generator instance per model serves every cell of a sweep (the driver's
``grid.generators``), so a vLLM actor pool is started once; :func:`close_generators` stops it.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.store.generations import GenerationsStore, generation_key

log = logging.getLogger("polysql_ray")


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
        self._lock = threading.Lock()  # GenerationFeed calls predictions() from one thread per model

    def predictions(self, gen: Any, examples: Sequence[Example], dataset: str, dialect: str,
                    instruction_level: str) -> list[Prediction]:
        """One Prediction per example, in example order, for one cell.

        Args:
            gen: a :class:`polysql_ray.generation.base.Generator` (``model``, ``fingerprint()``,
                ``generate()``; ``uses_prompts`` and ``sample_rows`` read when present).
            examples: the cell's dataset examples.
            dataset / dialect / instruction_level: the cell's coordinates.

        Raises:
            RuntimeError: the generator returned a wrong number of predictions, or a prompt
                sha256 different from the one the stage rendered (a template drift that would
                poison the store).
            ValueError: unknown dialect or malformed level (from prompt rendering).
        """
        t0 = time.perf_counter()
        try:
            if not getattr(gen, "uses_prompts", False):  # replay/gold: reading files, not generating
                return self._call(gen, list(examples), dialect, instruction_level)
            with self._lock:
                self.stats.cells += 1
            if self.store is None:
                preds = self._call(gen, list(examples), dialect, instruction_level)
                self._count(gen.model, len(preds))
                return preds
            return self._cached(gen, examples, dataset, dialect, instruction_level)
        finally:
            with self._lock:
                self.stats.seconds += time.perf_counter() - t0

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

    def _cached(self, gen: Any, examples: Sequence[Example], dataset: str, dialect: str,
                level: str) -> list[Prediction]:
        from polysql_ray.generation.prompts import render_all

        prompts, errors = render_all(examples, dialect, level, getattr(gen, "sample_rows", 0))
        fp = gen.fingerprint()
        out: list[Prediction | None] = [None] * len(examples)
        for i, msg in errors.items():
            out[i] = Prediction(question_id=examples[i].question_id, pred_sql="",
                                status=GenStatus.ERROR, error=msg)
        keys = {i: generation_key(fp, p.sha256) for i, p in enumerate(prompts) if p is not None}
        with self._lock:
            self.stats.unrenderable += len(errors)
            found = self.store.lookup(gen.model, keys.values())
        todo = []
        for i, k in keys.items():
            if k in found:
                out[i] = replace(found[k], question_id=examples[i].question_id)
            else:
                todo.append(i)
        with self._lock:
            self.stats.reused += len(keys) - len(todo)
        if todo:
            new = self._call(gen, [examples[i] for i in todo], dialect, level)
            for i, p in zip(todo, new):
                want = prompts[i].sha256
                if p.prompt_sha256 and p.prompt_sha256 != want:
                    raise RuntimeError(
                        f"generator {gen.model} saw prompt {p.prompt_sha256[:12]} for question "
                        f"{examples[i].question_id}, the pipeline rendered {want[:12]}")
                p.prompt_sha256 = want
                out[i] = p
            with self._lock:
                self.store.append(gen.model, fp, dataset, dialect, level, new)
            self._count(gen.model, len(new))
        return out  # type: ignore[return-value]


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
    """Predictions cell by cell, model generators running ahead of the consumer.

    For every model whose generator renders prompts (``uses_prompts``: hf, openai, vllm) a
    daemon thread generates that model's cells in grid order into a bounded queue of
    ``prefetch`` cells, so the next cells generate while the driver executes and scores the
    current one (the generator itself may be a Ray actor pool: the thread only waits on it).
    Replay and gold generators read files: their cells are produced on demand by
    :meth:`predictions`, in the caller's thread. At most ``prefetch + 1`` cells per model are
    held (generated, not yet taken, plus the one being generated).

    Args:
        stage: the run's :class:`GenerationStage` (store, figures).
        generators: ``{model: generator}``.
        datasets: ``{dataset: examples}``.
        cells: ``[(cell, ...)]`` objects with ``model``, ``dataset``, ``dialect``,
            ``instruction_level`` and ``key``, in the order :meth:`predictions` will ask.
        prefetch: cells queued ahead per model (>= 1).
        clock: optional :class:`polysql_ray.pipeline.scheduler.StageClock`; each model's
            generation is recorded as stage ``generate[<model>]``.

    Errors: an exception raised by a generator is re-raised by :meth:`predictions` for the
    cell that raised it (in the driver's thread).
    """

    def __init__(self, stage: GenerationStage, generators: Mapping[str, Any], datasets: Mapping[str, Sequence[Example]],
                 cells: Sequence[Any], prefetch: int = 1, clock=None) -> None:
        import queue
        import threading

        self.stage, self.generators, self.datasets, self.clock = stage, generators, datasets, clock
        self._stop = threading.Event()
        self._queues: dict[str, queue.Queue] = {}
        self._threads: list[threading.Thread] = []
        by_model: dict[str, list] = {}
        for c in cells:
            if getattr(generators[c.model], "uses_prompts", False):
                by_model.setdefault(c.model, []).append(c)
        for model, mcells in by_model.items():
            q: queue.Queue = queue.Queue(maxsize=max(1, int(prefetch)))
            self._queues[model] = q
            t = threading.Thread(target=self._produce, args=(model, mcells, q), daemon=True,
                                 name=f"generate-{model}")
            self._threads.append(t)
        for t in self._threads:
            t.start()

    def _produce(self, model: str, cells: list, q) -> None:
        import queue

        for c in cells:
            if self._stop.is_set():
                return
            if self.clock is not None:
                self.clock.start(f"generate[{model}]")
            try:
                item = (c.key, self._generate(c), None)
            except BaseException as exc:  # noqa: BLE001 — handed to the consumer, who re-raises
                item = (c.key, None, exc)
            if self.clock is not None:
                self.clock.end(f"generate[{model}]")
            while not self._stop.is_set():
                try:
                    q.put(item, timeout=0.5)
                    break
                except queue.Full:
                    continue
            if item[2] is not None:
                return

    def _generate(self, c) -> list[Prediction]:
        return self.stage.predictions(self.generators[c.model], self.datasets[c.dataset], c.dataset,
                                      c.dialect, c.instruction_level)

    def predictions(self, cell, timeout: float | None = None) -> list[Prediction] | None:
        """One Prediction per example of ``cell``'s dataset, in example order; None when a
        model generator has not finished the cell within ``timeout`` seconds (None: wait), so
        the caller can keep its executions moving and ask again. Cells of a model generator
        must be asked in the order given to the constructor."""
        import queue

        q = self._queues.get(cell.model)
        if q is None:
            return self._generate(cell)
        try:
            key, preds, exc = q.get(timeout=timeout) if timeout is None or timeout > 0 else q.get_nowait()
        except queue.Empty:
            return None
        if exc is not None:
            raise exc
        if key != cell.key:
            raise RuntimeError(f"generation feed out of order: got cell {key[:8]}, asked {cell.key[:8]}")
        return preds

    def close(self) -> None:
        """Stop the generation threads (a thread inside a generator call finishes that call)."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5.0)
