"""Statistics keys shared by ``jobs/leaderboard.py`` and ``jobs/stats.py`` (Hydra overrides,
parsed by :func:`polysql_ray.jobs_cli.parse_overrides`)."""
from __future__ import annotations

from polysql_ray.jobs_cli import as_list, as_text
from polysql_ray.statistics.summary import StatsConfig

_DEFAULT = StatsConfig()

#: Keys mapping onto :class:`StatsConfig` fields: key -> (default, parser of the override value).
CONFIG_KEYS = {
    "baseline": (_DEFAULT.baseline, as_text),
    "alpha": (_DEFAULT.alpha, float),
    "ci": (_DEFAULT.ci_method, as_text),
    "p_adjust": (_DEFAULT.p_adjust, lambda v: None if as_text(v).lower() in ("", "none", "null") else as_text(v)),
    "policy_version": (None, lambda v: None if v is None else as_text(v)),
    # the comparison policy (row column `policy`) the tables use; EX under every policy is shown too
    "policy": (None, lambda v: None if v is None else as_text(v)),
    # generators to leave out: exclude_generators=[gold] (default) or exclude_generators=[] to keep all
    "exclude_generators": (list(_DEFAULT.exclude_generators), lambda v: tuple(as_list(v))),
    # pool dialects scored on a stand-in engine into the leaderboard's means (default: badged, not pooled)
    "include_standins": (_DEFAULT.include_standins, lambda v: as_text(v).lower() in ("true", "1", "yes")),
}


def config_defaults() -> dict[str, object]:
    """key -> default of :data:`CONFIG_KEYS` (for :func:`polysql_ray.jobs_cli.parse_overrides`)."""
    return {k: d for k, (d, _) in CONFIG_KEYS.items()}


def stats_config(kv: dict[str, object]) -> StatsConfig:
    """A :class:`StatsConfig` from parsed overrides (``ci`` -> ``ci_method``)."""
    fields = {("ci_method" if k == "ci" else k): CONFIG_KEYS[k][1](v)
              for k, v in kv.items() if k in CONFIG_KEYS}
    return StatsConfig(**fields)
