"""``openai`` generator: any OpenAI-compatible ``/v1/chat/completions`` endpoint.

Works with ``vllm serve``, SGLang, TGI's OpenAI route, llama.cpp server, or the OpenAI API.
Transport is the official ``openai`` SDK (extra ``openai``: ``pip install 'polysql_ray[openai]'``):
it builds the request, sends it over ``httpx`` and parses the typed ``ChatCompletion``; its
exceptions say what went wrong (``APIStatusError`` with the status and headers,
``APIConnectionError`` / ``APITimeoutError`` for a server that cannot be reached).

Kept here, and why: the retry loop. The SDK's own retries are switched off (``max_retries=0``)
because their backoff is fixed in the SDK (0.5 s doubling to 8 s, not configurable per client)
while ours is data in the model config (:class:`RetryPolicy`: ``backoff_s``, ``backoff_max_s``,
``jitter``, the retryable statuses in :data:`RETRYABLE_HTTP`), and because the outcome of the
last attempt decides what is stored: a server that stays unreachable or overloaded is a
``GenStatus.ERROR`` prediction naming the endpoint (infrastructure; the pipeline never scores
it as the model's answer), never a wrong SQL.

Behaviour (all data, see :class:`RetryPolicy`):

* bounded concurrency: at most ``concurrency`` requests in flight (a thread pool);
* retries with exponential backoff (``backoff_s * 2**attempt``, capped, ``Retry-After``
  honoured) on HTTP 408/409/425/429/5xx, connection errors, timeouts and malformed JSON; other
  4xx fail at once;
* per-request timeout; a dead server gives ``GenStatus.ERROR`` with a clear message after
  the retries, never an exception out of :meth:`OpenAIGenerator.generate`;
* the API key is read from the environment variable *named* in the config when a batch starts
  and handed to a client that lives for that batch only; it is never stored on the generator,
  logged, or put into an error message (messages also go through
  :func:`polysql_ray.redaction.redact_text`, so URL credentials in ``base_url`` are masked).
  Without a key no ``Authorization`` header is sent (the SDK's ``OPENAI_API_KEY`` fallback is
  not used: the config names the variable).

Reference: OpenAI API "Create chat completion" (``messages``, ``temperature``, ``top_p``,
``max_tokens``, ``seed``; response ``choices[0].message.content``, ``finish_reason``,
``usage.prompt_tokens``/``completion_tokens``); openai-python README ("Retries", "Timeouts",
"Handling errors"); vLLM "OpenAI-Compatible Server" docs.
"""
from __future__ import annotations

import json
import logging
import os
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.generation.extraction import prediction_from_output
from polysql_ray.generation.prompts import Sampling, generator_fingerprint, render_all
from polysql_ray.redaction import redact_text

log = logging.getLogger(__name__)

