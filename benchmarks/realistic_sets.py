"""Distinct prediction sets with real models' failure mix over Spider dev (issue 24 item 1).

A sweep of many models is many *distinct* prediction files, and weaker models fail more; a
benchmark that cycles the same five files under new names (``bench_peer.py``) mostly re-runs
cached executions and mostly scores identical results. :func:`build` writes 21 sets, no two
alike, each one SQLite query per ``dev.json`` line (1,034 lines, the ``replay`` ``lines``
format the peer reads too):

* the four real sets of ``predictions/spider_dev`` (DAIL-SQL, C3, RESDSQL, CodeS);
* ``spiderman_on_sqlite``: SpiderMan's MySQL gold (``spiderman/test_queries.csv``) replayed on
  SQLite -- backquoted identifiers run, MySQL-only functions fail, and an independently
  written gold does not always return what Spider's returns;
* 16 mutated sets: each real set under each of four deterministic mutation families (the
  quickstart's ``flawed.jsonl`` traps, applied by text rules): ``cmp`` (a comparison
  operator loosened or tightened, ``AND`` for ``OR``, ``=`` to ``!=`` before a literal only: a
  join condition ``ON a.id != b.id`` over ``wta_1``'s half-million-row ``rankings`` runs for
  hours, a query no model writes, and the peer's 60 s timeout, ``asyncio.wait_for`` around a
  blocking SQLite call, cannot stop it), ``order`` (ORDER BY direction flipped,
  DISTINCT dropped or added), ``agg`` (``LIMIT k`` to ``k + 1``, ``max``/``min`` and
  ``avg``/``sum`` swapped, ``count(*)`` to ``count(DISTINCT ...)``), ``cols`` (the SELECT
  list reversed -- right under column matching -- or a column added). Every other line is
  mutated; rule ``j`` of a family applies to line ``i`` when it is the first applicable one
  starting from ``(i + seed) % n``, so the same input always gives the same file; a line no
  rule applies to is kept as is.

Nothing from ``../shared`` is committed: the sets are written under a work folder at run time.
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

REAL = ("dail_sql_gpt4", "c3sql_gpt35", "resdsql_3b", "codes_15b_sft")


def _sub1(pattern: str, repl, flags=re.IGNORECASE):
    rx = re.compile(pattern, flags)

    def rule(sql: str) -> str | None:
        out, n = rx.subn(repl, sql, count=1)
        return out if n and out != sql else None
    return rule


def _reverse_select(sql: str) -> str | None:
    """``SELECT a, b FROM`` -> ``SELECT b, a FROM`` (top-level list only, no parentheses)."""
    m = re.match(r"(?is)^\s*select\s+(distinct\s+)?(.+?)\s+from\s", sql)
    if not m or "(" in m.group(2) and m.group(2).count("(") != m.group(2).count(")"):
        return None
    items = _split_top(m.group(2))
    if len(items) < 2:
        return None
    return sql[:m.start(2)] + ", ".join(reversed(items)) + sql[m.end(2):]


def _split_top(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return out


def _add_column(sql: str) -> str | None:
    m = re.match(r"(?is)^\s*select\s+(distinct\s+)?(.+?)\s+from\s", sql)
    if not m:
        return None
    first = _split_top(m.group(2))[0]
    if first == "*" or first.lower().startswith("count(") and m.group(1):
        return None
    return sql[:m.end(2)] + ", " + first + sql[m.end(2):]


def _bump_limit(sql: str) -> str | None:
    m = re.search(r"(?i)\blimit\s+(\d+)", sql)
    return sql[:m.start(1)] + str(int(m.group(1)) + 1) + sql[m.end(1):] if m else None


def _flip_direction(sql: str) -> str | None:
    if re.search(r"(?i)\bdesc\b", sql):
        return re.sub(r"(?i)\bdesc\b", "ASC", sql, count=1)
    m = re.search(r"(?i)\border\s+by\s+[^;]+?(?=\s+limit\b|\s*$|\))", sql)
    if m and not re.search(r"(?i)\basc\b", m.group(0)):
        return sql[:m.end()] + " DESC" + sql[m.end():]
    return _sub1(r"\basc\b", "DESC")(sql)


FAMILIES: dict[str, list] = {
    "cmp": [_sub1(r">=", ">"), _sub1(r"(?<![<>!])>(?!=)", ">="), _sub1(r"<=", "<"), _sub1(r"<(?![=>])", "<="),
            _sub1(r"\bAND\b", "OR"), _sub1(r"\bOR\b", "AND"),
            _sub1(r"(?<![<>!])=(?!=)(?=\s*(?:'|\"|-?\d))", "!=")],  # a filter, never a join condition
    "order": [_flip_direction, _sub1(r"(?i)^\s*select\s+distinct\s+", "SELECT "),
              _sub1(r"(?i)^\s*select\s+(?!distinct\b)", "SELECT DISTINCT ")],
    "agg": [_bump_limit, _sub1(r"\bmax\(", "min("), _sub1(r"\bmin\(", "max("), _sub1(r"\bavg\(", "sum("),
            _sub1(r"\bcount\(\s*\*\s*\)", "count(DISTINCT 1)"), _sub1(r"\bsum\(", "avg(")],
    "cols": [_reverse_select, _add_column],
}


def mutate(lines: list[str], family: str, seed: int, every: int = 2) -> list[str]:
    """``lines`` with one rule of ``family`` applied to every ``every``-th line (module
    docstring); the others are kept, as a weaker model still gets many questions right."""
    rules = FAMILIES[family]
    out = []
    for i, sql in enumerate(lines):
        new = None
        if (i + seed) % every:
            out.append(sql)
            continue
        for j in range(len(rules)):
            new = rules[(i + seed + j) % len(rules)](sql) if sql.strip() else None
            if new is not None:
                break
        out.append(new if new is not None else sql)
    return out


def _read_lines(path: Path) -> list[str]:
    return [line.strip().rstrip(";").strip() for line in path.read_bytes().decode().splitlines()]


def build(shared: Path, into: Path) -> list[tuple[str, Path]]:
    """Write the 21 sets under ``into``; returns ``[(name, file)]`` in a fixed order."""
    into.mkdir(parents=True, exist_ok=True)
    sets: list[tuple[str, list[str]]] = []
    real = {name: _read_lines(shared / f"data/predictions/spider_dev/{name}.sql") for name in REAL}
    sets += list(real.items())
    with open(shared / "data/spiderman/test_queries.csv", newline="") as f:
        sets.append(("spiderman_on_sqlite", [" ".join(r["sql"].split()) for r in csv.DictReader(f)]))
    for k, (name, lines) in enumerate(real.items()):
        for seed, family in enumerate(FAMILIES):
            sets.append((f"{name}~{family}", mutate(lines, family, seed + 7 * k)))
    out = []
    for name, lines in sets:
        path = into / f"{name.replace('~', '.')}.sql"
        path.write_text("".join(line + "\n" for line in lines))
        out.append((name.replace("~", "."), path))
    return out


RANKING_DATES, RANKED_PER_DATE = 936, 545  # 18 years of weekly lists: 510,120 rows


def build_wta_1(shared: Path, into: Path) -> Path:
    """A stand-in for Spider's ``wta_1.sqlite``, which the mirror lacks: ``into/wta_1.sqlite``.

    ``players`` (20,662 rows) and ``matches`` (278 rows) are SpiderMan's real data, loaded
    into the SpiderMan schema transpiled from MySQL to SQLite by sqlglot (the same columns and
    declared types as Spider's ``tables.json``; ``NULL`` in a CSV is SQL NULL). ``rankings``
    (not mirrored) is *synthesized*, deterministically: ``RANKING_DATES`` weekly dates from
    2000-01-03 (``YYYYMMDD`` integers, as the other date columns), ``RANKED_PER_DATE`` ranked
    players each, drawn from the players, points falling with the ranking, ``tours`` a small
    count and NULL for about a third of the rows (the source, Sackmann's WTA files, says the
    column is far from complete). About half a million rows: the scale of the real table, so
    that its 8 gold queries and the models' predictions cost what they cost there; its values
    are not the real ones, so EX on the 62 ``wta_1`` questions is not Spider's.
    """
    import datetime as dt
    import random
    import sqlite3

    import sqlglot

    path = into / "wta_1.sqlite"
    if path.exists():
        return path
    into.mkdir(parents=True, exist_ok=True)
    src = shared / "data/spiderman/databases/wta_1"
    ddl = sqlglot.transpile(re.sub(r"`wta_1`\.", "", (src / "schema.sql").read_text()), read="mysql",
                            write="sqlite")
    tmp = path.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    for stmt in ddl:
        con.execute(stmt)
    players = []
    for table in ("players", "matches"):
        with open(src / f"data/{table}.csv", newline="") as f:
            rows = csv.reader(f)
            cols = next(rows)
            data = [[None if v == "NULL" else v for v in r] for r in rows]
        con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", data)
        if table == "players":
            players = [int(r[0]) for r in data]
    rng = random.Random(24)
    pool = players[:4000]
    day = dt.date(2000, 1, 3)
    rows = []
    for _ in range(RANKING_DATES):
        stamp = int(day.strftime("%Y%m%d"))
        for rank, pid in enumerate(rng.sample(pool, RANKED_PER_DATE), start=1):
            tours = None if rng.random() < 0.35 else rng.randint(1, 30)
            rows.append((stamp, rank, pid, int(12000 / rank ** 0.85) + rng.randint(0, 9), tours))
        day += dt.timedelta(days=7)
    con.executemany("INSERT INTO rankings VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    tmp.rename(path)
    return path


def shared_with_wta_1(shared: Path, work: Path) -> Path:
    """A shared folder like ``shared`` whose Spider database folder also has :func:`build_wta_1`
    (every other file a symbolic link into ``shared``), so that the sweep covers all 1,034 Spider
    dev questions, as a measurement on the full release does."""
    out = work / "shared"
    spider = out / "data/spider"
    (spider / "database").mkdir(parents=True, exist_ok=True)
    for entry in (shared / "data").iterdir():
        if entry.name != "spider" and not (out / "data" / entry.name).exists():
            (out / "data" / entry.name).symlink_to(entry)
    for entry in (shared / "data/spider").iterdir():
        if entry.name != "database" and not (spider / entry.name).exists():
            (spider / entry.name).symlink_to(entry)
    for entry in (shared / "data/spider/database").iterdir():
        if not (spider / "database" / entry.name).exists():
            (spider / "database" / entry.name).symlink_to(entry)
    build_wta_1(shared, spider / "database/wta_1")
    return out


if __name__ == "__main__":
    import sys

    here = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/realistic-sets")
    files = build(Path(sys.argv[1]), here)
    texts = {name: p.read_text() for name, p in files}
    print(f"{len(files)} sets, {len(set(texts.values()))} distinct; lines per set: "
          f"{sorted({t.count(chr(10)) for t in texts.values()})}")
    base = {n: texts[n].splitlines() for n in REAL}
    for name, text in texts.items():
        if "." in name:
            src = base[name.split(".")[0]]
            changed = sum(a != b for a, b in zip(src, text.splitlines()))
            print(f"  {name:<28} {changed:4d} lines changed")
