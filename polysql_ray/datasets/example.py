"""The one record every dataset loader yields.

An :class:`Example` is one question of a text-to-SQL benchmark together with where its
source database lives and the gold SQL that answers it on that source engine.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SourceDatabase:
    """Where a dataset's database lives on its *source* engine.

    Attributes:
        dataset: dataset name (``spider``, ``bird``, ``quickstart`` ...).
        db_id: the benchmark's database id (``concert_singer``).
        engine: source engine name (``sqlite`` for Spider/BIRD, ``mysql`` for SpiderMan).
        location: engine-specific locator: an absolute file path for embedded engines,
            a database name for servers.
        exists: False when the file/database is absent (e.g. Spider's ``wta_1``); every
            example on it then carries a gold error instead of crashing the run.
        install: "" for a source that is already where ``location`` says, else what the
            replication stage must install there first, with the run's engine settings
            (``replication.sources.INSTALLERS``: ``spiderman:<root>``, ``pg_dump:<file>``).
            Loaders only read; they never install.
    """

    dataset: str
    db_id: str
    engine: str
    location: str
    exists: bool = True
    install: str = ""


@dataclass(frozen=True)
class Example:
    """One benchmark question.

    Attributes:
        dataset: dataset name.
        question_id: the dataset's own id, else its stable 0-based position (as a string).
        db_id: database id.
        question: natural-language question.
        evidence: BIRD-style hint ("" when the dataset has none).
        gold_sql: gold SQL text, written for ``gold_dialect``.
        gold_dialect: sqlglot dialect name of the gold SQL (``sqlite``, ``mysql`` ...).
        source_engine: engine on which gold SQL runs (the source database's engine).
        database: the source database.
        gold_error: a clear message when the gold cannot run at all (missing database);
            None otherwise.
        position: 0-based position in the dataset file (prediction files are aligned to it).
    """

    dataset: str
    question_id: str
    db_id: str
    question: str
    evidence: str
    gold_sql: str
    gold_dialect: str
    source_engine: str
    database: SourceDatabase
    gold_error: str | None = None
    position: int = 0
    extra: dict = field(default_factory=dict, compare=False, hash=False)
