"""The generator protocol: produce predicted SQL for a batch of examples.

Generators are composed per model config. ``replay`` reads a prediction file, ``gold`` returns
the gold SQL itself (a whole-pipeline sanity check: it must score 100% on its own engine);
``vllm``/``openai``/``hf`` (issue 4) generate with a model.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, Sequence

from polysql_ray.datasets.example import Example


class GenStatus(str, enum.Enum):
    """Outcome of generating one prediction (stored verbatim as ``gen_status``)."""

    OK = "ok"
    NO_SQL = "no_sql"          # output contained no SQL statement
    TRUNCATED = "truncated"    # output hit the token limit mid-statement
    MISSING = "missing"        # replay file has no prediction for this question
    ERROR = "error"            # generator failed (dead server after retries ...)


@dataclass
class Prediction:
    """One predicted SQL for one example on one dialect.

    Attributes:
        question_id: the example's question_id.
        pred_sql: predicted SQL text ("" when status is not OK).
        status: generation status.
        raw_output: model text before extraction (same as pred_sql for replay).
        error: message for non-OK statuses.
        prompt_tokens / completion_tokens: token counts (0 for replay/gold).
        latency_s: generation wall seconds for this example (0 for replay/gold).
        prompt_sha256: sha256 of the rendered prompt the model saw
            (:attr:`polysql_ray.generation.prompts.RenderedPrompt.sha256`); "" for replay/gold
            and for examples whose prompt could not be rendered. Part of the generations-store
            key (:mod:`polysql_ray.store.generations`).
        finish_reason: why the model stopped, as its engine says (``stop``: end of sequence or
            a stop string; ``length``: ``max_tokens`` reached); "" when no model ran.
    """

    question_id: str
    pred_sql: str
    status: GenStatus = GenStatus.OK
    raw_output: str = ""
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    prompt_sha256: str = ""
    finish_reason: str = ""


class GeneratorUnavailable(RuntimeError):
    """A model's engines could not start, or died while generating: infrastructure, not an
    answer of the model. Nothing of the unfinished batches is stored (a rerun generates them;
    the batches handed over before are stored and scored); the message is one line naming the
    model, the failed step and the cause."""


class Generator(Protocol):
    """Produces predictions for one (dataset, dialect, instruction level) cell.

    Attributes:
        model: the model name as it appears in the store and leaderboard.
    """

    model: str

    def fingerprint(self) -> str:
        """A stable string that changes whenever the generator's output could change
        (prediction-file content hash, model revision + sampling parameters ...). It is part
        of every results-store key, so a changed prediction file is rescored, an unchanged
        one is not."""
        ...

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example, same order."""
        ...