#: HTTP statuses worth retrying (rate limit, server overload / restarts).
RETRYABLE_HTTP = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Retry and timeout settings for one request.

    Attributes:
        max_retries: retries after the first attempt (total attempts = max_retries + 1).
        backoff_s: first backoff in seconds; doubles per retry.
        backoff_max_s: cap for one backoff (and for a server's ``Retry-After``).
        jitter: fraction of random extra wait (0 disables; avoids thundering herds).
        timeout_s: socket timeout for one attempt, in seconds.
    """

    max_retries: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    jitter: float = 0.1
    timeout_s: float = 120.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        d = min(self.backoff_max_s, self.backoff_s * (2 ** attempt))
        if retry_after is not None:
            d = min(self.backoff_max_s, max(d, retry_after))
        return d * (1.0 + self.jitter * random.random())


class _Failure(Exception):
    def __init__(self, message: str, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


class OpenAIGenerator:
    """Generator over an OpenAI-compatible chat completions endpoint.

    Args:
        model: name in the store/leaderboard.
        model_id: the ``model`` field sent to the server (``Qwen/Qwen2.5-Coder-7B-Instruct``).
        base_url: endpoint root including ``/v1`` (``http://127.0.0.1:8000/v1``).
        api_key_env: name of the environment variable holding the key (None/"": no key).
        revision: model revision served (for the fingerprint only; the server decides).
        sampling: decoding settings.
        concurrency: most requests in flight.
        retry: :class:`RetryPolicy`.
        sample_rows: sample rows per table in prompts.
        extra_body: extra JSON fields merged into each request (e.g. vLLM's
            ``chat_template_kwargs``); part of the fingerprint.
    """

    kind = "openai"
    #: renders prompts per instruction level: the pipeline builds one cell per level and caches
    #: generations by prompt sha256 (polysql_ray.pipeline.generate)
    uses_prompts = True

    def __init__(self, model: str, model_id: str, base_url: str, api_key_env: str | None = "OPENAI_API_KEY",
                 revision: str = "", sampling: Sampling = Sampling(), concurrency: int = 8,
                 retry: RetryPolicy = RetryPolicy(), sample_rows: int = 0,
                 extra_body: Mapping | None = None):
        self.model = model
        self.model_id = model_id
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env or None
        self.revision = revision
        self.sampling = sampling
        self.concurrency = max(1, int(concurrency))
        self.retry = retry
        self.sample_rows = sample_rows
        self.extra_body = dict(extra_body or {})

    @classmethod
    def from_config(cls, cfg: Mapping) -> "OpenAIGenerator":
        """Build from a ``conf/model/*.yaml`` mapping (``generator: openai``)."""
        return cls(model=cfg["name"], model_id=cfg["model_id"], base_url=cfg["base_url"],
                   api_key_env=cfg.get("api_key_env"), revision=cfg.get("revision") or "",
                   sampling=Sampling.from_mapping(cfg.get("sampling")),
                   concurrency=cfg.get("concurrency", 8),
                   retry=RetryPolicy(**dict(cfg.get("retry") or {})),
                   sample_rows=cfg.get("sample_rows", 0), extra_body=cfg.get("extra_body"))

    def __repr__(self) -> str:
        return (f"OpenAIGenerator(model={self.model!r}, model_id={self.model_id!r}, "
                f"base_url={self.base_url!r}, api_key_env={self.api_key_env!r})")

    def fingerprint(self) -> str:
        """Model id + revision + sampling + seed + template version (+ extra_body)."""
        return generator_fingerprint(self.kind, self.model_id, self.revision, self.sampling,
                                     extra_body=self.extra_body)

    # -- HTTP (the openai SDK) --------------------------------------------------------

    def _client(self) -> tuple[Any, bool]:
        """``(client, keyed)``: an ``openai.OpenAI`` client for one batch (the key read now from
        ``api_key_env``, SDK retries off) and whether a key was found.

        Raises:
            MissingExtra: the ``openai`` extra is not installed (one line naming it).
        """
        from polysql_ray.extras import require

        sdk = require("openai", "the openai generator")
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        # a placeholder keeps the SDK from reading OPENAI_API_KEY; _attempt() then omits the header
        return sdk.OpenAI(base_url=self.base_url, api_key=key or "no-key", max_retries=0,
                          timeout=self.retry.timeout_s), bool(key)

    def _request(self, messages: list[dict]) -> dict:
        """Keyword arguments of ``chat.completions.create`` (the request body)."""
        s = self.sampling
        return {"model": self.model_id, "messages": messages, "temperature": s.temperature,
                "top_p": s.top_p, "max_tokens": s.max_tokens, "seed": s.seed, "n": 1,
                "extra_body": dict(self.extra_body) or None}

    def _attempt(self, client: Any, keyed: bool, request: dict) -> Any:
        import openai

        headers = None if keyed else {"Authorization": openai.Omit()}
        try:
            return client.chat.completions.create(**request, extra_headers=headers)
        except openai.APIStatusError as e:
            try:
                detail = e.response.text[:300]
            except Exception:  # noqa: BLE001 - body unreadable: status alone is enough
                detail = ""
            ra = e.response.headers.get("Retry-After")
            try:
                retry_after = float(ra) if ra is not None else None
            except ValueError:
                retry_after = None
            raise _Failure(f"HTTP {e.status_code} from {self.base_url}: {detail}".rstrip(": "),
                           e.status_code in RETRYABLE_HTTP, retry_after) from None
        except openai.APIConnectionError as e:  # APITimeoutError included
            reason = e.__cause__ or e
            raise _Failure(f"cannot reach {self.base_url}: {type(reason).__name__}: {reason}", True) from None
        except (json.JSONDecodeError, UnicodeDecodeError, openai.APIResponseValidationError) as e:
            raise _Failure(f"malformed JSON from {self.base_url}: {e}", True) from None

    def _one(self, client: Any, keyed: bool, question_id: str, messages: list[dict]) -> Prediction:
        request = self._request(messages)
        t0 = time.perf_counter()
        last = "no attempt made"
        for attempt in range(self.retry.max_retries + 1):
            try:
                completion = self._attempt(client, keyed, request)
                choice = completion.choices[0]
                text = (choice.message.content if choice.message is not None else None) or ""
                usage = completion.usage
                return prediction_from_output(
                    question_id, text, choice.finish_reason,
                    (usage.prompt_tokens if usage else 0) or 0,
                    (usage.completion_tokens if usage else 0) or 0,
                    time.perf_counter() - t0)
            except _Failure as f:
                last = str(f)
                if not f.retryable or attempt == self.retry.max_retries:
                    break
                wait = self.retry.delay(attempt, f.retry_after)
                log.warning("openai request %s failed (%s); retry %d/%d in %.2fs", question_id,
                            redact_text(last), attempt + 1, self.retry.max_retries, wait)
                time.sleep(wait)
            except (AttributeError, KeyError, IndexError, TypeError) as e:
                last = f"unexpected response shape from {self.base_url}: {type(e).__name__}: {e}"
                break
        return Prediction(question_id=question_id, pred_sql="", status=GenStatus.ERROR,
                          error=redact_text(f"{last} (after {attempt + 1} attempt(s))"),
                          latency_s=time.perf_counter() - t0)

    def chat(self, message_lists: Sequence[list[dict]]) -> list[Prediction]:
        """Free-form chat completions (the judge job): one Prediction per message list, same
        order, the reply text in ``raw_output``; a dead server after retries gives
        ``GenStatus.ERROR`` for that item. At most ``concurrency`` requests in flight."""
        if not message_lists:
            return []
        client, keyed = self._client()
        with client, ThreadPoolExecutor(max_workers=min(self.concurrency, len(message_lists)),
                                        thread_name_prefix="openai-chat") as pool:
            futures = [pool.submit(self._one, client, keyed, str(i), list(m))
                       for i, m in enumerate(message_lists)]
            return [f.result() for f in futures]

    # -- Generator protocol -----------------------------------------------------------

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example, same order; at most ``concurrency`` requests in flight.

        Per-example failures (dead server after retries, HTTP 4xx, missing database) are
        ``GenStatus.ERROR`` predictions; only a bad dialect/level raises ``ValueError``.
        """
        prompts, errors = render_all(examples, dialect, instruction_level, self.sample_rows)
        out: list[Prediction | None] = [None] * len(examples)
        for i, msg in errors.items():
            out[i] = Prediction(question_id=examples[i].question_id, pred_sql="",
                                status=GenStatus.ERROR, error=msg)
        todo = [i for i, p in enumerate(prompts) if p is not None]
        if not todo:
            return out  # type: ignore[return-value]
        client, keyed = self._client()
        with client, ThreadPoolExecutor(max_workers=min(self.concurrency, len(todo)),
                                        thread_name_prefix="openai-gen") as pool:
            futures = {i: pool.submit(self._one, client, keyed, examples[i].question_id, prompts[i].messages)
                       for i in todo}
            for i, fut in futures.items():
                out[i] = fut.result()
                out[i].prompt_sha256 = prompts[i].sha256
        return out  # type: ignore[return-value]
