"""Source installation: put a dataset's source database where its ``location`` says, before
gold runs on it and copies are made (the replication stage's job, never a loader's).

:data:`INSTALLERS` maps the kind of ``SourceDatabase.install`` (``<kind>:<argument>``) to
``"module:function"``; each function takes ``(source, argument, settings)`` with the run's
connection settings of the source engine (``engines.<engine>``) and is idempotent (it records
what it installed and reuses it when unchanged).
"""
from __future__ import annotations

import importlib

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication.base import ReplicationError

#: install kind -> "module:function(source, argument, settings)".
INSTALLERS: dict[str, str] = {
    "spiderman": "polysql_ray.replication.spiderman_source:install_for_source",
    "pg_dump": "polysql_ray.replication.postgres_source:install_dump",
}


def prepare(source: SourceDatabase, settings: dict | None = None) -> bool:
    """Install ``source`` when it names an installer; returns True when something was
    installed or verified, False when there was nothing to do.

    Raises:
        ReplicationError: unknown installer kind, or the installer failed (message names the
            source and the engine's reason).
    """
    if not source.install or not source.exists:
        return False
    kind, _, arg = source.install.partition(":")
    try:
        spec = INSTALLERS[kind]
    except KeyError:
        raise ReplicationError(f"{source.dataset}/{source.db_id}: unknown source installer {kind!r}; "
                               f"known: {sorted(INSTALLERS)}") from None
    module, _, fn = spec.partition(":")
    try:
        getattr(importlib.import_module(module), fn)(source, arg, settings)
    except ReplicationError:
        raise
    except Exception as e:  # noqa: BLE001 - the server's own reason, with the source named
        raise ReplicationError(f"installing source {source.dataset}/{source.db_id} "
                               f"({source.install}) failed: {e}") from e
    return True
