"""Generic JSON-lines layout: one question per line.

Each line is an object with ``db_id``, ``question``, the gold SQL under ``gold_sql`` (or
``query`` / ``SQL``), and optionally ``question_id`` (else the 0-based position among the
non-blank lines), ``evidence``, ``gold_dialect`` / ``source_engine`` (default: the config's,
``sqlite``) and ``db_path`` (a database file, relative to the JSONL file's folder). Without
``db_path`` the database is found under ``db_dir`` (alias ``db_root``, default ``database``)
with the Spider layout ``<db_dir>/<db_id>/<db_id>.sqlite``. Any other keys go to
``Example.extra`` (e.g. the quickstart's ``tags`` and ``order_keys``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from polysql_ray.datasets.base import (
    FILE_ENGINES,
    DatasetError,
    as_config,
    check_name,
    check_unique_ids,
    distinct_sources,
    file_source,
    missing_db_message,
    read_jsonl,
    require_str,
    select,
)
from polysql_ray.datasets.example import Example, SourceDatabase

GOLD_KEYS = ("gold_sql", "query", "SQL")
_KNOWN = {"question_id", "db_id", "question", "evidence", "gold_dialect", "source_engine", "db_path", *GOLD_KEYS}


class JsonlLoader:
    """Loader for the ``jsonl`` layout. Config keys: ``file`` (default
    ``questions.jsonl``, relative to ``root`` unless absolute), ``root`` (optional when
    ``file`` is absolute), ``db_dir``/``db_root`` (default ``database``), ``limit``,
    ``db_ids``, ``source_engine``/``gold_dialect`` (defaults for rows without them)."""

    layout = "jsonl"
    default_file = "questions.jsonl"
    default_db_dir = "database"

    def _paths(self, c) -> tuple[Path, Path]:
        file = Path(c.file or self.default_file).expanduser()
        if not file.is_absolute():
            file = c.root_path() / file
        base = Path(c.root).expanduser() if c.root else file.parent
        db_dir = Path(c.db_dir or self.default_db_dir).expanduser()
        return file, (db_dir if db_dir.is_absolute() else base / db_dir)

    def load(self, cfg: Any) -> list[Example]:
        """Examples in file order; raises DatasetError on malformed input."""
        c = as_config(cfg)
        path, db_root = self._paths(c)
        rows = read_jsonl(path)
        sources: dict[tuple[str, str, str], SourceDatabase] = {}
        out: list[Example] = []
        for pos, (lineno, rec) in enumerate(rows):
            where = f"{path}, line {lineno}"
            db_id = require_str(rec, ("db_id",), where)
            if not db_id:
                raise DatasetError(f"{where}: 'db_id' is empty")
            check_name(db_id, f"{where}: db_id", "a db_id names one database folder; use db_path for a file elsewhere")
            engine = require_str(rec, ("source_engine",), where, optional=True) or c.source_engine
            db_path = require_str(rec, ("db_path",), where, optional=True)
            key = (engine, db_id, db_path or "")
            src = sources.get(key)
            if src is None:
                if db_path is not None and engine in FILE_ENGINES:
                    p = Path(db_path).expanduser()
                    p = (p if p.is_absolute() else path.parent / p).resolve()
                    src = SourceDatabase(dataset=c.name, db_id=db_id, engine=engine, location=str(p), exists=p.is_file())
                else:
                    src = file_source(c.name, db_id, engine, db_root)
                sources[key] = src
            extra = {k: v for k, v in rec.items() if k not in _KNOWN}
            extra["dataset_size"] = len(rows)
            out.append(Example(
                dataset=c.name,
                question_id=require_str(rec, ("question_id",), where, optional=True, allow_int=True) or str(pos),
                db_id=db_id,
                question=require_str(rec, ("question",), where),
                evidence=require_str(rec, ("evidence",), where, optional=True) or "",
                gold_sql=require_str(rec, GOLD_KEYS, where),
                gold_dialect=require_str(rec, ("gold_dialect",), where, optional=True) or c.gold_dialect,
                source_engine=engine,
                database=src,
                gold_error=missing_db_message(src),
                position=pos,
                extra=extra,
            ))
        check_unique_ids(out, path)
        return select(c, out)

    def sources(self, cfg: Any) -> list[SourceDatabase]:
        """Distinct source databases of the selected examples."""
        return distinct_sources(self.load(cfg))
