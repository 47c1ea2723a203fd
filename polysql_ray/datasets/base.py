"""Shared pieces of the dataset loaders: the loader protocol, the config record, errors.

Every layout (``spider``, ``bird``, ``jsonl``, ``quickstart``) is one module with one loader
class implementing :class:`DatasetLoader`. :mod:`polysql_ray.datasets.registry` maps the
layout name to the class; callers use :func:`polysql_ray.datasets.registry.load_dataset`.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

import polysql_ray.resolvers  # noqa: F401 - ${local_dir:} and ${repo_root:} in dataset configs
from polysql_ray.datasets.example import Example, SourceDatabase
from polysql_ray.engines.declaration import DeclaredTable

log = logging.getLogger(__name__)

#: Source engines whose databases are files, and the file suffix of each
#: (``<db_root>/<db_id>/<db_id><suffix>``, the Spider/BIRD layout): each engine class
#: declares ``source_suffix`` (``engines/<name>.py``).
FILE_ENGINES: Mapping[str, str] = DeclaredTable(lambda cls: cls.source_suffix)

#: Server engines whose source may come as a dump file the project loads -> file suffix
#: (declared as ``source_dump_suffix``).
DUMP_SUFFIX: Mapping[str, str] = DeclaredTable(lambda cls: cls.source_dump_suffix)


class DatasetError(ValueError):
    """Malformed or missing dataset input. The message names the file, the line/record and
    what to fix; it is meant to be shown to the user as is."""


def name_problem(name: object) -> str | None:
    """Why ``name`` (a dataset name, model name or ``db_id``) cannot name one folder, or None.

    Such names become folder names (``scores/<dataset>/<model>/``,
    ``<db_root>/<db_id>/<db_id>.sqlite``, ``replicas/<engine>/<dataset>/<db_id>/``), so a name
    must be non-empty text without ``/``, ``\\``, NUL or control characters, and not ``.`` or
    ``..``: it never leaves its folder."""
    if not isinstance(name, str) or not name.strip():
        return "it is empty"
    if set(name) <= {"."}:
        return "it is made of dots only"
    bad = sorted({c for c in name if c in "/\\" or ord(c) < 32 or ord(c) == 127})
    if bad:
        return f"it contains {', '.join(repr(c) for c in bad)}"
    return None


def check_name(name: object, what: str, fix: str) -> str:
    """``name`` when :func:`name_problem` finds nothing; else DatasetError naming ``what``
    (``"dataset.name"``, ``"db_id of line 3 of q.jsonl"``) and ``fix``."""
    problem = name_problem(name)
    if problem is not None:
        raise DatasetError(f"{what}={name!r} cannot name a folder ({problem}): {fix}")
    return name  # type: ignore[return-value]


@dataclass(frozen=True)
class DatasetConfig:
    """One dataset's configuration (the ``dataset`` Hydra group, see ``conf/dataset/*.yaml``).

    Attributes:
        name: dataset name as stored with every score (``spider``, ``bird`` ...).
        layout: loader name (``spider`` | ``bird`` | ``jsonl`` | ``quickstart``).
        root: dataset folder; relative ``file``/``db_dir`` are resolved against it.
        file: question file inside ``root`` (``dev.json``; for jsonl ``questions.jsonl``);
            an absolute path is used as is.
        db_dir: folder holding ``<db_id>/<db_id>.sqlite`` (``database`` for Spider,
            ``dev_databases`` for BIRD); relative to ``root``. ``db_root`` is an alias.
        split: free-text split label (``dev``), kept for reports.
        limit: keep only the first ``limit`` examples (after the ``db_ids`` filter).
        db_ids: keep only examples on these databases.
        source_engine: engine of the source databases (default ``sqlite``).
        gold_dialect: sqlglot dialect of the gold SQL (default ``sqlite``).
        options: any other keys of the config mapping (ignored by the loaders, logged).
    """

    name: str
    layout: str
    root: str | None = None
    file: str | None = None
    db_dir: str | None = None
    split: str = "dev"
    limit: int | None = None
    db_ids: tuple[str, ...] | None = None
    source_engine: str = "sqlite"
    gold_dialect: str = "sqlite"
    options: dict = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, cfg: Any) -> "DatasetConfig":
        """Build from a dict or an OmegaConf node (interpolations resolved).

        Raises:
            DatasetError: missing ``name``/``layout``, or a key of the wrong type.
        """
        data = _to_dict(cfg)
        if "db_root" in data and "db_dir" not in data:
            data["db_dir"] = data.pop("db_root")
        known = {f.name for f in fields(cls)} - {"options"}
        kwargs = {k: v for k, v in data.items() if k in known}
        options = {k: v for k, v in data.items() if k not in known}
        for req in ("name", "layout"):
            if not kwargs.get(req):
                raise DatasetError(f"dataset config {data!r} has no '{req}': add e.g. {req}: spider")
        check_name(kwargs["name"], "dataset.name", "use letters, digits, '_', '-' or '.' (e.g. dataset.name=spider)")
        if kwargs.get("limit") is not None:
            lim = kwargs["limit"]
            if isinstance(lim, bool) or not isinstance(lim, int) or lim < 1:
                raise DatasetError(f"dataset config '{kwargs['name']}': limit must be a positive integer or null "
                                   f"(null: every question), got {lim!r}")
        if kwargs.get("db_ids") is not None:
            ids = kwargs["db_ids"]
            if isinstance(ids, str):
                ids = [ids]
            if not all(isinstance(i, str) for i in ids):
                raise DatasetError(f"dataset config '{kwargs['name']}': db_ids must be a list of strings, got {ids!r}")
            kwargs["db_ids"] = tuple(ids)
        for key in ("root", "file", "db_dir"):
            if kwargs.get(key) is not None:
                kwargs[key] = str(kwargs[key])
        if options:
            log.debug("dataset %s: keys not used by the loader: %s", kwargs["name"], sorted(options))
        return cls(options=options, **kwargs)

    def root_path(self) -> Path:
        """``root`` as a Path; raises DatasetError when unset or absent."""
        if not self.root:
            raise DatasetError(f"dataset '{self.name}' (layout {self.layout}) has no 'root': set dataset.root to the dataset folder")
        p = Path(self.root).expanduser()
        if not p.is_dir():
            raise DatasetError(f"dataset '{self.name}': root folder {p} does not exist (set dataset.root, or POLYSQL_SHARED / paths.shared for the shared data)")
        return p

    def resolve(self, value: str | None, default: str) -> Path:
        """``value`` (or ``default``) resolved against ``root`` unless absolute."""
        p = Path(value or default).expanduser()
        if p.is_absolute():
            return p
        return self.root_path() / p


def _to_dict(cfg: Any) -> dict:
    """A plain dict from a Mapping or an OmegaConf DictConfig (interpolations resolved)."""
    if isinstance(cfg, DatasetConfig):
        raise TypeError("already a DatasetConfig")
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(cfg, DictConfig):
        try:
            return dict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))  # type: ignore[arg-type]
        except OmegaConfBaseException as e:
            raise DatasetError(f"dataset config cannot be resolved: {e} (set the missing value, "
                               "e.g. dataset.root=/path/to/data)") from None
    if isinstance(cfg, Mapping):
        return dict(cfg)
    raise DatasetError(f"dataset config must be a mapping, got {type(cfg).__name__}: {cfg!r}")


def as_config(cfg: Any) -> DatasetConfig:
    """Accept a DatasetConfig, a dict or an OmegaConf node."""
    return cfg if isinstance(cfg, DatasetConfig) else DatasetConfig.from_mapping(cfg)


class DatasetLoader(Protocol):
    """One dataset layout.

    ``load`` returns every selected example in file order; ``sources`` the distinct source
    databases those examples use (first-appearance order, missing ones with
    ``exists=False``), which is what replication must copy. Both raise
    :class:`DatasetError` on malformed input, never a bare KeyError/JSONDecodeError.
    """

    layout: str

    def load(self, cfg: Any) -> list[Example]:
        """Examples of the dataset described by ``cfg`` (a DatasetConfig or mapping)."""
        ...

    def sources(self, cfg: Any) -> list[SourceDatabase]:
        """Distinct source databases of ``load(cfg)``."""
        ...


# --------------------------------------------------------------------------- helpers


def read_json_array(path: Path) -> list:
    """Parse a JSON file holding a top-level array.

    Raises:
        DatasetError: file missing, empty, not JSON (message has line and column), or not
            an array.
    """
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    text = path.read_text(encoding="utf-8-sig")
    if not text.strip():
        raise DatasetError(f"dataset file {path} is empty: expected a JSON array of question records")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON array of question records at top level, got {type(data).__name__}")
    if not data:
        raise DatasetError(f"dataset file {path} holds an empty array: no questions")
    return data


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """Parse a JSON-lines file into ``(line_number, object)`` pairs (1-based line numbers);
    blank lines are skipped.

    Raises:
        DatasetError: file missing or empty, a line that is not JSON or not an object.
    """
    if not path.is_file():
        raise DatasetError(f"dataset file {path} does not exist")
    rows: list[tuple[int, dict]] = []
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}, line {lineno}: invalid JSON ({e.msg}, column {e.colno}); each line must be one JSON object") from None
            if not isinstance(obj, dict):
                raise DatasetError(f"{path}, line {lineno}: expected a JSON object, got {type(obj).__name__}")
            rows.append((lineno, obj))
    if not rows:
        raise DatasetError(f"dataset file {path} is empty: expected one JSON object per line")
    return rows


def require_str(rec: Mapping, keys: Sequence[str], where: str, *, optional: bool = False, allow_int: bool = False) -> str | None:
    """The first of ``keys`` present in ``rec`` as a string.

    Args:
        rec: one question record.
        keys: accepted key names, in preference order (``("gold_sql", "query", "SQL")``).
        where: ``"<file>, record 12"`` for the message.
        optional: return None instead of raising when no key is present (or it is null).
        allow_int: accept an integer (converted to str), for ids.

    Raises:
        DatasetError: key missing (unless optional) or of the wrong type.
    """
    for k in keys:
        if k in rec and rec[k] is not None:
            v = rec[k]
            if allow_int and isinstance(v, int) and not isinstance(v, bool):
                return str(v)
            if not isinstance(v, str):
                raise DatasetError(f"{where}: '{k}' must be a string, got {type(v).__name__} {v!r}")
            return v
    if optional:
        return None
    names = " or ".join(f"'{k}'" for k in keys)
    raise DatasetError(f"{where}: missing required key {names} (record keys: {sorted(rec)})")


def file_source(dataset: str, db_id: str, engine: str, db_root: Path) -> SourceDatabase:
    """SourceDatabase for ``<db_root>/<db_id>/<db_id><suffix>`` (Spider/BIRD layout).

    Server engines: a PostgreSQL source with a plain-SQL ``pg_dump`` file at
    ``<db_root>/<db_id>/<db_id>.sql`` is installed by the replication stage as the database
    ``pq_src_<dataset>_<db_id>`` (its schema ``public`` read: location ``<database>/public``;
    ``replication.postgres_source.install_dump``); otherwise the
    database (MySQL) or schema (PostgreSQL) named ``db_id`` is read as it is on the server.
    """
    check_name(db_id, f"db_id of dataset {dataset}", "a db_id names one database folder under the "
               "dataset's db_dir; fix the question file")
    suffix = FILE_ENGINES.get(engine)
    if suffix is None:  # a server engine
        dump = (db_root / db_id / f"{db_id}{DUMP_SUFFIX.get(engine, '')}").resolve()
        if engine in DUMP_SUFFIX and dump.is_file():
            from polysql_ray.engines.servers import replica_name

            return SourceDatabase(dataset=dataset, db_id=db_id, engine=engine,
                                  location=replica_name("src_" + dataset, db_id) + "/public",
                                  exists=True, install=f"pg_dump:{dump}")
        return SourceDatabase(dataset=dataset, db_id=db_id, engine=engine, location=db_id, exists=True)
    path = (db_root / db_id / f"{db_id}{suffix}").resolve()
    return SourceDatabase(dataset=dataset, db_id=db_id, engine=engine, location=str(path), exists=path.is_file())


#: How a source file of each file engine begins: ``engine -> (offset, magic bytes)`` (SQLite:
#: https://www.sqlite.org/fileformat.html section 1.3, "SQLite format 3\\000"; DuckDB: the
#: main header's magic ``DUCK`` after its 8-byte checksum, https://duckdb.org/docs/internals/storage).
SOURCE_MAGIC: Mapping[str, tuple[int, bytes]] = {"sqlite": (0, b"SQLite format 3\x00"), "duckdb": (8, b"DUCK")}


def source_file_problem(src: SourceDatabase) -> str | None:
    """Why the existing source file of ``src`` cannot be a database of its engine (empty,
    unreadable, another kind of file), or None (also for server sources and missing files,
    which :func:`missing_db_message` covers). Reads the first bytes only."""
    magic = SOURCE_MAGIC.get(src.engine)
    if magic is None or not src.exists or src.install:
        return None
    offset, want = magic
    try:
        with open(src.location, "rb") as fh:
            head = fh.read(offset + len(want))
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not head:
        return "it is empty (0 bytes)"
    if head[offset:offset + len(want)] != want:
        return f"it is not a {src.engine} database (its first bytes are {head[:16]!r})"
    return None


def check_sources(examples: Sequence[Example]) -> None:
    """Refuse, before any work, a dataset whose selected questions use a source file that
    exists but is no database (:func:`source_file_problem`): one line naming the file and the
    db_id, instead of a gold error stored for each of its questions. Raises DatasetError."""
    seen: set[tuple[str, str]] = set()
    for e in examples:
        src = e.database
        if (src.engine, src.location) in seen:
            continue
        seen.add((src.engine, src.location))
        problem = source_file_problem(src)
        if problem is not None:
            raise DatasetError(f"source database of db_id {src.db_id!r} (dataset {src.dataset}) is {src.location}, "
                               f"but {problem}: put the {src.engine} database file there, or leave its "
                               f"questions out with dataset.db_ids")


def missing_db_message(src: SourceDatabase) -> str | None:
    """The Example.gold_error for a missing source database, None when it exists."""
    if src.exists:
        return None
    return (f"source database for db_id '{src.db_id}' is missing: expected {src.engine} file "
            f"{src.location} (dataset {src.dataset}); the gold SQL cannot run")


def select(cfg: DatasetConfig, examples: Iterable[Example]) -> list[Example]:
    """Apply the ``db_ids`` filter, then ``limit`` (positions are kept as in the file)."""
    out = [e for e in examples if cfg.db_ids is None or e.db_id in cfg.db_ids]
    if cfg.db_ids is not None:
        unknown = set(cfg.db_ids) - {e.db_id for e in out}
        if unknown:
            raise DatasetError(f"dataset '{cfg.name}': db_ids {sorted(unknown)} match no question; check dataset.db_ids")
    if cfg.limit is not None:
        out = out[: cfg.limit]
    return out


def distinct_sources(examples: Iterable[Example]) -> list[SourceDatabase]:
    """Distinct ``Example.database`` values in first-appearance order."""
    seen: dict[tuple[str, str], SourceDatabase] = {}
    for e in examples:
        seen.setdefault((e.database.engine, e.database.db_id), e.database)
    return list(seen.values())


def check_unique_ids(examples: Sequence[Example], path: Path) -> None:
    """Raise DatasetError naming the first duplicated question_id."""
    seen: dict[str, int] = {}
    for e in examples:
        if e.question_id in seen:
            raise DatasetError(f"{path}: question_id {e.question_id!r} appears twice (records {seen[e.question_id]} and {e.position}); ids must be unique")
        seen[e.question_id] = e.position
