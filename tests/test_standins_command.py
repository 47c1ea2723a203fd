"""``python -m jobs.standins start|status|stop`` (issue 20 item 6): the user command starts the
warehouse stand-ins, prints the overrides that reach them, a query through the project runs
against each with exactly those overrides, and ``stop`` ends them."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tests.standins import standin_executable  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def _cmd(env, *args):
    return subprocess.run([sys.executable, "-m", "jobs.standins", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def _settings(line: str) -> tuple[str, dict]:
    """``engines.<dialect>.<key>=<value> ...`` -> (dialect, settings) as Hydra would type them."""
    out, dialect = {}, None
    for o in line.split():
        _, dialect, kv = o.split(".", 2)
        k, _, v = kv.partition("=")
        out[k] = True if v == "true" else int(v) if v.isdigit() else v
    return dialect, out


def test_start_status_query_stop(tmp_path):
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines.base import ExecStatus, Limits
    from polysql_ray.engines.registry import make_engine
    from polysql_ray.replication.base import drop_replicas, replicate

    for name in ("fakesnow", "bqemulator"):
        standin_executable(name)  # builds (or skips with the command) before the command runs
    env = {**os.environ, "POLYSQL_STANDINS_RUN": str(tmp_path / "run")}
    db = tmp_path / "tiny.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT)")
        con.executemany("INSERT INTO singer VALUES (?, ?)", [(1, "Ada"), (2, "Bob"), (3, "Cy")])
    src = SourceDatabase("standincmd", "tiny", "sqlite", str(db))
    try:
        r = _cmd(env, "start")
        assert r.returncode == 0, r.stderr
        lines = [x.strip() for x in r.stdout.splitlines() if x.strip().startswith("engines.")]
        assert len(lines) == 2 and "export POLYSQL_FAKESNOW_PW=any" in r.stdout, r.stdout
        st = _cmd(env, "status")
        assert st.stdout.count(": running, pid") == 2, st.stdout
        assert [x.strip() for x in st.stdout.splitlines() if x.strip().startswith("engines.")] == lines
        os.environ.setdefault("POLYSQL_FAKESNOW_PW", "any")  # as the printed export says
        for line in lines:
            dialect, settings = _settings(line)
            rep = replicate(src, dialect, tmp_path / "replicas", settings=settings)
            eng = make_engine(dialect, **settings)
            try:
                res = eng.execute(rep.location, "SELECT count(*) FROM singer WHERE id > 1", Limits(timeout_s=30))
            finally:
                eng.close()
            assert res.status is ExecStatus.OK, (dialect, res.error)
            assert res.table.column(0)[0].as_py() == 2, dialect
            drop_replicas(tmp_path / "replicas", {dialect: settings})
    finally:
        stop = _cmd(env, "stop")
    assert stop.returncode == 0 and stop.stdout.count(": stopped") == 2, stop.stdout
    after = _cmd(env, "status")
    assert after.stdout.count("not running") == 2, after.stdout


def test_bad_verb_is_one_line():
    r = _cmd(dict(os.environ), "launch")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "start|status|stop" in r.stderr
