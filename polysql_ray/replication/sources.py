"""Source installation: put a dataset's source database where its ``location`` says, before
gold runs on it and copies are made (the replication stage's job, never a loader's).

:data:`INSTALLERS` maps the kind of ``SourceDatabase.install`` (``<kind>:<argument>``) to
``"module:function"``; each function takes ``(source, argument, settings)`` with the run's
connection settings of the source engine (``engines.<engine>``) and is idempotent (it records
what it installed and reuses it when unchanged).
"""
from __future__ import annotations

import importlib
import os

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication.base import ReplicationError

#: install kind -> "module:function(source, argument, settings)".
INSTALLERS: dict[str, str] = {
    "spiderman": "polysql_ray.replication.spiderman_source:install_for_source",
    "pg_dump": "polysql_ray.replication.postgres_source:install_dump",
}


#: install kind -> "module:function(source, argument) -> str": the content fingerprint of what
#: the installer would install (read before anything is installed: part of every score key).
INSTALL_FINGERPRINTS: dict[str, str] = {
    "spiderman": "polysql_ray.replication.spiderman_source:install_fingerprint",
    "pg_dump": "polysql_ray.replication.sources:file_fingerprint",
}


def file_fingerprint(source: SourceDatabase, path: str) -> str:
    """sha256 of the file at ``path`` (a dump an installer loads)."""
    from polysql_ray.replication.base import file_sha256

    return file_sha256(path)


_FILE_FPS: dict[tuple, str] = {}


def source_fingerprint(source: SourceDatabase, settings: dict | None = None) -> str:
    """Content fingerprint of a source database, part of the score key of every question on
    it (a fixed or replaced source is rescored; issue 23): ``absent`` for a missing source;
    the installer's input for one installed by the replication stage
    (:data:`INSTALL_FINGERPRINTS`); the sha256 of the file for a file source (memoised per
    process by path, size, mtime and inode); the reader's ``content_hash`` (schema and rows)
    for a database already on a server. A source that cannot be read gives ``unreadable: <why>``
    (its questions then carry a gold error and are rescored once it is fixed)."""
    from polysql_ray.replication.base import file_sha256, get_reader

    if not source.exists:
        return "absent"
    try:
        if source.install:
            kind, _, arg = source.install.partition(":")
            module, _, fn = INSTALL_FINGERPRINTS.get(kind, ":").partition(":")
            if not module:
                return f"install:{source.install}"
            return f"{kind}:" + getattr(importlib.import_module(module), fn)(source, arg)
        if os.path.isfile(source.location):
            st = os.stat(source.location)
            memo = (os.path.realpath(source.location), st.st_size, st.st_mtime_ns, st.st_ino)
            if memo not in _FILE_FPS:
                _FILE_FPS[memo] = file_sha256(source.location)
            return _FILE_FPS[memo]
        return get_reader(source.engine, settings).content_hash(source)
    except Exception as exc:  # noqa: BLE001 - the gold run reports it; the key only has to differ
        return "unreadable: " + " ".join(str(exc).split())[:200]


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
