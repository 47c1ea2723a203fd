"""Fuzzing: candidate databases that keep a SQLite source's schema, drawn from its values.

Zhong, Yu and Klein (EMNLP 2020, "Semantic Evaluation for Text-to-SQL with Distilled Test
Suites", section 3.2) fill random databases from each column's observed values and the gold
queries' literals. Here, for candidate ``i`` of source ``db`` under ``seed``:

* the schema is the source's own DDL (``sqlite_master``: tables, then indexes), so declared
  types, primary keys, UNIQUE constraints, NOT NULL and the FOREIGN KEY clauses are kept
  exactly (SQLite enforces PK/UNIQUE/NOT NULL on insert; foreign keys are kept valid by
  construction: a child's key values are copied from a generated parent row);
* each column's domain is its observed distinct values, plus the gold literals compared with
  a column of that name (``x = 5``, ``x > 5``, ``x LIKE '%a%'``, ``IN (...)``, ``BETWEEN``),
  plus boundary values (a numeric literal ``v`` also gives ``v - 1`` and ``v + 1``; the
  observed minimum and maximum; an upper-cased variant of a text literal);
* a row is, with the candidate's ``copy`` probability, a source row (values that keep the
  source's cross-column correlations, a parent key kept when that parent was generated), else
  a draw from a small per-candidate pool of each domain (duplicates and ties), with NULLs at
  the candidate's rate where the column allows them, except in a column a gold reads through
  ``NOT IN (SELECT col ...)`` (:func:`not_in_columns`): one NULL there makes that gold empty
  whatever the question (three-valued logic), so the gold would stop being a valid reference
  and every correct NULL-safe prediction (``LEFT JOIN ... IS NULL``, ``NOT EXISTS``) would
  fail on that database (read on Spider dev: four such items, all right, in version 1);
* no value creates a disagreement between engines that the source lacks
  (:mod:`polysql_ray.suites.portability`, from the engines' declared semantics): no drawn NULL
  in a column a gold orders by (NULL placement differs; a copied source row keeps its own
  NULL with the values it came with, so the gold's filters treat it as on the source), and no
  added value (gold literal, upper-cased variant, LIKE core) equal to another value of its
  column but for case, accents or trailing spaces (MariaDB's ``_ci`` PAD SPACE collations);
  version 2 drew both, and on PostgreSQL and MariaDB the gold's own text failed suite EX there;
* the row count of each table is drawn up to ``min(source rows, max_rows)``.

A value whose stored form would change the replication's type decision for its column
(``replication.typemap``: an INTEGER past 2**31, text in a DATE column ...) is never drawn:
:func:`type_decisions` must be equal on the source and every candidate, which
:func:`generate_candidate` checks (``GenerationError`` otherwise).

Deterministic: the random stream of a candidate is seeded by sha256 of ``(seed, db_id, i)``;
rows are inserted in one order, so the same inputs give byte-identical files on one SQLite
version, and always the same :func:`content_fingerprint` (over the schema text and the typed
values, independent of the SQLite version).
"""
from __future__ import annotations

import hashlib
import os
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from sqlglot import exp

from polysql_ray.datasets.example import SourceDatabase
from polysql_ray.replication.constraints import resolve_foreign_key
from polysql_ray.replication.sqlite_reader import SqliteReader, quote_ident
from polysql_ray.replication.spec import TableSpec
from polysql_ray.replication.typemap import CONFORMS, declared_family
from polysql_ray.suites.portability import Portability, gold_trees, order_key_columns

#: Knobs each candidate draws from (index i picks one of each by its random stream).
COPY_RATES = (0.0, 0.3, 0.6, 0.9)
NULL_RATES = (0.0, 0.1, 0.3)
POOL_SIZES = (2, 3, 5, 1000)  # values per column a candidate draws from (small: ties)


class GenerationError(RuntimeError):
    """A candidate could not be generated faithfully (names the table/column and why)."""


