"""Source installer of the SpiderMan dataset: load one of its databases into MariaDB/MySQL.

The loader (:mod:`polysql_ray.datasets.spiderman`, whose docstring gives the layout, the source
database name and the reuse rule) only reads the files; installing the source database is the
replication stage's job (:mod:`polysql_ray.replication.sources`, ``install="spiderman:<root>"``),
done here with the run's ``engines.mysql`` settings.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.datasets.spiderman import (
    CSV_NULL, _statements, _tables_in_ddl, input_hash, missing_tables, source_name,
)
from polysql_ray.engines import mysql as my_engine
from polysql_ray.engines.servers import ServerSettings
from polysql_ray.replication.mysql import bq, ensure_reader_user, mysql_fingerprint


def install_source(root: Path | str, db_id: str, settings: ServerSettings | dict | None = None,
                   force: bool = False) -> tuple[str, bool]:
    """Load one SpiderMan database into MySQL as a source database (idempotent).

    Returns ``(database name, reused)``. Tables whose CSV is missing are not created.
    Raises ``pymysql`` errors when the server refuses the DDL or a value.
    """
    if not isinstance(settings, ServerSettings):
        settings = ServerSettings.from_dict(settings, **my_engine.DEFAULTS)
    root = Path(root)
    name = source_name(db_id)
    ih = input_hash(root, db_id)
    with my_engine.connect_raw(settings, admin=True) as conn, conn.cursor() as cur:
        cur.execute("SELECT schema_comment FROM information_schema.schemata "
                    "WHERE schema_name = %s", (name,))
        row = cur.fetchone()
        if row and not force:
            m = re.fullmatch(r"polysql input=([0-9a-f]{64}) content=([0-9a-f]{64})", row[0] or "")
            if m and m.group(1) == ih and mysql_fingerprint(settings, name) == m.group(2):
                return name, True
        skip = set(missing_tables(root, db_id))
        d = root / "databases" / db_id
        cur.execute(f"DROP DATABASE IF EXISTS {bq(name)}")
        cur.execute(f"CREATE DATABASE {bq(name)} CHARACTER SET utf8mb4")
        conn.select_db(name)
        cur.execute("SET SESSION foreign_key_checks = 0")
        for stmt in _statements((d / "schema.sql").read_text(), db_id, name, skip):
            cur.execute(stmt)
        for t in _tables_in_ddl((d / "schema.sql").read_text()):
            if t in skip:
                continue
            with open(d / "data" / f"{t}.csv", newline="", encoding="utf-8") as f:
                rd = csv.reader(f)
                header = next(rd)
                rows = [tuple(None if v == CSV_NULL else v for v in r) for r in rd]
            stmt = (f"INSERT INTO {bq(t)} ({', '.join(map(bq, header))}) "
                    f"VALUES ({', '.join(['%s'] * len(header))})")
            for i in range(0, len(rows), 2000):
                cur.executemany(stmt, rows[i:i + 2000])
        flavour = my_engine.server_flavour(conn)
        account = ensure_reader_user(settings, cur, flavour)
        cur.execute(f"GRANT SELECT ON {bq(name)}.* TO {account}")
        fp = mysql_fingerprint(settings, name)
        cur.execute(f"ALTER DATABASE {bq(name)} COMMENT %s", (f"polysql input={ih} content={fp}",))
    return name, False


def install_sources(root: Path | str, settings: ServerSettings | dict | None = None,
                    db_ids: list[str] | None = None, force: bool = False) -> dict[str, bool]:
    """:func:`install_source` for every database (or ``db_ids``); returns db_id -> reused."""
    root = Path(root)
    ids = db_ids or sorted(p.name for p in (root / "databases").iterdir() if p.is_dir())
    return {db: install_source(root, db, settings, force)[1] for db in ids}



#: (root, db_id, server) already installed or verified in this process -> reused.
_INSTALLED: dict[tuple, bool] = {}


def install_fingerprint(source: SourceDatabase, root: str) -> str:
    """sha256 over the files of ``<root>/databases/<db_id>/`` (relative names and bytes, in
    sorted order): what :func:`install_for_source` would install (``replication.sources``)."""
    import hashlib

    folder = Path(root) / "databases" / source.db_id
    h = hashlib.sha256()
    for f in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def install_for_source(source: SourceDatabase, root: str, settings: dict | None = None) -> bool:
    """Installer of ``replication.sources`` (``install="spiderman:<root>"``): install the
    source's database with the run's MySQL ``settings``, once per process; returns reused."""
    key = (root, source.db_id, repr(sorted((settings or {}).items())))
    if key not in _INSTALLED:
        _INSTALLED[key] = install_source(root, source.db_id, settings)[1]
    return _INSTALLED[key]
