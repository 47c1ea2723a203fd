"""``hf`` generator: Hugging Face ``transformers`` ``generate`` on CPU (or one GPU), small models.

Meant for small models, CI and debugging; use ``vllm`` for throughput. The chat template of the
tokenizer is applied (``apply_chat_template(..., add_generation_prompt=True)``) unless a
template is given in the config; models whose template rejects a ``system`` role can fold it
into the user turn (``system_role: false``).

Batches are left-padded; greedy decoding when ``temperature == 0`` (``do_sample=False``),
otherwise sampling seeded with ``torch.manual_seed(seed)`` before each batch. A completion that
ends without EOS after ``max_tokens`` tokens gets ``finish_reason="length"`` (so extraction marks
it truncated). ``latency_s`` is the batch's wall time divided by its size (amortised);
``completion_tokens`` counts generated tokens up to and including EOS (padding excluded).

Reference: transformers docs "Generation" (``GenerationMixin.generate``) and "Chat templates".
"""
from __future__ import annotations

import os
import time
from typing import Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.generation.extraction import prediction_from_output
from polysql_ray.generation.prompts import Sampling, generator_fingerprint, render_all


def fold_system(messages: list[dict]) -> list[dict]:
    """Merge a leading ``system`` message into the first ``user`` message.

    For chat templates without a system role (the content is kept verbatim, joined by a
    blank line). Returns a new list; the input is not modified.
    """
    if not messages or messages[0]["role"] != "system":
        return list(messages)
    sys_msg, rest = messages[0], [dict(m) for m in messages[1:]]
    for m in rest:
        if m["role"] == "user":
            m["content"] = sys_msg["content"] + "\n\n" + m["content"]
            return rest
    return [{"role": "user", "content": sys_msg["content"]}] + rest