def rng_for(seed: int, db_id: str, index: int) -> random.Random:
    """The random stream of candidate ``index`` of ``db_id`` under ``seed``."""
    digest = hashlib.sha256(f"{seed}\0{db_id}\0{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _typed_key(v) -> tuple:
    """Sort key that orders mixed SQLite values deterministically (NULL < number < text < blob)."""
    if v is None:
        return (0, 0)
    if isinstance(v, (int, float)):
        return (1, v)
    if isinstance(v, str):
        return (2, v)
    return (3, bytes(v))


@dataclass
class Column:
    """One column as the generator sees it."""

    name: str
    declared: str
    not_null: bool
    check: str | None  # key of typemap.CONFORMS the replication decided for it (None: storage)
    domain: list = field(default_factory=list)  # distinct observed + literal + boundary values
    no_drawn_null: bool = False  # a gold orders by it: NULLs only from copied source rows (portability)
    nonconforming: list = field(default_factory=list)  # observed values outside the declared family


@dataclass
class Table:
    """One table: columns, unique column sets, resolved foreign keys, source rows."""

    name: str
    columns: list[Column]
    unique: list[tuple[int, ...]]
    fks: list[tuple[str, list[int], list[str]]]  # (parent table, child col idx, parent col names)
    rows: list[tuple]


@dataclass
class SourceModel:
    """What the generator read from a source database (schema text, tables, domains)."""

    db_id: str
    ddl: list[str]
    tables: list[Table]
    source_hash: str


def literal_values(gold_sqls: list[str], dialect: str = "sqlite") -> dict[str, list]:
    """Column name (lower case) -> literals the gold queries compare it with, plus boundaries.

    A comparison ``col <op> literal`` (=, <>, <, <=, >, >=, LIKE, IN, BETWEEN) gives the literal;
    a numeric literal ``v`` also gives ``v - 1`` and ``v + 1``; a text literal also gives its
    upper-case variant; a LIKE pattern gives its text without the wildcards. Unparsable gold SQL
    gives nothing.
    """
    out: dict[str, list] = {}

    def add(col: str, lit: exp.Literal) -> None:
        vals = out.setdefault(col.lower(), [])
        if lit.is_string:
            s = lit.this
            vals.append(s)
            core = s.strip("%_")
            if core != s:
                vals.append(core)
            if s.upper() != s:
                vals.append(s.upper())
        else:
            try:
                v = int(lit.this)
                vals.extend((v, v - 1, v + 1))
            except ValueError:
                try:
                    f = float(lit.this)
                except ValueError:
                    return
                vals.extend((f, f - 1, f + 1))

    for tree in gold_trees(gold_sqls, dialect):
        for node in tree.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like,
                                  exp.In, exp.Between):
            col = node.this if isinstance(node.this, exp.Column) else None
            others = []
            if isinstance(node, exp.In):
                others = list(node.expressions)
            elif isinstance(node, exp.Between):
                others = [node.args.get("low"), node.args.get("high")]
            else:
                if col is None and isinstance(node.expression, exp.Column):
                    col, others = node.expression, [node.this]
                else:
                    others = [node.expression]
            if col is None:
                continue
            for o in others:
                if isinstance(o, exp.Neg) and isinstance(o.this, exp.Literal):
                    o = exp.Literal.number(f"-{o.this.this}")
                if isinstance(o, exp.Literal):
                    add(col.name, o)
    return out


def not_in_columns(gold_sqls: list[str], dialect: str = "sqlite") -> set[str]:
    """Column names (lower case) a gold projects in a subquery under ``NOT ... IN (SELECT col
    ...)``; generation keeps them free of NULLs (module docstring). Unparsable gold gives
    nothing."""
    out: set[str] = set()
    for tree in gold_trees(gold_sqls, dialect):
        for node in tree.find_all(exp.Not):
            inner = node.this.unnest() if isinstance(node.this, exp.Expression) else None
            query = inner.args.get("query") if isinstance(inner, exp.In) else None
            sub = query.this if isinstance(query, exp.Subquery) else query
            if isinstance(sub, exp.Select) and len(sub.expressions) == 1:
                col = sub.expressions[0].unalias() if isinstance(sub.expressions[0], exp.Alias) else sub.expressions[0]
                if isinstance(col, exp.Column):
                    out.add(col.name.lower())
    return out


