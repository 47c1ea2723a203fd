"""Engine settings of a run: what of ``engines.<engine>`` reaches an engine, and what stays
with the scheduler (:data:`SCHEDULING_KEYS`: how many actors, their CPUs, GPUs and custom
resources, the planning cost hint). One place decides it for the driver, replication and the
execution actors."""
from __future__ import annotations

SCHEDULING_KEYS = ("actors", "num_cpus", "num_gpus", "resources", "exec_cost_ms")  # not engine settings


def server_settings(cfg: dict, engine: str) -> dict | None:
    """Connection settings of a server engine (None for embedded engines, whose location is a file)."""
    from polysql_ray.engines.registry import engine_spec

    return None if engine_spec(engine).embedded else engine_settings_of(cfg, engine)


def engine_settings_of(cfg: dict, engine: str) -> dict:
    """``engines.<engine>`` of the config without the scheduling keys (:data:`SCHEDULING_KEYS`)."""
    settings = dict((cfg.get("engines") or {}).get(engine) or {})
    for k in SCHEDULING_KEYS:
        settings.pop(k, None)
    return settings