class HFGenerator:
    """Generator running ``transformers`` ``generate`` in this process.

    Args:
        model: name in the store/leaderboard.
        model_id: hub id or local directory (with ``HF_HUB_OFFLINE=1`` only local files load).
        revision: hub revision (commit sha recommended); "" for a local directory.
        sampling: decoding settings.
        batch_size: prompts per ``generate`` call.
        device: torch device (``cpu``, ``cuda:0``).
        dtype: torch dtype name (``float32``, ``bfloat16``).
        chat_template: a Jinja template overriding the tokenizer's (None: the tokenizer's own).
        system_role: False folds the system message into the user turn.
        max_model_len: prompt + completion token limit; a longer prompt is an ERROR prediction
            (None: the model config's ``max_position_embeddings``).
        sample_rows: sample rows per table in prompts.
    """

    kind = "hf"
    #: renders prompts per instruction level (see polysql_ray.pipeline.generate)
    uses_prompts = True

    def __init__(self, model: str, model_id: str, revision: str = "", sampling: Sampling = Sampling(),
                 batch_size: int = 4, device: str = "cpu", dtype: str = "float32",
                 chat_template: str | None = None, system_role: bool = True,
                 max_model_len: int | None = None, sample_rows: int = 0):
        self.model = model
        self.model_id = model_id
        self.revision = revision
        self.sampling = sampling
        self.batch_size = max(1, int(batch_size))
        self.device = device
        self.dtype = dtype
        self.chat_template = chat_template
        self.system_role = system_role
        self.max_model_len = max_model_len
        self.sample_rows = sample_rows
        self._tok = None
        self._lm = None

    @classmethod
    def from_config(cls, cfg: Mapping) -> "HFGenerator":
        """Build from a ``conf/model/*.yaml`` mapping (``generator: hf``)."""
        return cls(model=cfg["name"], model_id=os.path.expandvars(str(cfg["model_id"])),
                   revision=cfg.get("revision") or "",
                   sampling=Sampling.from_mapping(cfg.get("sampling")),
                   batch_size=cfg.get("batch_size", 4), device=cfg.get("device", "cpu"),
                   dtype=cfg.get("dtype", "float32"), chat_template=cfg.get("chat_template"),
                   system_role=cfg.get("system_role", True), max_model_len=cfg.get("max_model_len"),
                   sample_rows=cfg.get("sample_rows", 0))

    def fingerprint(self) -> str:
        """Model id + revision + sampling + seed + template version + dtype/chat settings."""
        return generator_fingerprint(self.kind, self.model_id, self.revision, self.sampling,
                                     dtype=self.dtype, chat_template=self.chat_template,
                                     system_role=self.system_role)

    def _load(self):
        if self._lm is not None:
            return
        from polysql_ray.extras import require

        torch = require("torch", "the hf generator")
        transformers = require("transformers", "the hf generator")
        AutoModelForCausalLM, AutoTokenizer = transformers.AutoModelForCausalLM, transformers.AutoTokenizer

        kw = {"revision": self.revision} if self.revision else {}
        tok = AutoTokenizer.from_pretrained(self.model_id, **kw)
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        if self.chat_template:
            tok.chat_template = self.chat_template
        lm = AutoModelForCausalLM.from_pretrained(self.model_id, dtype=getattr(torch, self.dtype), **kw)
        lm.to(self.device).eval()
        if self.max_model_len is None:
            self.max_model_len = int(getattr(lm.config, "max_position_embeddings", 4096))
        self._tok, self._lm = tok, lm

    def _chat_text(self, messages: list[dict]) -> str:
        msgs = messages if self.system_role else fold_system(messages)
        return self._tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)

    def _run_batch(self, texts: list[str]) -> list[tuple[str, str, int, int]]:
        """Generate for one batch: ``[(text, finish_reason, prompt_tokens, completion_tokens)]``."""
        import torch

        tok, lm, s = self._tok, self._lm, self.sampling
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        kw = dict(max_new_tokens=s.max_tokens, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        if s.temperature > 0:
            torch.manual_seed(s.seed)
            kw.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
        else:
            kw.update(do_sample=False)
        with torch.inference_mode():
            out = lm.generate(**enc, **kw)
        width = enc["input_ids"].shape[1]
        eos = {tok.eos_token_id} if isinstance(tok.eos_token_id, int) else set(tok.eos_token_id or [])
        results = []
        for row in range(out.shape[0]):
            gen = out[row, width:].tolist()
            n, finish = len(gen), "length"
            for k, t in enumerate(gen):
                if t in eos:
                    n, finish = k + 1, "stop"
                    break
            prompt_tokens = int(enc["attention_mask"][row].sum())
            text = tok.decode(gen[:n], skip_special_tokens=True)
            results.append((text, finish if n >= 1 else "stop", prompt_tokens, n))
        return results

    def chat(self, message_lists: Sequence[list[dict]]) -> list[Prediction]:
        """Free-form chat completions (the judge job): one Prediction per message list, same
        order, the reply text in ``raw_output`` (batches of ``batch_size``)."""
        if not message_lists:
            return []
        self._load()
        texts = [self._chat_text(list(m)) for m in message_lists]
        out: list[Prediction] = []
        for start in range(0, len(texts), self.batch_size):
            t0 = time.perf_counter()
            res = self._run_batch(texts[start:start + self.batch_size])
            per = (time.perf_counter() - t0) / len(res)
            out += [prediction_from_output(str(start + k), text, finish, pt, ct, per)
                    for k, (text, finish, pt, ct) in enumerate(res)]
        return out

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example, same order (batches of ``batch_size``).

        Too-long prompts and unbuildable prompts are ``GenStatus.ERROR`` predictions.
        """
        prompts, errors = render_all(examples, dialect, instruction_level, self.sample_rows)
        out: list[Prediction | None] = [None] * len(examples)
        todo: list[tuple[int, str]] = []
        if len(errors) < len(examples):
            self._load()
        for i, p in enumerate(prompts):
            if p is None:
                continue
            text = self._chat_text(p.messages)
            n_prompt = len(self._tok(text, add_special_tokens=False)["input_ids"])
            if n_prompt + self.sampling.max_tokens > self.max_model_len:
                errors[i] = (f"prompt of {n_prompt} tokens + max_tokens {self.sampling.max_tokens} "
                             f"exceeds max_model_len {self.max_model_len}")
                continue
            todo.append((i, text))
        for i, msg in errors.items():
            out[i] = Prediction(question_id=examples[i].question_id, pred_sql="",
                                status=GenStatus.ERROR, error=msg)
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start:start + self.batch_size]
            t0 = time.perf_counter()
            res = self._run_batch([t for _, t in batch])
            per = (time.perf_counter() - t0) / len(batch)
            for (i, _), (text, finish, pt, ct) in zip(batch, res):
                out[i] = prediction_from_output(examples[i].question_id, text, finish, pt, ct, per)
                out[i].prompt_sha256 = prompts[i].sha256
        return out  # type: ignore[return-value]
