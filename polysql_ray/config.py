"""Where the configuration lives, how it is composed, and how grid entries named by string load.

The Hydra configuration tree is ``conf/`` at the project root (groups: dataset, model, policy,
sweep, engine). ``python -m polysql_ray`` composes it; everything downstream receives a plain,
resolved ``dict`` (never an OmegaConf node), so Ray workers need no Hydra.

Resolvers (``${repo_root:}``, ``${local_dir:X}``) are registered by :mod:`polysql_ray.resolvers`.
"""
from __future__ import annotations

import functools
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from polysql_ray.redaction import REDACTED, is_secret_key, redact, redact_text  # noqa: F401 - the one rule
from polysql_ray.resolvers import REPO_ROOT, local_dir  # noqa: F401 - registers ${repo_root:} and ${local_dir:}

CONF_DIR = REPO_ROOT / "conf"

#: The values of ``pipeline.structural_check`` (what each means: :mod:`polysql_ray.pipeline.structural`).
STRUCTURAL_MODES = ("auto", "off", "prove", "verify")


def to_plain(cfg: DictConfig) -> dict:
    """Resolve every interpolation and return plain Python containers (hydra node dropped)."""
    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    cfg.pop("hydra", None)
    return OmegaConf.to_container(cfg, resolve=True)


def make_conf_loader(cfg: DictConfig | dict):
    """``loader(group, name) -> dict``: load ``conf/<group>/<name>.yaml`` with interpolations
    (``${paths.shared}``, ``${results_dir}``) resolved against the composed config.

    Errors: ``FileNotFoundError`` naming the file and the names that do exist.
    """
    base = OmegaConf.create({k: cfg[k] for k in ("paths", "results_dir") if k in cfg})

    def load(group: str, name: str) -> dict:
        path = CONF_DIR / group / f"{name}.yaml"
        if not path.exists():
            known = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
            raise FileNotFoundError(f"no {group} config {name!r} ({path}); known: {known}")
        merged = OmegaConf.merge(base, {"__entry": OmegaConf.load(path)})
        return OmegaConf.to_container(merged, resolve=True)["__entry"]

    return load


def compose(overrides: list[str] | tuple[str, ...] = ()) -> tuple[dict, object, str]:
    """Compose ``conf/`` with command-line style overrides outside a Hydra app (tests,
    benchmarks, notebooks). Returns ``(plain config, conf loader, config YAML)``."""
    from hydra import compose as _compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = _compose(config_name="config", overrides=list(overrides))
    return to_plain(cfg), make_conf_loader(cfg), redacted_yaml(cfg)


def redacted_yaml(cfg) -> str:
    """YAML of ``cfg`` (DictConfig or plain dict) with secrets redacted (:func:`redact`)."""
    plain = cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg, resolve=False)
    return OmegaConf.to_yaml(OmegaConf.create(redact(plain)))


def known_top_level_keys() -> set[str]:
    """Top-level keys a composed config may have: those of ``conf/config.yaml`` and its config
    groups (``dataset``, ``model``, ``policy`` ...). A key outside them (``+datset=spider``) is a
    typo that would otherwise be silently ignored."""
    base = OmegaConf.load(CONF_DIR / "config.yaml")
    keys = {str(k) for k in base.keys()} - {"defaults"}
    for entry in base.get("defaults") or []:
        if isinstance(entry, (dict, DictConfig)):
            for group in entry:
                name = str(group).split("@", 1)[-1].split(" ", 1)[-1].split(".", 1)[0]
                if not name.startswith(("override", "hydra")):
                    keys.add(name)
    return keys | {"hydra"}