class _Stored:
    """What SQLite stores for a value in a column of a declared type (affinity), and whether
    that stored value conforms to a replication type family (``typemap.CONFORMS``)."""

    def __init__(self) -> None:
        self.con = sqlite3.connect(":memory:")
        self.tables: dict[str, str] = {}

    def stored(self, declared: str, value):
        t = self.tables.get(declared)
        if t is None:
            t = self.tables[declared] = f"t{len(self.tables)}"
            self.con.execute(f"CREATE TABLE {t} (v {declared})")
        self.con.execute(f"DELETE FROM {t}")
        self.con.execute(f"INSERT INTO {t} VALUES (?)", (value,))
        return self.con.execute(f"SELECT v FROM {t}").fetchone()[0]

    def conforms(self, check: str | None, length: int | None, value) -> bool:
        if check is None or value is None:
            return True
        pred = CONFORMS[check].format(c="v", n=length)
        return bool(self.con.execute(f"SELECT ({pred}) FROM (SELECT ? AS v)", (value,)).fetchone()[0])


def read_source(path: str | os.PathLike, db_id: str, gold_sqls: list[str] = (),
                portability: Portability | None = None) -> SourceModel:
    """Read the schema, type decisions, unique sets, foreign keys, rows and domains of ``path``.

    ``portability``: the hazards the domains avoid (default: those of every declared engine,
    :meth:`Portability.for_engines`). Raises :class:`GenerationError` when the file is missing
    or unreadable.
    """
    path = str(Path(path).resolve())
    if not os.path.exists(path):
        raise GenerationError(f"source database missing: {path}")
    src = SourceDatabase("suite", db_id, "sqlite", path)
    reader = SqliteReader()
    specs, _ = reader.read_schema(src, types="declared")
    by_name = {t.name: t for t in specs}
    literals = literal_values(list(gold_sqls))
    never_null = not_in_columns(list(gold_sqls))  # columns kept free of NULLs
    portability = portability if portability is not None else Portability.for_engines()
    ordered = order_key_columns(list(gold_sqls)) if portability.order_keys_null_free else set()
    stored = _Stored()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = str
    try:
        ddl = [sql for typ, sql in con.execute(
            "SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 ELSE 2 END, rowid")
            if typ in ("table", "index")]
        tables = [_table(con, spec, by_name, literals, stored, never_null, ordered, portability)
                  for spec in specs]
    finally:
        con.close()
    return SourceModel(db_id, ddl, tables, reader.content_hash(src))


def _table(con: sqlite3.Connection, spec: TableSpec, by_name: dict[str, TableSpec],
           literals: dict[str, list], stored: _Stored, never_null: set[str] = frozenset(),
           ordered: set[str] = frozenset(), portability: Portability = Portability()) -> Table:
    q = quote_ident(spec.name)
    rows = [tuple(r) for r in con.execute(f"SELECT * FROM {q} ORDER BY rowid")] if _has_rowid(con, q) \
        else sorted((tuple(r) for r in con.execute(f"SELECT * FROM {q}")), key=lambda r: [_typed_key(v) for v in r])
    names = [c.name for c in spec.columns]
    cols = []
    for j, c in enumerate(spec.columns):
        fam = declared_family(c.declared_type)
        check = None
        if c.fallback is None and fam is not None:
            check = "VARCHAR(n)" if (fam.check == "VARCHAR" and c.length) else fam.check
        observed = sorted({r[j] for r in rows if r[j] is not None}, key=_typed_key)
        col = Column(c.name, c.declared_type, c.not_null or c.name in spec.primary_key
                     or c.name.lower() in never_null, check)
        # an ORDER BY key gets no drawn NULL (portability: null_order); a copied source row keeps
        # its own, with the values it came with (so a gold's filter keeps it where it was)
        col.no_drawn_null = c.name.lower() in ordered
        col.nonconforming = [v for v in observed if fam is not None and c.fallback is not None
                             and not stored.conforms(fam.check, fam.length, v)]
        extra = list(literals.get(c.name.lower(), []))
        nums = [v for v in observed if isinstance(v, (int, float))]
        if nums:
            extra += [min(nums), max(nums)]
        domain = list(observed)
        seen = set(map(_typed_key, domain))
        folded = {portability.text_key(v) for v in domain if isinstance(v, str)}
        for v in extra:
            sv = stored.stored(c.declared_type, v)
            if sv is None or _typed_key(sv) in seen:
                continue
            if isinstance(sv, str) and portability.text_key(sv) in folded:
                continue  # equal to a value of the column but for case/trailing spaces (portability)
            if c.fallback is None and not stored.conforms(check, c.length, sv):
                continue
            if observed and type(sv) is not type(observed[0]) and not (
                    isinstance(sv, (int, float)) and isinstance(observed[0], (int, float))):
                continue  # a text literal compared with a numeric column (or the reverse)
            domain.append(sv)
            seen.add(_typed_key(sv))
            if isinstance(sv, str):
                folded.add(portability.text_key(sv))
        col.domain = domain
        cols.append(col)
    unique: list[tuple[int, ...]] = []
    if spec.primary_key:
        unique.append(tuple(names.index(n) for n in spec.primary_key))
    for _seq, iname, is_unique, *_ in con.execute(f"PRAGMA index_list({q})"):
        if is_unique:
            icols = [r[2] for r in con.execute(f"PRAGMA index_info({quote_ident(iname)})")]
            if all(n in names for n in icols):
                key = tuple(names.index(n) for n in icols)
                if key not in unique:
                    unique.append(key)
    fks = []
    for fk in spec.foreign_keys:
        _what, parent, pcols, ccols, problem = resolve_foreign_key(spec, fk, by_name)
        if problem is None:
            fks.append((parent, [names.index(c) for c in ccols], pcols))
    return Table(spec.name, cols, unique, fks, rows)


