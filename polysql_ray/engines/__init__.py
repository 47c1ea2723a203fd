"""Engines: run one untrusted read-only statement and return an Arrow table (see ``base.py``).

Each engine is one declared class (``declaration.py``) in its own module, found by the registry
without being listed (``registry.py``); ``make_engine(name, **settings)`` builds one. The shared
execute paths are ``embedded.py`` (in-process engines) and ``servers.ServerEngine``; ``guard.py``
is the shared "exactly one SELECT/WITH statement" filter.
"""
from polysql_ray.engines.base import Engine, ExecStatus, ExecutionResult, Limits  # noqa: F401
from polysql_ray.engines.registry import (  # noqa: F401
    ENGINES, default_dialect, engine_for_dialect, make_engine,
)
