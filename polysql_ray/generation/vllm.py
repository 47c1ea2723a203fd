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
``num_actors`` data-parallel replicas split the prompts into contiguous shards.

Determinism: ``SamplingParams(seed=...)`` seeds every request (vLLM per-request seed), and the
engine is built with the same seed. ``vllm`` is imported lazily, so this module imports without it.

``latency_s`` is the shard's wall time divided by its size (amortised, as with ``hf``).

References: vLLM docs "Offline Inference" (``LLM``, ``SamplingParams``, ``TokensPrompt``),
"Distributed Inference and Serving"; Ray docs "Accelerator support" (``num_gpus``).
"""
from __future__ import annotations

import os
import time
from typing import Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.generation.extraction import prediction_from_output
from polysql_ray.generation.hf import fold_system
from polysql_ray.generation.prompts import Sampling, generator_fingerprint, render_all


def vllm_available() -> bool:
    """True when ``import vllm`` works in this process."""
    try:
        import vllm  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable here"
        return False
    return True


class VLLMEngine:
    """One ``vllm.LLM`` engine plus its tokenizer (run in-process or as a Ray actor).

    Args:
        model_id / revision: hub id (or local dir) and revision (also used for the tokenizer).
        tensor_parallel_size: GPUs the model is sharded over.
        max_model_len: context length (prompt + completion tokens).
        dtype: ``auto``, ``bfloat16``, ``float16``, ``float32``.
        gpu_memory_utilization: fraction of each GPU vLLM may reserve.
        chat_template: Jinja template overriding the tokenizer's (None: the tokenizer's own).
        system_role: False folds the system message into the user turn.
        seed: engine seed.
        engine_args: extra ``vllm.LLM`` keyword arguments (``enforce_eager``,
            ``distributed_executor_backend`` ...).

    Raises:
        ImportError: vLLM is not installed (message says how to install it).
    """

    def __init__(self, model_id: str, revision: str = "", tensor_parallel_size: int = 1,
                 max_model_len: int = 8192, dtype: str = "auto", gpu_memory_utilization: float = 0.9,
                 chat_template: str | None = None, system_role: bool = True, seed: int = 0,
                 engine_args: Mapping | None = None):
        from polysql_ray.extras import require

        LLM = require("vllm", "the vllm generator (on a GPU machine)").LLM
        kw = dict(model=model_id, tensor_parallel_size=tensor_parallel_size, max_model_len=max_model_len,
                  dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed)
        if revision:
            kw.update(revision=revision, tokenizer_revision=revision)
        if tensor_parallel_size > 1:
            kw["distributed_executor_backend"] = "mp"
        kw.update(dict(engine_args or {}))
        self.llm = LLM(**kw)
        self.tok = self.llm.get_tokenizer()
        if chat_template:
            self.tok.chat_template = chat_template
        self.system_role = system_role
        self.max_model_len = max_model_len

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
            "wall_s": float}``; an error string marks a prompt too long for ``max_model_len``.
        """
        from vllm import SamplingParams

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
            vLLM's CPU backend).
        use_ray: False runs one engine in this process (tests, the benchmark baseline).
        gpu_memory_utilization / engine_args: passed to ``vllm.LLM``.
        sample_rows: sample rows per table in prompts.

    Engines start on the first :meth:`generate`; :meth:`close` stops them.
    """

    kind = "vllm"
    #: renders prompts per instruction level (see polysql_ray.pipeline.generate)
    uses_prompts = True

    def __init__(self, model: str, model_id: str, revision: str = "", sampling: Sampling = Sampling(),
                 max_model_len: int = 8192, tensor_parallel_size: int = 1, num_actors: int = 1,
                 gpus_per_actor: float | None = None, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.9, chat_template: str | None = None,
                 system_role: bool = True, use_ray: bool = True, engine_args: Mapping | None = None,
                 sample_rows: int = 0):
        self.model = model
        self.model_id = model_id
        self.revision = revision
        self.sampling = sampling
        self.max_model_len = int(max_model_len)
        self.tensor_parallel_size = int(tensor_parallel_size)
        self.num_actors = max(1, int(num_actors))
        self.gpus_per_actor = self.tensor_parallel_size if gpus_per_actor is None else gpus_per_actor
        self.dtype = dtype
        self.gpu_memory_utilization = gpu_memory_utilization
        self.chat_template = chat_template
        self.system_role = system_role
        self.use_ray = use_ray
        self.engine_args = dict(engine_args or {})
        self.sample_rows = sample_rows
        self._engines: list = []

    @classmethod
    def from_config(cls, cfg: Mapping) -> "VLLMGenerator":
        """Build from a ``conf/model/*.yaml`` mapping (``generator: vllm``)."""
        return cls(model=cfg["name"], model_id=os.path.expandvars(str(cfg["model_id"])),
                   revision=cfg.get("revision") or "",
                   sampling=Sampling.from_mapping(cfg.get("sampling")),
                   max_model_len=cfg.get("max_model_len", 8192),
                   tensor_parallel_size=cfg.get("tensor_parallel_size", 1),
                   num_actors=cfg.get("num_actors", 1), gpus_per_actor=cfg.get("gpus_per_actor"),
                   dtype=cfg.get("dtype", "auto"),
                   gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.9),
                   chat_template=cfg.get("chat_template"), system_role=cfg.get("system_role", True),
                   use_ray=cfg.get("use_ray", True), engine_args=cfg.get("engine_args"),
                   sample_rows=cfg.get("sample_rows", 0))

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
                    seed=self.sampling.seed, engine_args=self.engine_args)

    def start(self) -> None:
        """Start the engines (idempotent).

        Raises:
            ImportError: vLLM missing (in-process), or Ray's actor creation error.
        """
        if self._engines:
            return
        if not self.use_ray:
            self._engines = [VLLMEngine(**self._engine_kwargs())]
            return
        import ray

        if not ray.is_initialized():
            ray.init()
        actor_cls = ray.remote(num_gpus=self.gpus_per_actor)(VLLMEngine)
        self._engines = [actor_cls.remote(**self._engine_kwargs()) for _ in range(self.num_actors)]

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

    def chat(self, message_lists: Sequence[list[dict]]) -> list[Prediction]:
        """Free-form chat completions (the judge job): one Prediction per message list, same
        order, the reply text in ``raw_output``; each replica gets one contiguous shard."""
        if not message_lists:
            return []
        self.start()
        s = dict(self.sampling.__dict__)
        shards = self._shards(len(message_lists))
        msgs = [[list(message_lists[k]) for k in shard] for shard in shards]
        if self.use_ray:
            import ray

            replies = ray.get([e.generate.remote(m, s) for e, m in zip(self._engines, msgs)])
        else:
            replies = [self._engines[0].generate(msgs[0], s)]
        out: list[Prediction] = [None] * len(message_lists)  # type: ignore[list-item]
        for shard, reply in zip(shards, replies):
            per = reply["wall_s"] / max(1, reply["generated"])
            for k, res in zip(shard, reply["results"]):
                out[k] = (Prediction(question_id=str(k), pred_sql="", status=GenStatus.ERROR, error=res)
                          if isinstance(res, str) else prediction_from_output(str(k), *res, per))
        return out

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example, same order; each replica gets one contiguous shard.

        Raises:
            ImportError: vLLM is not installed (a configuration error, not per example).
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
        self.start()
        s = dict(self.sampling.__dict__)
        shards = self._shards(len(todo))
        msgs = [[prompts[todo[k]].messages for k in shard] for shard in shards]
        if self.use_ray:
            import ray

            replies = ray.get([e.generate.remote(m, s) for e, m in zip(self._engines, msgs)])
        else:
            replies = [self._engines[0].generate(msgs[0], s)]
        for shard, reply in zip(shards, replies):
            per = reply["wall_s"] / max(1, reply["generated"])
            for k, res in zip(shard, reply["results"]):
                i = todo[k]
                qid = examples[i].question_id
                if isinstance(res, str):
                    out[i] = Prediction(question_id=qid, pred_sql="", status=GenStatus.ERROR, error=res)
                else:
                    text, finish, pt, ct = res
                    out[i] = prediction_from_output(qid, text, finish, pt, ct, per)
                out[i].prompt_sha256 = prompts[i].sha256
        return out  # type: ignore[return-value]