def _has_rowid(con: sqlite3.Connection, q: str) -> bool:
    try:
        con.execute(f"SELECT rowid FROM {q} LIMIT 0")
        return True
    except sqlite3.Error:
        return False


def _order(tables: list[Table]) -> list[Table]:
    """Parents before children (foreign keys); a cycle is broken at the first table left."""
    left = {t.name: t for t in tables}
    out: list[Table] = []
    while left:
        ready = [t for t in left.values() if all(p == t.name or p not in left for p, _, _ in t.fks)]
        nxt = ready[0] if ready else next(iter(left.values()))
        out.append(nxt)
        del left[nxt.name]
    return out


def generate_rows(model: SourceModel, index: int, seed: int, max_rows: int) -> dict[str, list[tuple]]:
    """The rows of candidate ``index`` (table name -> rows, in insertion order); see module doc."""
    rng = rng_for(seed, model.db_id, index)
    copy_rate, null_rate, pool_size = rng.choice(COPY_RATES), rng.choice(NULL_RATES), rng.choice(POOL_SIZES)
    out: dict[str, list[tuple]] = {}
    for t in _order(model.tables):
        n_src = len(t.rows)
        if n_src == 0:
            out[t.name] = []
            continue
        target = rng.randint(1, max(1, min(n_src, max_rows)))
        pools = [rng.sample(c.domain, min(len(c.domain), pool_size)) if c.domain else [] for c in t.columns]
        parents = []
        for parent, cidx, pcols in t.fks:
            prow = out.get(parent)
            if prow is None:
                parents.append(None)  # cycle: parent not generated yet, values from the domain
                continue
            ptab = next(x for x in model.tables if x.name == parent)
            pidx = [[c.name for c in ptab.columns].index(n) for n in pcols]
            parents.append(sorted({tuple(r[i] for i in pidx) for r in prow
                                   if all(r[i] is not None for i in pidx)}, key=lambda k: [_typed_key(v) for v in k]))
        seen = [set() for _ in t.unique]
        rows: list[tuple] = []
        attempts = 0
        while len(rows) < target and attempts < target * 20:
            attempts += 1
            copied = rng.random() < copy_rate
            base = list(rng.choice(t.rows)) if copied else None
            row = []
            for j, c in enumerate(t.columns):
                if base is not None:
                    row.append(base[j])
                elif not c.not_null and not c.no_drawn_null and rng.random() < null_rate:
                    row.append(None)
                elif pools[j] and (any(j in u for u in t.unique) and rng.random() < 0.5):
                    row.append(rng.choice(c.domain))  # keys: the whole domain (fewer collisions)
                elif pools[j]:
                    row.append(rng.choice(pools[j]))
                else:
                    row.append(None)
            for (parent, cidx, _), keys in zip(t.fks, parents):
                if keys is None:
                    continue
                current = tuple(row[i] for i in cidx)
                if copied and current in set(keys):
                    continue  # the source's own link, and its parent was generated
                allow_null = all(not t.columns[i].not_null and not t.columns[i].no_drawn_null for i in cidx)
                if not keys or (allow_null and rng.random() < null_rate):
                    pick = (None,) * len(cidx) if allow_null else None
                else:
                    pick = rng.choice(keys)
                if pick is None:
                    row = None
                    break
                for i, v in zip(cidx, pick):
                    row[i] = v
            if row is None or any(row[j] is None and (c.not_null or (c.no_drawn_null and base is None))
                                  for j, c in enumerate(t.columns)):
                continue
            keys_ = [tuple(row[i] for i in u) for u in t.unique]
            if any(None not in k and k in s for k, s in zip(keys_, seen)):
                continue
            for k, s in zip(keys_, seen):
                s.add(k)
            rows.append(tuple(row))
        _keep_nonconforming(t, rows, rng)
        out[t.name] = rows
    return out


