"""Generator name -> factory. Adding a generator is one entry in :data:`GENERATORS`.

A model config is a mapping like ``{name: dail_sql_gpt4, generator: replay, predictions:
PATH}``; the named class's ``from_config(cfg)`` builds it. Classes are imported lazily, so a
heavy optional dependency (vllm, openai) is only imported when its generator is used.
"""
from __future__ import annotations

import importlib
from typing import Any, Mapping

from polysql_ray.generation.base import Generator

#: generator name -> "module:Class" with a ``from_config(cfg) -> Generator`` classmethod.
GENERATORS: dict[str, str] = {
    "replay": "polysql_ray.generation.replay:ReplayGenerator",
    "gold": "polysql_ray.generation.gold:GoldGenerator",
    "openai": "polysql_ray.generation.openai:OpenAIGenerator",
    "hf": "polysql_ray.generation.hf:HFGenerator",
    "vllm": "polysql_ray.generation.vllm:VLLMGenerator",
}


class GeneratorConfigError(ValueError):
    """A model config that names no or an unknown generator, or lacks a required key."""


def _to_dict(cfg: Any) -> dict:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return dict(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover
        pass
    if not isinstance(cfg, Mapping):
        raise GeneratorConfigError(f"model config must be a mapping, got {type(cfg).__name__}: {cfg!r}")
    return dict(cfg)


def make_generator(model_cfg: Any) -> Generator:
    """Build the generator a model config names (dict or OmegaConf node).

    Raises:
        GeneratorConfigError: ``generator`` missing or unknown (the message lists the known
            ones) or ``name`` missing.
        ValueError: from the generator itself (e.g. ReplayError for a missing file).
    """
    cfg = _to_dict(model_cfg)
    kind = cfg.get("generator")
    if not cfg.get("name") and kind != "gold":
        raise GeneratorConfigError(f"model config {cfg!r} has no 'name'")
    if kind not in GENERATORS:
        raise GeneratorConfigError(
            f"model {cfg.get('name')!r}: unknown generator {kind!r}; known generators: {', '.join(sorted(GENERATORS))}")
    mod, _, cls = GENERATORS[kind].partition(":")
    return getattr(importlib.import_module(mod), cls).from_config(cfg)