def validate(cfg: dict) -> None:
    """Fail before any work with one line naming the key to fix.

    Checks ``limits.*`` (positive, finite), ``pipeline.structural_check`` (one of the modes),
    ``engines.*.actors`` (>= 1), passwords (never literal), ``suite.*`` (whole numbers,
    ``candidates >= size``) and ``policy.*`` (known fields,
    numbers where numbers belong). Raises ``ConfigError`` (a ValueError).
    """
    import dataclasses

    from polysql_ray.engines.base import Limits
    from polysql_ray.errors import ConfigError

    known = [f.name for f in dataclasses.fields(Limits)]
    unknown = sorted(set(cfg.get("limits") or {}) - set(known))
    if unknown:
        raise ConfigError(f"unknown limits key(s) {unknown}: check the spelling (known: {', '.join(known)})")
    try:
        Limits(**(cfg.get("limits") or {}))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    mode = str((cfg.get("pipeline") or {}).get("structural_check", "auto"))
    if mode not in STRUCTURAL_MODES:
        raise ConfigError(f"pipeline.structural_check={mode!r} is not one of {list(STRUCTURAL_MODES)}")
    for engine, ecfg in (cfg.get("engines") or {}).items():
        for key in ("password", "admin_password"):
            if isinstance(ecfg, dict) and key in ecfg:
                raise ConfigError(f"engines.{engine}.{key} must not hold a password; name where it "
                                  f"lives instead: engines.{engine}.{key}_env=VAR or {key}_file=PATH")
    retry = (cfg.get("pipeline") or {}).get("unavailable_retry_s", 120)
    if not isinstance(retry, (int, float)) or retry < 0:
        raise ConfigError(f"pipeline.unavailable_retry_s must be >= 0 seconds (got {retry!r})")
    inflight = (cfg.get("pipeline") or {}).get("max_inflight_score", "auto")
    if inflight != "auto" and (isinstance(inflight, bool) or not isinstance(inflight, int) or inflight < 0):
        raise ConfigError(f"pipeline.max_inflight_score must be auto or a whole number >= 0 "
                          f"(0: the driver scores every batch itself; got {inflight!r})")
    for engine, ecfg in (cfg.get("engines") or {}).items():
        actors = (ecfg or {}).get("actors", 1) if isinstance(ecfg, dict) else 1
        if actors != "auto" and (isinstance(actors, bool) or not isinstance(actors, int) or actors < 1):
            raise ConfigError(f"engines.{engine}.actors must be auto or a whole number >= 1 (got {actors!r})")
    check_settings(cfg)
    unknown = sorted(set(cfg) - known_top_level_keys())
    if unknown:
        raise ConfigError(f"unknown config key(s) {unknown}: check the spelling "
                          f"(known: {sorted(known_top_level_keys() - {'hydra'})})")
    from polysql_ray.comparison.policy import ComparisonPolicy
    from polysql_ray.suites.spec import SuiteSettings

    try:
        SuiteSettings.from_config(cfg.get("suite"))
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    try:
        ComparisonPolicy.from_config(cfg.get("policy") or {})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy: {str(exc).splitlines()[0]}") from None
    from polysql_ray.comparison.policy import load_policies

    try:
        load_policies(cfg, CONF_DIR / "policy")
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None


