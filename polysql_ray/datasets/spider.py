"""Spider 1.0 layout: ``<root>/dev.json`` + ``<root>/database/<db_id>/<db_id>.sqlite``.

Source: Yu et al., 2018 (Spider), dev release. Records carry ``db_id``, ``question`` and
``query`` (the gold SQL, SQLite dialect) and no id: ``question_id`` is the record's 0-based
position in ``dev.json`` as a string, which prediction files are aligned to. A missing
database (the shared mirror lacks ``wta_1``) gives every example on it a ``gold_error``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from polysql_ray.datasets.base import (
    DatasetConfig,
    DatasetError,
    as_config,
    distinct_sources,
    file_source,
    missing_db_message,
    read_json_array,
    require_str,
    select,
)
from polysql_ray.datasets.example import Example, SourceDatabase


class SpiderLoader:
    """Loader for the Spider layout (also Spider-derived sets with the same files).

    Config keys: ``root`` (required), ``file`` (default ``dev.json``), ``db_dir`` (default
    ``database``), ``limit``, ``db_ids``.
    """

    layout = "spider"
    default_file = "dev.json"
    default_db_dir = "database"
    gold_keys: tuple[str, ...] = ("query",)
    id_keys: tuple[str, ...] = ()      # Spider has no question id: use the position

    def load(self, cfg: Any) -> list[Example]:
        """Examples in file order; raises DatasetError on malformed input."""
        c = as_config(cfg)
        path = c.resolve(c.file, self.default_file)
        db_root = c.resolve(c.db_dir, self.default_db_dir)
        records = read_json_array(path)
        sources: dict[str, SourceDatabase] = {}
        out: list[Example] = []
        for pos, rec in enumerate(records):
            out.append(self._example(c, path, db_root, pos, rec, sources, len(records)))
        self._check(out, path)
        return select(c, out)

    def sources(self, cfg: Any) -> list[SourceDatabase]:
        """Distinct source databases of the selected examples."""
        return distinct_sources(self.load(cfg))

    # -- per record ------------------------------------------------------------------
    def _example(self, c: DatasetConfig, path: Path, db_root: Path, pos: int, rec: Any,
                 sources: dict[str, SourceDatabase], total: int) -> Example:
        where = f"{path}, record {pos} (0-based)"
        if not isinstance(rec, dict):
            raise DatasetError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        db_id = require_str(rec, ("db_id",), where)
        if not db_id:
            raise DatasetError(f"{where}: 'db_id' is empty")
        qid = require_str(rec, self.id_keys, where, allow_int=True) if self.id_keys else str(pos)
        src = sources.get(db_id)
        if src is None:
            src = sources[db_id] = file_source(c.name, db_id, c.source_engine, db_root)
        known = {"db_id", "question", "evidence", *self.gold_keys, *self.id_keys}
        extra = {k: v for k, v in rec.items() if k not in known and k not in ("query_toks", "query_toks_no_value", "question_toks", "sql")}
        extra["dataset_size"] = total
        return Example(
            dataset=c.name,
            question_id=qid,
            db_id=db_id,
            question=require_str(rec, ("question",), where),
            evidence=require_str(rec, ("evidence",), where, optional=True) or "",
            gold_sql=require_str(rec, self.gold_keys, where),
            gold_dialect=c.gold_dialect,
            source_engine=c.source_engine,
            database=src,
            gold_error=missing_db_message(src),
            position=pos,
            extra=extra,
        )

    def _check(self, examples: list[Example], path: Path) -> None:
        """Layout-specific whole-file checks (none for Spider: ids are positions)."""
