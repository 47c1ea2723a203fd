"""The quickstart benchmark: a small text-to-SQL benchmark polysql_ray ships itself.

It lets the README command run on any machine without ``../shared``. Everything is committed
as text under ``polysql_ray/quickstart/data/``:

* ``shop.sql``, ``school.sql`` -- SQL scripts building two small SQLite databases. ``shop``:
  customers / products / orders / ``"order items"`` (a table name with a space), a MixedCase
  column ``"StockQty"``, NULL vs ``''`` emails, ISO dates as TEXT, REAL prices, three
  products tied on price. ``school``: students / courses / enrollments, ``Smith`` vs
  ``smith``, a NULL gpa, a gpa tie, NULL (ungraded) scores, a course nobody takes.
* ``questions.jsonl`` -- 34 questions (``jsonl`` layout) with SQLite gold SQL, ``tags``
  naming the trap each one tests (``order_by``, ``ties_in_order``, ``ties_at_limit``,
  ``group_by_unordered``, ``null``, ``null_vs_empty``, ``null_ordering``,
  ``integer_division``, ``like_case``, ``iso_dates``, ``decimal_values``, ``real_rounding``,
  ``distinct``, ``quoted_identifier``, ``mixed_case_identifier`` ...) and, where the gold
  has a top-level ORDER BY over a multi-row result, ``order_keys``: the 0-based result
  columns holding the ORDER BY keys (rows tied on them compare as a multiset).
* Prediction files (JSONL keyed by ``question_id``, SQLite dialect), each row with
  ``expect`` (the verdict the team's comparison policy must give on SQLite) and ``why``:

  - ``rewritten.jsonl``: every answer right but written differently from the gold (aliases,
    ``IN`` vs ``OR``, joins as subqueries, ``NOT EXISTS`` vs ``NOT IN``, ``GROUP BY`` vs
    ``DISTINCT``, an extra ORDER BY on an unordered gold, a different order inside ORDER
    BY ties, float sums in another order). Expected: ``pass`` on all 34 (EX 100%).
    shop_06 / school_07 return the gold's rows but the gold has ties at the LIMIT cut, so
    a verdict may carry the ``ties_at_limit`` flag.
  - ``flawed.jsonl``: deliberately wrong answers (``fail``: COUNT(col) over NULLs, missing
    DISTINCT, ``''`` for NULL, wrong ORDER direction, NULLS FIRST, integer division
    ``31/14 = 2``, case-sensitive ``instr``/``GLOB`` instead of LIKE, ``LIKE '%-03-%'`` on
    dates, TEXT vs INTEGER comparison, rounding, inner vs left join, a syntax error, an
    empty prediction), two right-but-different ones (``pass``: shop_07, school_11) and two
    other valid top-k answers under ties at the cut (``ambiguous``: shop_06, school_07;
    the policy reports them flagged ``ties_at_limit``, never as a plain pass or fail).
    Expected on SQLite: 2 pass, 2 ambiguous, 30 fail.

  On other dialects the same SQLite-written predictions show the dialect gap (``[order
  items]`` quoting, LIKE case, integer division, NULL ordering): that is what they are for.

``tests/test_quickstart_data.py`` checks every ``expect`` against real SQLite with a plain
sqlite3 comparison (multiset of rows; ordered groups where the gold orders).

:func:`materialize` writes the runnable folder (``jsonl`` layout) that
``conf/dataset/quickstart.yaml`` points at.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from importlib import resources
from pathlib import Path

#: db_id -> SQL script file in the package's data folder.
DATABASES: dict[str, str] = {"shop": "shop.sql", "school": "school.sql"}
#: prediction set name -> file in the package's data folder.
PREDICTIONS: dict[str, str] = {"rewritten": "rewritten.jsonl", "flawed": "flawed.jsonl"}
QUESTIONS = "questions.jsonl"
#: bumped when the materialized layout (not the data) changes.
LAYOUT_VERSION = "quickstart-v1"
MANIFEST = "MANIFEST.json"


def data_dir() -> Path:
    """The package's committed data folder (``polysql_ray/quickstart/data``)."""
    return Path(str(resources.files(__name__) / "data"))