def _keep_nonconforming(t: Table, rows: list[tuple], rng: random.Random) -> None:
    """A column whose source holds values outside its declared type (so the replication chose
    its storage type) keeps one such value, so the candidate gets the same type decision."""
    if not rows:
        return
    for j, c in enumerate(t.columns):
        if c.nonconforming and not any(r[j] in c.nonconforming for r in rows if r[j] is not None):
            if any(j in u for u in t.unique):
                continue  # a key column: a duplicate would break uniqueness (drift is then checked)
            i = rng.randrange(len(rows))
            r = list(rows[i])
            r[j] = rng.choice(c.nonconforming)
            rows[i] = tuple(r)


def write_candidate(model: SourceModel, rows: dict[str, list[tuple]], path: str | os.PathLike) -> None:
    """Create the SQLite file ``path`` from the source DDL and ``rows`` (replacing any file)."""
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    if tmp.exists():
        tmp.unlink()
    con = sqlite3.connect(tmp)
    try:
        for sql in model.ddl:
            con.execute(sql)
        for t in model.tables:
            if rows.get(t.name):
                marks = ", ".join("?" * len(t.columns))
                con.executemany(f"INSERT INTO {quote_ident(t.name)} VALUES ({marks})", rows[t.name])
        con.commit()
    except sqlite3.Error as e:
        con.close()
        tmp.unlink()
        raise GenerationError(f"{model.db_id}: cannot write candidate {path.name}: {e}") from e
    con.close()
    os.replace(tmp, path)


def type_decisions(path: str | os.PathLike) -> dict[tuple[str, str], tuple]:
    """(table, column) -> the replication's type decision (logical type, precision, scale,
    length) for the SQLite file ``path`` (``replication.types: declared``)."""
    src = SourceDatabase("suite", Path(path).stem, "sqlite", str(Path(path).resolve()))
    specs, _ = SqliteReader().read_schema(src, types="declared")
    return {(t.name, c.name): (c.logical_type, c.precision, c.scale, c.length)
            for t in specs for c in t.columns}


def content_fingerprint(path: str | os.PathLike) -> str:
    """sha256 hex over the schema text and every table's typed values (rows in rowid order):
    equal for equal contents whatever the SQLite version that wrote the file."""
    h = hashlib.sha256()
    con = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
    try:
        for name, sql in con.execute("SELECT name, sql FROM sqlite_master ORDER BY type, name"):
            h.update(repr((name, sql)).encode())
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"):
            q = quote_ident(name)
            order = " ORDER BY rowid" if _has_rowid(con, q) else ""
            for r in con.execute(f"SELECT * FROM {q}{order}"):
                h.update(repr(tuple((type(v).__name__, v) for v in r)).encode())
    finally:
        con.close()
    return h.hexdigest()


def generate_candidate(model: SourceModel, index: int, seed: int, max_rows: int, path: str | os.PathLike,
                       source_decisions: dict | None = None) -> dict[str, int]:
    """Generate and write candidate ``index``; returns table -> row count.

    Raises :class:`GenerationError` when the candidate's type decisions differ from
    ``source_decisions`` (then the file is removed: a suite database must replicate with the
    source's type decisions).
    """
    rows = generate_rows(model, index, seed, max_rows)
    write_candidate(model, rows, path)
    if source_decisions is not None:
        got = type_decisions(path)
        drift = sorted(k for k in source_decisions if got.get(k) != source_decisions[k])
        if drift:
            Path(path).unlink()
            (tname, cname) = drift[0]
            raise GenerationError(f"{model.db_id} candidate {index}: type decision of {tname}.{cname} "
                                  f"would be {got.get(drift[0])}, the source's is {source_decisions[drift[0]]}")
    return {t: len(r) for t, r in rows.items()}
