"""One decision path: the sweep's scoring tasks and the one-case API give identical results.

Every stored score row of a real pipeline run is re-scored with ``score_sql`` (which runs the
gold, its probe and the prediction itself, on a replica it builds or reuses) and must carry
the same verdict, reason, basis and flags. Runs on every quickstart item (2 dialects, 3
models, default and test-suite policy) and on 600 Spider dev items (300 questions x DAIL-SQL
predictions x {sqlite, duckdb}, default and test-suite policy) when the shared Spider data is
present.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from polysql_ray.comparison.equivalence import score_sql
from polysql_ray.comparison.policy import ComparisonPolicy
from polysql_ray.config import compose
from polysql_ray.datasets.registry import dataset_sources
from polysql_ray.engines.base import Limits
from polysql_ray.pipeline.driver import run

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POLYSQL_SHARED", REPO.parent / "shared"))
DAIL = SHARED / "data" / "predictions" / "spider_dev" / "dail_sql_gpt4.sql"


def _both_ways(overrides: list[str], out: Path) -> tuple[int, list]:
    """Run the pipeline, then score_sql on every row; returns (rows compared, mismatches)."""
    # score_sql always tries the proof; the sweep's default (auto) skips it before embedded
    # engines, which changes `basis` (proven vs observed) but not the verdict: compare the
    # same decision path
    cfg, loader, text = compose(overrides + [f"results_dir={out}", "progress=false",
                                             "pipeline.structural_check=prove"])
    _, _ = run(cfg, loader, text)
    import duckdb

    rows = duckdb.connect().sql(f"SELECT * FROM read_parquet('{out}/scores/**/*.parquet')").to_arrow_table().to_pylist()
    policy = ComparisonPolicy.from_config(cfg["policy"])
    limits = Limits(**cfg["limits"])
    sources = {s.db_id: s for s in dataset_sources(cfg["dataset"])}
    compared, bad = 0, []
    for r in rows:
        src = sources[r["db_id"]]
        if r["gen_status"] != "ok" or not src.exists:
            continue
        one = score_sql(r["gold_sql"], r["pred_sql"], database=src.location, engine=src.engine,
                        dialect=r["dialect"], replicas_dir=cfg["replication"]["dir"], dataset=r["dataset"],
                        policy=policy, limits=limits)
        compared += 1
        sweep = (r["verdict"], r["reason"], r["basis"], tuple(f for f in r["flags"].split(",") if f))
        api = (one.verdict, one.reason, one.basis, tuple(one.flags))
        if sweep != api:
            bad.append((r["model"], r["dialect"], r["question_id"], sweep, api))
    return compared, bad


@pytest.mark.parametrize("policy", ["default", "testsuite"])
def test_every_quickstart_item_scores_identically_both_ways(ray_session, tmp_path, policy):
    compared, bad = _both_ways(["+sweep=quickstart", f"policy={policy}"], tmp_path)
    assert compared >= 200  # 3 models x 34 questions x 2 dialects, less predictions without SQL
    assert bad == []


@pytest.mark.parametrize("policy", ["default", "testsuite"])
def test_300_spider_questions_score_identically_both_ways(ray_session, tmp_path, policy):
    if not DAIL.is_file():
        pytest.skip(f"shared Spider predictions not found at {DAIL} (set POLYSQL_SHARED)")
    compared, bad = _both_ways(["dataset=spider", "dataset.limit=300", "model=replay", f"policy={policy}",
                                f"model.predictions={DAIL}", "dialects=[sqlite,duckdb]"], tmp_path)
    assert compared >= 500  # 300 questions x 2 dialects, less the missing wta_1 database
    assert bad == []