#: Type and range of the settings the run reads (behaviour as data): key (``*``: any engine) ->
#: (kind, lowest value, whether the lowest value itself is allowed). Kinds: ``int`` (a whole
#: number), ``number``, ``bool``, ``str`` (non-empty), ``int?`` (a whole number or null),
#: ``choice:a|b``. Every other scalar of ``conf/config.yaml`` and ``conf/engine/<name>.yaml``
#: must keep the type of its default, a number staying a number (:func:`check_settings`).
SETTINGS: dict[str, tuple[str, float | None, bool]] = {
    "results_dir": ("str", None, True),
    "progress": ("bool", None, True),
    "pipeline.exec_batch_size": ("int", 1, True),
    "pipeline.score_batch_size": ("int", 1, True),
    "pipeline.max_inflight_exec": ("int", 1, True),
    "pipeline.max_pending_items": ("int", 1, True),
    "pipeline.plan_chunk_items": ("int", 1, True),
    "pipeline.generation_prefetch_cells": ("int", 0, True),
    "pipeline.generation_batch_size": ("int", 0, True),   # 0: a cell's remainder in one call
    "pipeline.exec_cache_size": ("int", 0, True),
    "pipeline.verdict_cache_size": ("int", 0, True),   # 0: every item scored by a task
    "pipeline.driver_scores": ("bool", None, True),
    "pipeline.plan_ahead": ("bool", None, True),
    "pipeline.flush_rows": ("int", 1, True),
    "pipeline.flush_s": ("number", 0, True),   # 0: write after every scored batch
    "pipeline.score_num_cpus": ("number", 0, False),
    "pipeline.structural_min_exec_ms": ("number", 0, True),
    "store.lease_s": ("number", 0, False),
    "store.lease_settle_s": ("number", 0, True),
    "replication.verify": ("bool", None, True),
    "replication.types": ("choice:declared|storage", None, True),
    "ray.num_cpus": ("int?", 1, True),
    "ray.include_dashboard": ("bool", None, True),
    "ray.log_to_driver": ("bool", None, True),
    "ray.lean_head": ("bool", None, True),
    "engines.*.num_cpus": ("number", 0, True),
    "engines.*.num_gpus": ("number", 0, True),
    "engines.*.exec_cost_ms": ("number", 0, True),
    "engines.*.port": ("int", 1, True),
    "engines.*.pool_size": ("int", 1, True),
    "engines.*.connect_timeout_s": ("number", 0, False),
    "engines.*.threads": ("int", 1, True),
    "engines.*.actors": ("auto|int", 1, True),  # auto: pipeline.cluster.engine_actors
}

#: The same for a model's config (``model.*`` and each mapping of ``sweep.models``); every other
#: scalar of ``conf/model/*.yaml`` keeps the type of its default.
MODEL_SETTINGS: dict[str, tuple[str, float | None, bool]] = {
    "concurrency": ("int", 1, True),
    "batch_size": ("int", 1, True),
    "num_actors": ("int", 1, True),
    "tensor_parallel_size": ("int", 1, True),
    "max_model_len": ("int", 1, True),
    "sample_rows": ("int", 0, True),
    "gpu_memory_utilization": ("number", 0, False),
    "allow_partial": ("bool", None, True),
    "system_role": ("bool", None, True),
    "format": ("choice:auto|lines|jsonl", None, True),
    "retry.max_retries": ("int", 0, True),
    "retry.backoff_s": ("number", 0, True),
    "retry.backoff_max_s": ("number", 0, True),
    "retry.jitter": ("number", 0, True),
    "retry.timeout_s": ("number", 0, False),
    "sampling.temperature": ("number", 0, True),
    "sampling.top_p": ("number", 0, False),
    "sampling.max_tokens": ("int", 1, True),
    "sampling.seed": ("int?", 0, True),
}

_KIND_WORDS = {"int": "a whole number", "int?": "a whole number or null", "number": "a number",
               "bool": "true or false", "str": "a non-empty text", "auto|int": "auto or a whole number"}


def _setting_problem(value, kind: str, low, inclusive: bool) -> str | None:
    """Why ``value`` is not a ``kind`` setting at least ``low``, or None."""
    import math

    if kind.startswith("choice:"):
        options = kind.split(":", 1)[1].split("|")
        return None if value in options else f"one of {options}"
    if kind == "int?" and value is None:
        return None
    if kind == "auto|int":
        if value == "auto":
            return None
        return None if _setting_problem(value, "int", low, inclusive) is None else \
            f"auto or a whole number >= {low:g}"
    want = _KIND_WORDS[kind] + ("" if low is None else f" {'>=' if inclusive else '>'} {low:g}")
    if kind == "bool":
        return None if isinstance(value, bool) else want
    if kind == "str":
        return None if isinstance(value, str) and value.strip() else want
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return want
    if kind in ("int", "int?") and not isinstance(value, int):
        return want
    if not math.isfinite(value) or (low is not None and (value < low or (value == low and not inclusive))):
        return want
    return None


