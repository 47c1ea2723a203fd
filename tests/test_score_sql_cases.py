"""Issue 20 item 5, the one-case API in both directions: ``score_sql`` keeps the
``time_dependent_gold`` flag when the prediction fails (as the sweep's row does), and with a
PostgreSQL source it reuses the replica the pipeline built of that source instead of building a
second one (a different source still gets its own)."""
from __future__ import annotations

import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SERVERS, server_reachable  # noqa: E402

from polysql_ray.comparison.equivalence import score_sql  # noqa: E402
from polysql_ray.comparison.shape import analyze_gold  # noqa: E402
from polysql_ray.comparison.verdict import decide  # noqa: E402
from polysql_ray.comparison.policy import ComparisonPolicy  # noqa: E402
from polysql_ray.engines.base import ExecStatus, ExecutionResult  # noqa: E402

CLOCK_GOLD = "SELECT name, CAST(strftime('%Y', 'now') AS INTEGER) - born FROM people"


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "people.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, born INTEGER)")
    con.executemany("INSERT INTO people VALUES (?,?,?)", [(1, "Ann", 1990), (2, "Bob", 1985)])
    con.commit()
    con.close()
    return str(path)


@pytest.mark.parametrize("pred", ["SELEC name FROM people",            # pred_syntax
                                  "SELECT name, age FROM people",        # pred_schema
                                  ""])                                   # no SQL
def test_a_failed_prediction_keeps_the_clock_flag(db, tmp_path, pred):
    r = score_sql(CLOCK_GOLD, pred, database=db, replicas_dir=str(tmp_path / "r"))
    assert r.verdict == "fail" and "time_dependent_gold" in r.flags, r
    # the other direction: a gold that reads no clock carries no such flag when the prediction fails
    r = score_sql("SELECT name, 2024 - born FROM people", pred, database=db, replicas_dir=str(tmp_path / "r"))
    assert r.verdict == "fail" and "time_dependent_gold" not in r.flags, r


def test_the_fact_flag_decides_nothing():
    # a failed prediction of a gold flagged time_dependent_gold and nondeterministic_gold:
    # only the clock fact is kept; no inconclusive_flags rule turns the failure into inconclusive
    shape = analyze_gold("SELECT name FROM people WHERE born < strftime('%Y','now') LIMIT 1", "sqlite")
    assert {"time_dependent_gold", "nondeterministic_gold"} <= set(shape.flags)
    import pyarrow as pa

    gold = ExecutionResult(ExecStatus.OK, pa.table({"name": ["Ann"]}))
    v = decide("ok", gold, None, ExecutionResult.failure(ExecStatus.SYNTAX, "near SELEC"), shape,
               ComparisonPolicy(inconclusive_flags=("time_dependent_gold",)))
    assert (v.verdict, v.reason, v.flags) == ("fail", "pred_syntax", ("time_dependent_gold",))


PG = server_reachable(*SERVERS["postgres"][:2])


@pytest.mark.skipif(not PG, reason="PostgreSQL at 127.0.0.1:5432 unreachable")
def test_postgres_source_reuses_the_pipelines_replica(tmp_path):
    from polysql_ray.datasets.example import SourceDatabase
    from polysql_ray.engines import postgres as pg_engine
    from polysql_ray.engines.servers import ServerSettings
    from polysql_ray.replication.base import replicate
    from polysql_ray.replication.postgres import PostgresWriter
    from polysql_ray.replication.postgres_source import install_dump

    settings = ServerSettings.from_dict({}, **pg_engine.DEFAULTS)
    dump = tmp_path / "shop.sql"
    dump.write_text("CREATE TABLE public.orders (id integer NOT NULL, amount integer);\n"
                    "INSERT INTO orders VALUES (1, 10), (2, 20), (3, NULL);\n")
    dbs = [f"pq_src_reuse{uuid.uuid4().hex[:8]}" for _ in range(2)]
    rdir = tmp_path / "replicas"
    try:
        srcs = [SourceDatabase("shopds", f"shop{i}", "postgres", f"{d}/public", install=f"pg_dump:{dump}")
                for i, d in enumerate(dbs)]
        for src in srcs:  # as the pipeline installs a dump source (the reader may read it)
            install_dump(src, str(dump), settings)
        # the pipeline's replica of the first source (dataset "shopds", db_id "shop0")
        built = replicate(srcs[0], "duckdb", rdir)
        stamp = Path(built.location).stat().st_mtime_ns
        r = score_sql("SELECT id, amount FROM orders", "SELECT amount, id FROM orders",
                      database=f"{dbs[0]}/public", engine="postgres", dialect="duckdb", replicas_dir=str(rdir))
        assert r.verdict == "pass" and "columns_reordered" in r.flags, r
        manifests = sorted(p.relative_to(rdir).as_posix() for p in rdir.glob("duckdb/*/*/manifest.json"))
        assert manifests == ["duckdb/shopds/shop0/manifest.json"]  # no second copy
        assert Path(built.location).stat().st_mtime_ns == stamp    # and that copy not rebuilt
        # the other direction: another source gets its own copy
        r = score_sql("SELECT id, amount FROM orders", "SELECT id, amount + 1 FROM orders",
                      database=f"{dbs[1]}/public", engine="postgres", dialect="duckdb", replicas_dir=str(rdir))
        assert r.verdict == "fail", r
        assert len(list(rdir.glob("duckdb/*/*/manifest.json"))) == 2
    finally:
        for d in dbs:
            PostgresWriter(settings).drop(f"{d}/public")
