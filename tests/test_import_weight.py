"""Import weight of the modules the driver and Ray workers load (issue 13: start-up cost).

Each check imports a module in a fresh interpreter and asserts that heavy packages it does
not need stay unloaded; a regression (an eager import added back) makes it fail.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> bytes:
    """stdout of ``code`` run by a fresh interpreter with this checkout on its path."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True).stdout


def _loaded(module: str, heavy: tuple[str, ...]) -> list[str]:
    code = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    return [m for m in _python(code).decode().strip().split(",") if m]


@pytest.mark.parametrize("module", ["polysql_ray.pipeline.summary", "polysql_ray.statistics.ex",
                                    "polysql_ray.statistics", "polysql_ray.reporting.console",
                                    "polysql_ray.reporting"])
def test_run_summary_does_not_load_statsmodels(module):
    # the run's EX table shows no confidence interval: statsmodels/scipy.stats (~1 s) stay unloaded
    assert _loaded(module, ("statsmodels", "scipy.stats")) == []


def test_statistics_names_still_resolve():
    from polysql_ray import statistics

    assert statistics.proportion_ci(5, 10)[0] < 0.5 < statistics.proportion_ci(5, 10)[1]
    assert set(statistics.__all__) <= set(dir(statistics))
    with pytest.raises(AttributeError):
        statistics.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", ["polysql_ray.comparison.verdict", "polysql_ray.pipeline.actors",
                                    "polysql_ray.comparison.ast"])
def test_scoring_worker_modules_do_not_load_scipy(module):
    # every scoring worker and the driver import these; SciPy (~20 MiB, 0.3 s) only loads for a
    # tolerance matching of multi-column rows
    assert _loaded(module, ("scipy",)) == []



def test_scoring_workers_and_sqlite_actors_do_not_load_duckdb():
    # engine declarations are read everywhere; the duckdb module (~37 MiB RSS per process) only
    # loads where a DuckDB connection is opened
    code = ("polysql_ray.pipeline.actors; import polysql_ray.engines.registry as r; r.make_engine('sqlite'); "
            "r.default_dialect('duckdb'); r.declared_engines()")
    assert _loaded(code, ("duckdb",)) == []


@pytest.mark.parametrize("module", ["polysql_ray.pipeline.driver", "polysql_ray.store.parquet",
                                    "polysql_ray.store.generations"])
def test_driver_does_not_load_pandas_before_it_reads_the_store(module):
    # pyarrow.dataset imports pandas (~50 MiB RSS); a run over a fresh store reads no part file
    # until its end
    assert _loaded(module, ("pandas", "pyarrow.dataset")) == []


@pytest.mark.parametrize("module", ["polysql_ray.__main__", "polysql_ray.pipeline.summary"])
def test_driver_loads_duckdb_only_for_the_ex_table(module):
    # the EX table (DuckDB) is built after the run's own cluster is shut down: duckdb (~37 MiB
    # RSS) is not in the driver while its workers are alive
    assert _loaded(module, ("duckdb",)) == []


def test_run_processes_answer_pyarrows_look_for_pandas_without_importing_it():
    # pyarrow's first conversion of Python values imports pandas (~41 MiB RSS, 0.3-0.5 s) in
    # each process of a run; arrow_without_pandas answers that look with "not installed", and an
    # explicit to_pandas() still works
    code = ("import sys, pyarrow as pa, pyarrow.compute as pc; from polysql_ray.lazy import arrow_without_pandas; "
            "arrow_without_pandas(); t = pa.Table.from_pylist([{'v': 'a', 'n': 1}]); "
            "pc.equal(t.column('v'), 'a'); pa.array([1, None]); t.to_pylist(); "
            "print('pandas' in sys.modules, end=' '); print(type(t.to_pandas()).__name__)")
    assert _python(code).decode().split() == ["False", "DataFrame"]
    # without it, the same conversions import pandas: the check can fail
    assert _python(code.replace("arrow_without_pandas(); ", "")).decode().split() == ["True", "DataFrame"]


def test_execution_actor_of_a_child_engine_loads_neither_pyarrow_nor_sqlglot(tmp_path):
    # the SQLite actor only passes its child's Arrow bytes on: with the declaration facts the
    # driver gives it, it never imports the engine modules, pyarrow or sqlglot (~50 MiB RSS)
    import pickle
    import sqlite3

    from polysql_ray.engines.registry import engine_spec

    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a INTEGER, b TEXT)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [(1, "x"), (2, None)])
    spec = engine_spec("sqlite")
    assert spec.child_process and not spec.transient_unavailable and spec.dialect == "sqlite"
    code = (f"import pickle, sys; from polysql_ray.pipeline.actors import ExecutionActor; "
            f"spec = pickle.loads({pickle.dumps(spec)!r}); "
            f"a = ExecutionActor('sqlite', {{}}, {{'timeout_s': 30}}, 0.0, spec); "
            f"out = a.execute_batch([({str(db)!r}, 'SELECT a, b FROM t ORDER BY a'), ({str(db)!r}, 'SELEC')]); "
            f"blob = pickle.dumps(out[:2]); a.engine.close(); "
            f"print(','.join(m for m in ('pyarrow', 'sqlglot', 'polysql_ray.engines.sqlite') if m in sys.modules)); "
            f"sys.stdout.flush(); sys.stdout.buffer.write(blob)")
    loaded, blob = _python(code).split(b"\n", 1)
    assert loaded == b""
    ok, bad = pickle.loads(blob)
    assert ok.ok and ok.table.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]
    assert bad.status.value == "syntax"
