"""Hostile SQL on the embedded engines (SQLite, DuckDB): the catalogue in ``hostile_cases.py``.

Every case asserts its typed status, that the source file and the replica are byte-identical
afterwards, that no file appeared where the attack tried to write, and that the next
prediction on the same engine (same cached connection) still returns the right answer.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, require_data  # noqa: E402
from hostile_cases import CASES, LIMITS, canary, case_id, check_canary, expect_status  # noqa: E402

require_data(SPIDER / "database" / "concert_singer")

from polysql_ray.datasets.example import SourceDatabase  # noqa: E402
from polysql_ray.engines.duckdb import DuckDBEngine  # noqa: E402
from polysql_ray.engines.sqlite import SqliteEngine  # noqa: E402
from polysql_ray.replication.base import replicate  # noqa: E402

EVIL_PATHS = [Path("/tmp/polysql_evil.db"), Path("/tmp/polysql_evil.csv"), Path("/tmp/polysql_evil.duckdb"),
              Path("/tmp/polysql_evil"), Path("/tmp/polysql_evil_dir")]


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    src_file = d / "concert_singer.sqlite"
    shutil.copy(SPIDER / "database" / "concert_singer" / "concert_singer.sqlite", src_file)
    src = SourceDatabase("hostile", "concert_singer", "sqlite", str(src_file))
    duck = replicate(src, "duckdb", d / "replicas")
    engines = {"sqlite": SqliteEngine(), "duckdb": DuckDBEngine()}
    locations = {"sqlite": str(src_file), "duckdb": duck.location}
    yield engines, locations, src_file
    for e in engines.values():
        e.close()


@pytest.mark.parametrize("engine_name,case", [(e, c) for e in ("sqlite", "duckdb") for c in CASES[e]],
                         ids=[f"{e}-{case_id(c)}" for e in ("sqlite", "duckdb") for c in CASES[e]])
def test_hostile(setup, engine_name, case, record_property):
    engines, locations, src_file = setup
    engine, loc = engines[engine_name], locations[engine_name]
    before = {p: _sha(p) for p in {Path(loc), src_file}}
    res = LIMITS.enforce(engine.execute(loc, case.sql, LIMITS))
    for k, v in (("engine", engine_name), ("attack_class", case.cls), ("attack_s", res.elapsed_s),
                 ("limit_s", LIMITS.timeout_s), ("status", res.status.value)):
        record_property(k, v)
    expect_status(res, case)
    assert {p: _sha(p) for p in before} == before, "ESCAPE: replica or source file changed"
    assert not [p for p in EVIL_PATHS if p.exists()], "ESCAPE: an attack wrote a file"
    if case.after is not None:
        probe = engine.execute(loc, case.after[0], LIMITS)
        assert probe.ok and probe.table.column(0)[0].as_py() == case.after[1], \
            ("ESCAPE: state left behind", probe.status, probe.error)
    sql, expected = canary(engine_name, case)
    check_canary(engine.execute(loc, sql, LIMITS), expected)