def prediction_path(name: str) -> Path:
    """Path of a packaged prediction file (``rewritten`` | ``flawed``); KeyError lists names."""
    if name not in PREDICTIONS:
        raise KeyError(f"unknown quickstart prediction set {name!r}; known: {sorted(PREDICTIONS)}")
    return data_dir() / PREDICTIONS[name]


def default_dir() -> Path:
    """Default materialization folder: ``$POLYSQL_CACHE/quickstart`` or
    ``~/.cache/polysql_ray/quickstart``."""
    base = os.environ.get("POLYSQL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "polysql_ray")
    return Path(base) / "quickstart"


def content_hash() -> str:
    """sha256 over the layout version, the SQLite library version and every data file."""
    h = hashlib.sha256(f"{LAYOUT_VERSION}\0{sqlite3.sqlite_version}\0".encode())
    src = data_dir()
    for name in sorted([*DATABASES.values(), *PREDICTIONS.values(), QUESTIONS]):
        h.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    return h.hexdigest()


def materialize(dest_dir: str | os.PathLike) -> Path:
    """Write the quickstart benchmark into ``dest_dir`` and return it (absolute).

    Layout written (the ``jsonl`` dataset layout)::

        dest_dir/questions.jsonl
        dest_dir/database/shop/shop.sqlite
        dest_dir/database/school/school.sqlite
        dest_dir/predictions/rewritten.jsonl, flawed.jsonl
        dest_dir/MANIFEST.json          {"layout", "content_sha256", "sqlite_version"}

    Deterministic (each database is built by running its committed script on an empty
    file) and idempotent: when ``MANIFEST.json`` matches :func:`content_hash` and the files
    exist, nothing is rewritten. Every file is written to a temporary name and renamed into
    place, so concurrent callers (several Ray workers) never see a half-written database.

    Raises:
        OSError: ``dest_dir`` not writable; sqlite3.Error: a broken SQL script (a bug).
    """
    dest = Path(dest_dir).expanduser().resolve()
    digest = content_hash()
    manifest = dest / MANIFEST
    targets = [dest / QUESTIONS, *(dest / "database" / d / f"{d}.sqlite" for d in DATABASES),
               *(dest / "predictions" / p for p in PREDICTIONS.values())]
    try:
        if json.loads(manifest.read_text()).get("content_sha256") == digest and all(t.is_file() for t in targets):
            return dest
    except (OSError, ValueError):
        pass
    src = data_dir()
    dest.mkdir(parents=True, exist_ok=True)
    for db_id, script in DATABASES.items():
        out = dest / "database" / db_id / f"{db_id}.sqlite"
        out.parent.mkdir(parents=True, exist_ok=True)
        _atomic(out, lambda tmp, s=script: _build_sqlite(tmp, (src / s).read_text(encoding="utf-8")))
    _atomic(dest / QUESTIONS, lambda tmp: shutil.copyfile(src / QUESTIONS, tmp))
    (dest / "predictions").mkdir(exist_ok=True)
    for name in PREDICTIONS.values():
        _atomic(dest / "predictions" / name, lambda tmp, n=name: shutil.copyfile(src / n, tmp))
    body = json.dumps({"layout": LAYOUT_VERSION, "content_sha256": digest,
                       "sqlite_version": sqlite3.sqlite_version}, indent=1, sort_keys=True)
    _atomic(manifest, lambda tmp: Path(tmp).write_text(body + "\n"))
    return dest


def _build_sqlite(path: str, script: str) -> None:
    con = sqlite3.connect(path)
    try:
        con.executescript(script)
        con.commit()
    finally:
        con.close()


def _atomic(target: Path, write) -> None:
    """Call ``write(tmp_path)`` on a temp file next to ``target``, then rename it over."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    try:
        os.unlink(tmp)          # sqlite3 wants to create the file itself
        write(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
