"""Fidelity study (issue 3 item 5): SpiderMan alignment, the study's verifiers, and regression
tests for the evaluator artefacts it found."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from conftest_servers import SPIDER, SPIDERMAN, server_reachable  # noqa: E402

from polysql_ray.comparison.policy import ComparisonPolicy  # noqa: E402
from polysql_ray.comparison.result_set import compare  # noqa: E402
from polysql_ray.comparison.shape import TIE_WINDOW, analyze_gold  # noqa: E402
from polysql_ray.comparison.verdict import decide  # noqa: E402
from polysql_ray.engines.base import ExecStatus, ExecutionResult  # noqa: E402
from polysql_ray.generation.base import GenStatus  # noqa: E402

needs_data = pytest.mark.skipif(not (SPIDERMAN / "test_queries.csv").exists() or not (SPIDER / "dev.json").exists(),
                                reason="shared Spider/SpiderMan data absent (set POLYSQL_SHARED)")


def _tables(n_tied: int, pred_name: str):
    """Gold ``SELECT name FROM p ORDER BY born LIMIT 1`` where ``n_tied`` rows tie at the cut."""
    shape = analyze_gold("SELECT name FROM p ORDER BY born LIMIT 1", "sqlite")
    probe = pa.table({"name": [f"n{i}" for i in range(n_tied)], "k": [None] * n_tied})
    return shape, pa.table({"name": ["n0"]}), pa.table({"name": [pred_name]}), probe


def test_ties_truncated_is_inconclusive_not_fail():
    """Artefact 1 (wta_1 q453): tie group larger than the probe window."""
    shape, gold, pred, probe = _tables(1 + TIE_WINDOW, "not_in_probe")
    cmp = compare(gold, pred, shape, ComparisonPolicy(), probe)
    assert cmp.reason == "ties_truncated" and not cmp.match and "ties_truncated" in cmp.flags
    v = decide(GenStatus.OK, ExecutionResult(ExecStatus.OK, gold), ExecutionResult(ExecStatus.OK, probe),
               ExecutionResult(ExecStatus.OK, pred), shape, ComparisonPolicy())
    assert v.verdict == "inconclusive" and v.reason == "ties_truncated"


def test_complete_tie_group_still_fails_a_wrong_row():
    shape, gold, pred, probe = _tables(5, "not_tied")  # probe saw every tied row
    cmp = compare(gold, pred, shape, ComparisonPolicy(), probe)
    assert cmp.reason == "values" and "ties_truncated" not in cmp.flags
    shape, gold, pred, probe = _tables(5, "n3")
    assert compare(gold, pred, shape, ComparisonPolicy(), probe).match


@needs_data
def test_spiderman_aligned_to_spider_dev_order():
    """Artefact 2: test_queries.csv is grouped by database, not in dev.json order."""
    from polysql_ray.datasets.spiderman import load_spiderman

    dev = json.loads((SPIDER / "dev.json").read_text())
    ex = list(load_spiderman(SPIDERMAN, installed=False, spider_dev=SPIDER / "dev.json"))
    assert [e.question_id for e in ex] == [str(i) for i in range(len(dev))]
    assert all(e.db_id == d["db_id"] and e.question == d["question"] for e, d in zip(ex, dev))
    raw = list(load_spiderman(SPIDERMAN, installed=False))
    assert sum(e.db_id == d["db_id"] for e, d in zip(raw, dev)) < len(dev)  # the CSV order differs


@needs_data
def test_write_predictions_keyed_by_dev_index(tmp_path):
    from polysql_ray.statistics.fidelity import write_predictions

    out = tmp_path / "p.jsonl"
    assert write_predictions(SPIDERMAN, SPIDER / "dev.json", out) == 1034
    dev = json.loads((SPIDER / "dev.json").read_text())
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert all(dev[int(r["question_id"])]["db_id"] == r["db_id"] for r in rows)
    assert rows[0]["pred_sql"].upper().startswith("SELECT COUNT(*) FROM `SINGER`")


def test_loader_registered():
    from polysql_ray.datasets.registry import LOADERS, get_loader

    assert LOADERS["spiderman"].endswith("SpidermanLoader") and hasattr(get_loader("spiderman"), "sources")


@needs_data
@pytest.mark.skipif(not server_reachable("127.0.0.1", 3306), reason="MariaDB not running")
def test_group_by_strictness_verifier():
    from polysql_ray.replication.spiderman_source import install_source
    from polysql_ray.statistics.fidelity import group_by_strictness

    install_source(SPIDERMAN, "concert_singer")
    assert group_by_strictness("select max(capacity), average from stadium", "concert_singer")
    assert not group_by_strictness("select max(capacity) from stadium", "concert_singer")
