"""Where the configuration lives, how it is composed, and how grid entries named by string load.

The Hydra configuration tree is ``conf/`` at the project root (groups: dataset, model, policy,
sweep, engine). ``python -m polysql_ray`` composes it; everything downstream receives a plain,
resolved ``dict`` (never an OmegaConf node), so Ray workers need no Hydra.

Resolvers: ``${repo_root:}`` is the project checkout (so ``paths.shared`` defaults to the
``shared/`` folder beside it, whatever the working directory). ``${local_dir:X}`` is ``X`` for a
local folder and, for an object-store URI (``s3://bucket/prefix``), a node-local folder for the
files that must be local (embedded-engine replicas, the quickstart's databases):
``$POLYSQL_LOCAL_DIR/<scheme>/<bucket>/<prefix>`` (default ``~/.cache/polysql_ray/...``), the same
path on every node.
"""
from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"

#: The values of ``pipeline.structural_check`` (what each means: :mod:`polysql_ray.pipeline.structural`).
STRUCTURAL_MODES = ("auto", "off", "prove", "verify")

if not OmegaConf.has_resolver("repo_root"):
    OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))


def local_dir(location: str) -> str:
    """``location`` itself when it is a local folder; for an object-store URI
    (``s3://bucket/prefix``) the node-local folder ``$POLYSQL_LOCAL_DIR/s3/bucket/prefix``
    (``POLYSQL_LOCAL_DIR`` defaults to ``~/.cache/polysql_ray``)."""
    import os

    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", str(location))
    if not m or m.group(1).lower() == "file":
        return m.group(2) if m else str(location)
    base = os.environ.get("POLYSQL_LOCAL_DIR") or os.path.expanduser("~/.cache/polysql_ray")
    rest = "/".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", p) for p in m.group(2).split("?", 1)[0].split("/") if p)
    return os.path.join(base, m.group(1).lower(), rest)


if not OmegaConf.has_resolver("local_dir"):
    OmegaConf.register_new_resolver("local_dir", local_dir)


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


#: Config keys whose values are secrets: redacted in every config written to disk.
SECRET_KEY = re.compile(r"(pass(word|wd)?|secret|token|api_?key|credential)s?$", re.IGNORECASE)
#: Keys that only *name* where a secret lives (an env var, a file): kept.
SECRET_LOCATION = re.compile(r"_(env|file)$", re.IGNORECASE)
REDACTED = "<redacted>"


def redact(node):
    """A copy of a plain config with every secret value replaced by ``<redacted>``: keys
    matching :data:`SECRET_KEY` (``password``, ``admin_password``, ``api_key``, ``token`` ...)
    unless they name a location (``password_env``, ``password_file``)."""
    if isinstance(node, dict):
        return {k: (REDACTED if (isinstance(k, str) and SECRET_KEY.search(k)
                                 and not SECRET_LOCATION.search(k) and node[k] not in (None, ""))
                    else redact(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [redact(v) for v in node]
    return node


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
    ``engines.*.actors`` (>= 1), passwords (never literal) and ``policy.*`` (known fields,
    numbers where numbers belong). Raises ``ConfigError`` (a ValueError).
    """
    from polysql_ray.engines.base import Limits
    from polysql_ray.errors import ConfigError

    try:
        Limits(**(cfg.get("limits") or {}))
    except TypeError as exc:
        raise ConfigError(f"limits: {exc}; known: timeout_s, row_cap, max_bytes, max_sql_chars") from None
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
    if inflight != "auto" and (isinstance(inflight, bool) or not isinstance(inflight, int) or inflight < 1):
        raise ConfigError(f"pipeline.max_inflight_score must be auto or a whole number >= 1 (got {inflight!r})")
    for engine, ecfg in (cfg.get("engines") or {}).items():
        actors = (ecfg or {}).get("actors", 1) if isinstance(ecfg, dict) else 1
        if isinstance(actors, bool) or not isinstance(actors, int) or actors < 1:
            raise ConfigError(f"engines.{engine}.actors must be a whole number >= 1 (got {actors!r})")
    unknown = sorted(set(cfg) - known_top_level_keys())
    if unknown:
        raise ConfigError(f"unknown config key(s) {unknown}: check the spelling "
                          f"(known: {sorted(known_top_level_keys() - {'hydra'})})")
    from polysql_ray.comparison.policy import ComparisonPolicy

    try:
        ComparisonPolicy.from_config(cfg.get("policy") or {})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy: {str(exc).splitlines()[0]}") from None
