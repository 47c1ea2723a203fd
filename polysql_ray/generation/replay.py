"""Replay generator: predicted SQL read from a file instead of a model.

Two formats (``format: auto`` picks JSONL for a ``.jsonl`` file or when the first non-blank
line starts with ``{``):

* ``lines`` -- one SQL per line in dataset order (the Spider/BIRD submission format, e.g.
  ``../shared/data/predictions/spider_dev/*.sql``). Line ``i`` answers the example at
  ``Example.position == i``. Real files are messy: CRLF line ends, a missing final newline,
  lower-case keywords, a trailing ``;`` and sometimes a trailing ``<TAB><db_id>`` (the
  ``dev_gold.sql`` format). Line ends and surrounding whitespace are stripped, a trailing
  ``\\t<db_id>`` is dropped when it equals the example's db_id, and trailing ``;`` are
  dropped (``strip_semicolon``, default true, consistent with
  :mod:`polysql_ray.generation.extraction`: engines take one statement without terminator).
  The SQL text is otherwise kept as is (tabs inside it included). An empty line gives
  ``GenStatus.NO_SQL``.
* ``jsonl`` -- one object per line: ``question_id`` plus ``pred_sql`` | ``sql`` |
  ``predicted_sql``; optional ``dialect`` (a row with a dialect only answers that dialect,
  one without answers every dialect) and optional ``instruction_level`` (same rule). Other
  keys are ignored. A null/empty SQL gives ``NO_SQL``.

Counts: a ``lines`` file must have exactly as many lines as the dataset has examples
(``Example.extra["dataset_size"]`` set by the loaders, else ``len(examples)``); a JSONL file
must answer every example. Otherwise :class:`ReplayError` names the file and both counts,
unless ``allow_partial`` is set, in which case unanswered examples get ``GenStatus.MISSING``.

The fingerprint is ``replay-v1:`` + sha256 of the file bytes and the parsing options, so an
edited prediction file is rescored and an unchanged one is not.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from polysql_ray.datasets.example import Example
from polysql_ray.generation.base import GenStatus, Prediction

SQL_KEYS = ("pred_sql", "sql", "predicted_sql")
FORMATS = ("auto", "lines", "jsonl")


class ReplayError(ValueError):
    """A prediction file that cannot be aligned with the dataset (wrong count, bad JSON,
    duplicate or missing ids). The message names the file and what to fix."""


@dataclass(frozen=True)
class _Row:
    sql: str | None
    raw: str
    where: str


class ReplayGenerator:
    """Replays a prediction file (see module docstring for formats and rules).

    Args:
        model: model name as stored with every score.
        predictions: path of the prediction file, or ``pkg:<package>/<path>`` (see
            :func:`resolve_path`).
        format: ``auto`` | ``lines`` | ``jsonl``.
        allow_partial: unanswered examples become MISSING instead of an error.
        strip_semicolon: drop trailing ``;`` from each SQL.
        encoding: file encoding (a UTF-8 BOM is always skipped).

    Raises:
        ReplayError: file missing or (JSONL) malformed, at construction.
    """

    def __init__(self, model: str, predictions: str | Path, *, format: str = "auto",
                 allow_partial: bool = False, strip_semicolon: bool = True, encoding: str = "utf-8"):
        if format not in FORMATS:
            raise ReplayError(f"replay format must be one of {FORMATS}, got {format!r}")
        self.model = model
        self.path = resolve_path(predictions)
        if not self.path.is_file():
            what = "is a folder, not a file" if self.path.is_dir() else "does not exist"
            raise ReplayError(f"prediction file {self.path} for model {model!r} {what}")
        self.allow_partial = bool(allow_partial)
        self.strip_semicolon = bool(strip_semicolon)
        data = self.path.read_bytes()
        try:
            text = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise ReplayError(f"prediction file {self.path} for model {model!r} is not {encoding} text "
                              f"(byte {exc.start}: {data[exc.start:exc.start + 1]!r}; a binary file?); "
                              f"give a .sql/.txt file with one query per line or a .jsonl file") from None
        if "\x00" in text:
            raise ReplayError(f"prediction file {self.path} for model {model!r} contains NUL bytes "
                              f"(offset {text.index(chr(0))}; a binary file?); give a text file")
        if text.startswith("\ufeff"):
            text = text[1:]
        self.format = format if format != "auto" else _sniff(text, self.path)
        if format == "lines" and next((ln.strip() for ln in text.split("\n") if ln.strip()), "").startswith("{"):
            # no SQL statement starts with "{": as lines every answer would be a JSON text (EX 0)
            raise ReplayError(f"prediction file {self.path} for model {model!r} is JSONL (its first line is "
                              f"a JSON object) but model.format=lines: set model.format=jsonl or auto")
        opts = json.dumps({"format": self.format, "strip_semicolon": self.strip_semicolon,
                           "allow_partial": self.allow_partial}, sort_keys=True)
        self._fingerprint = "replay-v1:" + hashlib.sha256(data + b"\0" + opts.encode()).hexdigest()
        if self.format == "lines":
            self._lines = _split_lines(text)
        else:
            self._rows = _parse_jsonl(text, self.path)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "ReplayGenerator":
        """From a model config: ``{name, generator: replay, predictions, format?,
        allow_partial?, strip_semicolon?, encoding?}``."""
        if not cfg.get("predictions") or str(cfg["predictions"]) == "???":  # "???": Hydra's unset value
            raise ReplayError(f"model {cfg.get('name')!r}: generator 'replay' needs a prediction file: "
                              f"set model.predictions=PATH (one SQL per line, or JSONL)")
        return cls(str(cfg["name"]), str(cfg["predictions"]), format=cfg.get("format", "auto"),
                   allow_partial=bool(cfg.get("allow_partial", False)),
                   strip_semicolon=bool(cfg.get("strip_semicolon", True)),
                   encoding=cfg.get("encoding", "utf-8"))

    def fingerprint(self) -> str:
        """sha256 of the file bytes and parsing options (``replay-v1:<hex>``)."""
        return self._fingerprint

    @property
    def n_predictions(self) -> int:
        """Number of lines (``lines``) or rows (``jsonl``) in the file."""
        return len(self._lines) if self.format == "lines" else len(self._rows)

    def generate(self, examples: Sequence[Example], dialect: str, instruction_level: str) -> list[Prediction]:
        """One Prediction per example, same order. ``dialect``/``instruction_level`` only
        select JSONL rows that carry them; a ``lines`` file answers every dialect.

        Raises:
            ReplayError: count mismatch or unanswered examples without ``allow_partial``.
        """
        if self.format == "lines":
            rows = self._align_lines(examples)
        else:
            rows = self._align_jsonl(examples, dialect, instruction_level)
        return [self._prediction(e, r) for e, r in zip(examples, rows)]

    def check(self, examples: Sequence[Example], dialects: Sequence[str]) -> None:
        """The count checks of :meth:`generate` for ``examples`` on each of ``dialects``, run
        when the grid is built: a file out of line with its dataset is one line before any
        cluster starts or anything is replicated. Raises :class:`ReplayError` like ``generate``."""
        if self.format == "lines":
            self._align_lines(examples)
            expected = _dataset_size(examples)
            if len(self._lines) < expected:  # allow_partial (else _align_lines raised)
                print(f"polysql_ray: warning: {self.path} has {len(self._lines)} lines for {expected} "
                      f"examples: line i answers example i, the last {expected - len(self._lines)} are "
                      "scored 'missing' (model.allow_partial); a line missing in the middle would shift "
                      "every later answer", file=sys.stderr)
        else:
            for d in dialects:
                self._align_jsonl(examples, d, "-")

    # -- alignment -------------------------------------------------------------------
    def _align_lines(self, examples: Sequence[Example]) -> list[_Row | None]:
        n = len(self._lines)
        expected = _dataset_size(examples)
        if n > expected and not any(line.strip() for line in self._lines[expected:]):
            n = expected  # blank lines at the end of the file answer nothing
        if n > expected:  # allow_partial covers missing answers, never a file out of line
            raise ReplayError(
                f"prediction file {self.path} has {n} lines but the dataset has {expected} examples; "
                f"one SQL per line in dataset order is required: line {expected + 1} on has no "
                "question to answer (is the file for another dataset or split?)")
        dbs = {e.db_id for e in examples}
        for e in examples:  # a "<SQL>\t<db_id>" line of another question: out of line
            raw = self._lines[e.position] if e.position < n else ""
            tail = raw.rpartition("\t")[2].strip() if "\t" in raw else None
            if tail in dbs and tail != e.db_id:
                raise ReplayError(
                    f"{self.path}, line {e.position + 1} names database {tail!r} but example "
                    f"{e.question_id!r} is on {e.db_id!r}: the file is out of line with the dataset "
                    "(a line missing or added above it?)")
        if n != expected and not self.allow_partial:
            raise ReplayError(
                f"prediction file {self.path} has {n} lines but the dataset has {expected} examples; "
                "one SQL per line in dataset order is required. A file cut short: "
                f"model.allow_partial=true scores the examples after line {n} as 'missing'; a line "
                "missing elsewhere would shift every later answer (JSONL with question_id cannot)")
        out: list[_Row | None] = []
        for e in examples:
            if e.position < n:
                raw = self._lines[e.position]
                out.append(_Row(_clean_line(raw, e.db_id), raw, f"{self.path}, line {e.position + 1}"))
            else:
                out.append(None)
        return out

    def _align_jsonl(self, examples: Sequence[Example], dialect: str, level: str) -> list[_Row | None]:
        index: dict[str, tuple[int, _Row]] = {}   # qid -> (specificity, row)
        for qid, row_dialect, row_level, row in self._rows:
            if row_dialect not in (None, dialect) or row_level not in (None, level):
                continue
            spec = (row_dialect is not None) + (row_level is not None)
            if qid in index and index[qid][0] == spec:
                raise ReplayError(f"{row.where}: second prediction for question_id {qid!r} "
                                  f"(dialect {dialect}, level {level}); keep one row per question")
            if qid not in index or index[qid][0] < spec:
                index[qid] = (spec, row)
        out = [index[e.question_id][1] if e.question_id in index else None for e in examples]
        missing = [e.question_id for e, r in zip(examples, out) if r is None]
        if (examples and len(missing) == len(examples) and self._rows
                and not {e.question_id for e in examples} & {q for q, *_ in self._rows}):
            # allow_partial covers a file that answers some questions, never one that answers
            # none: its question_ids are of another dataset, split or naming scheme
            sample = sorted({str(q) for q, *_ in self._rows})[:3]
            raise ReplayError(
                f"prediction file {self.path} answers none of the {len(examples)} examples: its "
                f"question_ids (e.g. {sample}) match none of the dataset's "
                f"(e.g. {[e.question_id for e in examples[:3]]}); is the file for another dataset or split?")
        if missing and not self.allow_partial:
            raise ReplayError(
                f"prediction file {self.path} answers {len(examples) - len(missing)} of {len(examples)} "
                f"examples for dialect {dialect!r}; missing question_ids: {missing[:10]}"
                f"{' ...' if len(missing) > 10 else ''} (set model.allow_partial=true to score them as 'missing')")
        return out

    def _prediction(self, e: Example, row: _Row | None) -> Prediction:
        if row is None:
            return Prediction(e.question_id, "", GenStatus.MISSING, "", f"{self.path} has no prediction for question_id {e.question_id!r}")
        sql = row.sql or ""
        if self.strip_semicolon:
            sql = sql.rstrip().rstrip(";").rstrip()
        if not sql:
            return Prediction(e.question_id, "", GenStatus.NO_SQL, row.raw, f"{row.where}: empty prediction")
        return Prediction(e.question_id, sql, GenStatus.OK, row.raw)


# --------------------------------------------------------------------------- parsing


def resolve_path(predictions: str | Path) -> Path:
    """A filesystem path, or ``pkg:<package>/<relative path>`` for a file shipped inside a
    Python package (``pkg:polysql_ray.quickstart/data/rewritten.jsonl``), so configs can name
    the quickstart predictions without knowing where the package is installed."""
    s = str(predictions)
    if s.startswith("pkg:"):
        from importlib import resources

        pkg, _, rel = s[4:].partition("/")
        return Path(str(resources.files(pkg).joinpath(rel)))
    return Path(s).expanduser()


def _sniff(text: str, path: Path) -> str:
    """``jsonl`` for a ``.jsonl`` file or when the first non-blank line starts with ``{`` (no
    SQL statement does), else ``lines``. A broken JSON line is then reported with its number
    (:func:`_parse_jsonl`) instead of the whole file being scored as one SQL per line."""
    if path.suffix == ".jsonl":
        return "jsonl"
    for line in text.split("\n"):
        if line.strip():
            return "jsonl" if line.strip().startswith("{") else "lines"
    return "lines"


def _split_lines(text: str) -> list[str]:
    """Split on ``\\n`` only (not ``str.splitlines``, which also splits on form feeds and
    Unicode separators that may sit inside SQL strings); ``\\r`` ends are removed; a final
    newline does not start an extra line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _dataset_size(examples: Sequence[Example]) -> int:
    """Examples of the whole dataset (``extra["dataset_size"]``; the run may hold a subset):
    the lines a ``lines`` file must have, one per example in dataset order."""
    return max((int(e.extra.get("dataset_size", 0) or 0) for e in examples), default=0) or len(examples)


def _clean_line(line: str, db_id: str) -> str:
    """Strip surrounding whitespace and a trailing ``<TAB><db_id>`` equal to ``db_id``."""
    head, tab, tail = line.rpartition("\t")
    if tab and tail.strip() == db_id:
        line = head
    return line.strip()


def _parse_jsonl(text: str, path: Path) -> list[tuple[str, str | None, str | None, _Row]]:
    rows = []
    for lineno, line in enumerate(_split_lines(text), 1):
        if not line.strip():
            continue
        where = f"{path}, line {lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ReplayError(f"{where}: invalid JSON ({e.msg} at column {e.colno}); each line must be one JSON object") from None
        if not isinstance(obj, dict):
            raise ReplayError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        qid = obj.get("question_id")
        if isinstance(qid, bool) or not isinstance(qid, (str, int)):
            raise ReplayError(f"{where}: 'question_id' missing or not a string/integer (got {qid!r})")
        key = next((k for k in SQL_KEYS if k in obj), None)
        if key is None:
            raise ReplayError(f"{where}: no predicted SQL: add one of {', '.join(SQL_KEYS)}")
        sql = obj[key]
        if sql is not None and not isinstance(sql, str):
            raise ReplayError(f"{where}: '{key}' must be a string or null, got {type(sql).__name__}")
        rows.append((str(qid), obj.get("dialect"), obj.get("instruction_level"),
                     _Row(sql.strip() if sql else None, sql or "", where)))
    return rows
