"""SpiderMan (cloudera/spiderman): Spider dev rewritten for MySQL, as a MySQL-source dataset.

Layout (``<root>`` = ``shared/data/spiderman``): ``databases/<db_id>/schema.sql`` (MySQL DDL,
tables qualified as ```db_id`.`table```), ``databases/<db_id>/data/<table>.csv`` (header row
of column names; the unquoted literal ``NULL`` is SQL NULL) and ``test_queries.csv``
(``database,question,sql``) in Spider ``dev.json`` order.

* ``replication.spiderman_source.install_source`` loads one database into MariaDB/MySQL as a
  *source* database named ``pq_src_spiderman_<db_id>`` (``servers.replica_name("src_spiderman",
  db_id)``; the ``pq_`` prefix lets the reader role read it; ``src_`` keeps it apart from a
  MySQL *replica* of the same dataset). Idempotent: the database comment records the sha256 of the input files
  and the content fingerprint after loading; both must match for reuse, else it is rebuilt.
  Values are inserted as the CSV text and converted by the server in strict mode (an
  unconvertible value fails the load, nothing is coerced silently). The *replication stage*
  calls it (``replication.sources``, through ``SourceDatabase.install = "spiderman:<root>"``)
  with the run's ``engines.mysql`` settings; the loader only reads the files.
* :func:`load_spiderman` yields one :class:`Example` per line of ``test_queries.csv``:
  ``gold_dialect = source_engine = "mysql"``. ``test_queries.csv`` is **not** in ``dev.json``
  order (despite the data README): it is grouped by database (alphabetical), keeping
  ``dev.json`` order within each database. Given Spider's ``dev.json``
  (``spider_dev``), :func:`dev_positions` maps each row to its ``dev.json`` index by the
  unique key ``(database, question)``, and ``question_id``/``position`` are that index, so
  Spider prediction files (``dev_gold.sql``, model outputs) align; examples are yielded in
  ``dev.json`` order. Without ``spider_dev`` the CSV row index is used (file order).

Missing ``wta_1/data/rankings.csv`` (too large for the mirror), policy
``missing_table_policy``:

* ``"questions"`` (default): wta_1 is loaded *without* the ``rankings`` table (an empty
  table would silently give wrong gold results); only questions whose gold SQL reads
  ``rankings`` (sqlglot table names) carry a ``gold_error``; the others run. Every wta_1
  example carries ``extra["missing_tables"] = ["rankings"]`` so a prediction that needlessly
  reads rankings (schema error) can be told apart in reports.
* ``"database"``: the whole wta_1 database is treated as missing (``exists=False``), like
  Spider's SQLite wta_1; all its questions carry a gold error.
"""
from __future__ import annotations

import csv
import hashlib
import re
from pathlib import Path
from typing import Iterator

from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.engines.servers import replica_name

DATASET = "spiderman"

#: The ``NULL`` literal of the CSV files.
CSV_NULL = "NULL"

_QUALIFIED = re.compile(r"`([^`]+)`\.`")


def source_name(db_id: str) -> str:
    """MySQL database holding the SpiderMan source ``db_id``: ``pq_src_spiderman_<db_id>``."""
    return replica_name("src_" + DATASET, db_id)


def _tables_in_ddl(ddl: str) -> list[str]:
    return re.findall(r"CREATE TABLE `[^`]+`\.`([^`]+)`", ddl)


def missing_tables(root: Path, db_id: str) -> list[str]:
    """Tables the DDL declares but whose CSV is absent (``["rankings"]`` for wta_1)."""
    d = Path(root) / "databases" / db_id
    return [t for t in _tables_in_ddl((d / "schema.sql").read_text())
            if not (d / "data" / f"{t}.csv").exists()]


def input_hash(root: Path, db_id: str) -> str:
    """sha256 over ``schema.sql`` and every data CSV (names and bytes) of one database."""
    d = Path(root) / "databases" / db_id
    h = hashlib.sha256()
    for p in [d / "schema.sql", *sorted((d / "data").glob("*.csv"))]:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _statements(ddl: str, db_id: str, target: str, skip: set[str]) -> list[str]:
    out = []
    for stmt in ddl.split(";"):
        body = "\n".join(l for l in stmt.splitlines() if not l.strip().startswith("--")).strip()
        if not body:
            continue
        tabs = _tables_in_ddl(body)
        if tabs and tabs[0] in skip:
            continue
        # `db_id`.`t` -> `target`.`t` (references to skipped tables drop their FK line)
        body = body.replace(f"`{db_id}`.`", f"`{target}`.`")
        lines = [l for l in body.splitlines()
                 if not any(f"REFERENCES `{target}`.`{s}`" in l for s in skip)]
        body = "\n".join(lines)
        body = re.sub(r",\s*\)\s*$", "\n)", body)
        out.append(body)
    return out


def _gold_tables(sql: str) -> set[str]:
    import sqlglot
    from sqlglot import exp

    try:
        return {t.name.lower() for tree in sqlglot.parse(sql, read="mysql") if tree
                for t in tree.find_all(exp.Table)}
    except Exception:
        return {w.lower() for w in re.findall(r"`?(\w+)`?", sql)}


