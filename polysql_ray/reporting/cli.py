"""``key=value`` argument parsing shared by ``jobs/leaderboard.py`` and ``jobs/stats.py``."""
from __future__ import annotations

from collections.abc import Sequence

from polysql_ray.statistics.summary import StatsConfig

#: Keys mapping onto :class:`StatsConfig` fields, with their parsers.
CONFIG_KEYS = {
    "baseline": str,
    "alpha": float,
    "ci": str,
    "p_adjust": lambda s: None if s.lower() in ("", "none", "null") else s,
    "policy_version": str,
    # comma-separated generators to leave out ("" keeps all); default: gold
    "exclude_generators": lambda s: tuple(x for x in s.split(",") if x),
}


def parse_kv(argv: Sequence[str], required: Sequence[str], optional: Sequence[str]) -> dict[str, str]:
    """Parse ``key=value`` arguments (Hydra-style ``+key=value`` is accepted too).

    Raises:
        SystemExit: malformed argument, unknown key or missing required key (with usage).
    """
    allowed = set(required) | set(optional)
    usage = " ".join([f"{k}=..." for k in required] + [f"[{k}=...]" for k in optional])
    out: dict[str, str] = {}
    for arg in argv:
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep or key not in allowed:
            raise SystemExit(f"bad argument {arg!r}; usage: {usage}")
        out[key] = value
    missing = [k for k in required if k not in out]
    if missing:
        raise SystemExit(f"missing {', '.join(missing)}; usage: {usage}")
    return out


def stats_config(kv: dict[str, str]) -> StatsConfig:
    """A :class:`StatsConfig` from parsed arguments (``ci`` -> ``ci_method``)."""
    fields = {("ci_method" if k == "ci" else k): CONFIG_KEYS[k](v)
              for k, v in kv.items() if k in CONFIG_KEYS}
    return StatsConfig(**fields)
