"""Where the configuration lives, how it is composed, and how grid entries named by string load.

The Hydra configuration tree is ``conf/`` at the project root (groups: dataset, model, policy,
sweep, engine). ``python -m polysql_ray`` composes it; everything downstream receives a plain,
resolved ``dict`` (never an OmegaConf node), so Ray workers need no Hydra.

Resolvers: ``${repo_root:}`` is the project checkout (so ``paths.shared`` defaults to the
``shared/`` folder beside it, whatever the working directory).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO_ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = REPO_ROOT / "conf"

if not OmegaConf.has_resolver("repo_root"):
    OmegaConf.register_new_resolver("repo_root", lambda: str(REPO_ROOT))


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
    return to_plain(cfg), make_conf_loader(cfg), OmegaConf.to_yaml(cfg)