def dev_positions(rows: list[dict], spider_dev: Path | str) -> list[int]:
    """Spider ``dev.json`` index of each ``test_queries.csv`` row, matched on the unique key
    ``(database, question)`` (exact text).

    Args:
        rows: the CSV records (``database``, ``question``, ``sql``) in file order.
        spider_dev: path of Spider's ``dev.json``.

    Returns: one index per row (a permutation of ``range(len(rows))`` for the full files).

    Raises:
        ValueError: a row without partner, a key twice in ``dev.json``, or two rows on the
            same index (the files are not the same question set).
    """
    import json

    dev = json.loads(Path(spider_dev).read_text(encoding="utf-8"))
    index: dict[tuple[str, str], int] = {}
    for i, rec in enumerate(dev):
        key = (rec["db_id"], rec["question"])
        if key in index:
            raise ValueError(f"{spider_dev}: (db_id, question) {key} appears twice")
        index[key] = i
    out = []
    for n, row in enumerate(rows):
        key = (row["database"], row["question"])
        if key not in index:
            raise ValueError(f"test_queries.csv row {n}: {key} not found in {spider_dev}")
        out.append(index[key])
    if len(set(out)) != len(out):
        raise ValueError(f"test_queries.csv: two rows map to the same {spider_dev} record")
    return out


def load_spiderman(root: Path | str, missing_table_policy: str = "questions",
                   installed: bool = True, spider_dev: Path | str | None = None) -> Iterator[Example]:
    """Yield SpiderMan examples (see module doc for ids and order).

    Args:
        root: the ``spiderman`` folder.
        missing_table_policy: ``"questions"`` or ``"database"`` (module doc).
        installed: True: each source names its installer (``install="spiderman:<root>"``), run
            by the replication stage before gold runs; False: the databases are expected to be
            installed already (nothing is installed).
        spider_dev: Spider's ``dev.json``: ids become ``dev.json`` indices and examples come
            in that order (:func:`dev_positions`); None keeps the CSV row order and index.
    """
    if missing_table_policy not in ("questions", "database"):
        raise ValueError("missing_table_policy must be 'questions' or 'database'")
    root = Path(root)
    missing = {d.name: missing_tables(root, d.name)
               for d in (root / "databases").iterdir() if d.is_dir()}
    with open(root / "test_queries.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    positions = dev_positions(rows, spider_dev) if spider_dev else list(range(len(rows)))
    for pos, row in sorted(zip(positions, rows), key=lambda pr: pr[0]):
        db_id, sql = row["database"], row["sql"]
        lacking = missing.get(db_id, [])
        exists = db_id in missing and not (lacking and missing_table_policy == "database")
        err = None
        if db_id not in missing:
            err = f"SpiderMan database {db_id} is absent from {root}/databases"
        elif lacking and missing_table_policy == "database":
            err = f"{db_id}: data of {', '.join(lacking)} missing from the mirror"
        elif lacking and _gold_tables(sql) & {t.lower() for t in lacking}:
            err = f"{db_id}: gold SQL reads {', '.join(lacking)}, whose data is missing"
        yield Example(
            dataset=DATASET, question_id=str(pos), db_id=db_id, question=row["question"],
            evidence="", gold_sql=sql, gold_dialect="mysql", source_engine="mysql",
            database=SourceDatabase(DATASET, db_id, "mysql", source_name(db_id), exists,
                                    install=f"spiderman:{root.resolve()}" if installed else ""),
            gold_error=err, position=pos,
            extra={"missing_tables": lacking} if lacking else {})


class SpidermanLoader:
    """``DatasetLoader`` for the ``spiderman`` layout (``datasets.registry.LOADERS``).

    Config keys: ``root`` (the ``spiderman`` folder, required), ``limit``, ``db_ids``, and the
    options ``spider_dev`` (Spider's ``dev.json``: ids = ``dev.json`` indices, see
    :func:`dev_positions`; strongly recommended, else ids are CSV row indices), ``install``
    (default true: each source names its installer, run by the replication stage with the
    run's ``engines.mysql``; false: the databases are installed already),
    ``missing_table_policy`` (default ``questions``, module doc). ``name`` replaces ``"spiderman"`` as the
    stored dataset name. Every example carries ``extra["dataset_size"]`` (1,034 for the full
    file) so ``lines``/``csv`` prediction files align by position.

    Raises:
        DatasetError: root missing.
    """

    layout = "spiderman"

    def load(self, cfg) -> list[Example]:
        """Examples in ``test_queries.csv`` order (after ``db_ids``/``limit``)."""
        import dataclasses

        from polysql_ray.datasets.base import as_config, select

        c = as_config(cfg)
        root = c.root_path()
        opts = c.options
        installed = bool(opts.get("install", True))
        exs = list(load_spiderman(root, opts.get("missing_table_policy", "questions"),
                                  installed=installed, spider_dev=opts.get("spider_dev")))
        out = []
        for e in exs:
            db = dataclasses.replace(e.database, dataset=c.name)
            out.append(dataclasses.replace(e, dataset=c.name, database=db,
                                           extra={**e.extra, "dataset_size": len(exs)}))
        return select(c, out)

    def sources(self, cfg) -> list[SourceDatabase]:
        """Distinct source databases (MySQL database names) of ``load(cfg)``."""
        from polysql_ray.datasets.base import distinct_sources

        return distinct_sources(self.load(cfg))
