"""Replication stage: exact copies of source databases in target engines (see ``base.py``)."""
from polysql_ray.replication.base import (  # noqa: F401
    READERS, WRITERS, ColumnSpec, ForeignKeySpec, Manifest, Replica, ReplicationError,
    SourceReader, TableSpec, TargetWriter, get_reader, get_writer, replicate,
)
