"""Engines: run one untrusted read-only statement and return an Arrow table (see ``base.py``).

``make_engine(name, **settings)`` (``registry.py``) builds one; ``guard.py`` is the shared
"exactly one SELECT/WITH statement" filter.
"""
from polysql_ray.engines.base import Engine, ExecStatus, ExecutionResult, Limits  # noqa: F401
from polysql_ray.engines.registry import (  # noqa: F401
    ENGINES, default_dialect, engine_for_dialect, make_engine,
)