def _kind_of(default) -> str | None:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, (int, float)):  # an int default still takes 0.5 (ranges: SETTINGS)
        return "number"
    return None


@functools.lru_cache(maxsize=1)
def _default_kinds() -> dict[str, str]:
    """``key -> kind`` of every scalar of ``conf/config.yaml`` with a bool/int/float default, and
    of ``conf/engine/<name>.yaml`` as ``engines.*.<key>`` (interpolations and nulls skipped)."""
    out: dict[str, str] = {}

    def walk_into(node, prefix: str, into: dict) -> None:
        for k, v in node.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                walk_into(v, key + ".", into)
            elif _kind_of(v) is not None:
                into[key] = _kind_of(v)

    def walk(node, prefix: str) -> None:
        walk_into(node, prefix, out)

    models: dict[str, str | None] = {}
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        found: dict[str, str] = {}
        walk_into(OmegaConf.to_container(OmegaConf.load(path), resolve=False), "", found)
        for k, v in found.items():  # a key typed differently by two models is left to SETTINGS
            models[k] = v if models.get(k, v) == v else None
    out.update({f"model:{k}": v for k, v in models.items() if v})
    base = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"), resolve=False)
    base.pop("defaults", None)
    base.pop("hydra", None)
    walk(base, "")
    engines = {k.split(".", 2)[2]: v for k, v in out.items() if k.startswith("engines.")}
    for path in sorted((CONF_DIR / "engine").glob("*.yaml")):
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        for k, v in node.items():
            if _kind_of(v) is not None:
                engines.setdefault(k, _kind_of(v))
    out = {k: v for k, v in out.items() if not k.startswith("engines.")}
    out.update({f"engines.*.{k}": v for k, v in engines.items()})
    return out  # model keys as "model:<key>" (checked per model mapping)


def _lookup(cfg: dict, key: str) -> list[tuple[str, object]]:
    """``(concrete key, value)`` of ``key`` in ``cfg`` (``*`` expands to every engine); keys
    absent from ``cfg`` give nothing."""
    found: list[tuple[str, object]] = [("", cfg)]
    for part in key.split("."):
        nxt = []
        for where, node in found:
            if not isinstance(node, dict):
                continue
            for k in (node if part == "*" else [part]):
                if k in node:
                    nxt.append((f"{where}.{k}" if where else str(k), node[k]))
        found = nxt
    return found


def check_settings(cfg: dict) -> None:
    """Refuse a setting of the wrong type or out of range (:data:`SETTINGS`, and
    :data:`MODEL_SETTINGS` for each model mapping; other scalars keep the type of their default)
    with one line naming the key, the value and what it must be.
    Raises ``ConfigError``."""
    from polysql_ray.errors import ConfigError

    kinds = _default_kinds()
    rules: dict[str, tuple] = {k: (kind, None, True) for k, kind in kinds.items() if not k.startswith("model:")}
    rules.update(SETTINGS)
    model_rules: dict[str, tuple] = {k[len("model:"):]: (kind, None, True) for k, kind in kinds.items()
                                     if k.startswith("model:")}
    model_rules.update(MODEL_SETTINGS)
    models = [("model", cfg.get("model"))] + [
        (f"sweep.models[{i}]", m) for i, m in enumerate((cfg.get("sweep") or {}).get("models") or [])]
    checks = [(rules, cfg, "")] + [(model_rules, m, f"{where}.") for where, m in models if isinstance(m, dict)]
    for table, node, prefix in checks:
        for pattern, (kind, low, inclusive) in table.items():
            for key, value in _lookup(node, pattern):
                want = _setting_problem(value, kind, low, inclusive)
                if want is not None:
                    raise ConfigError(f"{prefix}{key} must be {want} (got {value!r}); "
                                      f"set {prefix}{key}=<{_KIND_WORDS.get(kind, want)}>")
