"""The judge taxonomy job end to end: against the loopback chat server over real HTTP (prompt,
parse, cache, resume, agreement, leaderboard) and with the tiny local model (hf generator)."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from polysql_ray.statistics.judge import JudgeConfigError, run_judge
from polysql_ray.statistics.synthetic import score_row, write_store
from polysql_ray.statistics.taxonomy import JUDGE_FAMILY

REPO = Path(__file__).resolve().parents[1]
OUTCOMES = ["pass", "schema", "syntax", "values", "row_count", "order", "runtime", "gold_error"]


def _loopback():
    spec = importlib.util.spec_from_file_location("openai_loopback_server_j",
                                                  REPO / "benchmarks" / "openai_loopback_server.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


loopback = _loopback()


@pytest.fixture()
def store(tmp_path):
    rows = [score_row(m, "d", dialect, "-", f"q{i}", OUTCOMES[(i + k) % len(OUTCOMES)],
                      pred_sql=f"SELECT {i} /* {m} */")
            for k, m in enumerate(("m1", "m2")) for dialect in ("sqlite", "duckdb") for i in range(16)]
    rows.append(score_row("gold", "d", "duckdb", "-", "q0", "syntax", generator="gold"))
    write_store(tmp_path, rows)
    return tmp_path


@pytest.fixture()
def server(monkeypatch):
    with loopback.LoopbackServer(port=0, lifetime_s=120) as srv:
        monkeypatch.setenv("POLYSQL_LOOPBACK_URL", srv.base_url)
        yield srv


def _judgements(store):
    return pq.read_table(store / "judgements" / "loopback-judge.parquet").to_pylist()


def test_judge_job_over_http_caches_and_agrees(store, server, capsys):
    sys.path.insert(0, str(REPO))
    from jobs.judge import main

    assert main([f"results_dir={store}", "judge=loopback_judge", "batch_size=5"]) == 0
    out = capsys.readouterr().out
    # 2 models x 2 dialects x 16 questions; per model and dialect 12 of 16 are fails
    # (pass x2 and gold_error x2 are not judged); the gold generator's failure is left out
    rows = _judgements(store)
    assert len(rows) == 48 == server.requests
    for r in rows:
        assert r["label"] == loopback.JUDGE_TABLE.get(r["reason"], "invalid_evaluation")
        assert r["family"] == JUDGE_FAMILY[r["label"]] and r["rule_family"]
        assert r["model"] != "gold"
    assert "asked now 48" in out and "from cache 0" in out and "Cohen's kappa" in out
    # a rerun asks nothing: every reply comes from the cache
    assert main([f"results_dir={store}", "judge=loopback_judge"]) == 0
    assert server.requests == 48 and "from cache 48" in capsys.readouterr().out
    # the leaderboard shows both taxonomies
    from polysql_ray.reporting.snapshot import PublicationError, write_snapshot

    with pytest.raises(PublicationError, match="stand-in"):  # the loopback judge is no judgement
        write_snapshot(store, store / "snap", drill=False)
    snap = write_snapshot(store, store / "snap", drill=False, allow_standin_judges=True)
    assert [j["standin"] for j in snap.stats.judges if j["judge"] == "loopback-judge"] != [""]
    judged = snap.stats.judge_taxonomy_model_dialect
    assert {r["judge"] for r in judged} == {"loopback-judge"}
    assert sum(r["count"] for r in judged) == 48
    agree = {(r["rule_family"], r["judge_family"]): r["count"] for r in snap.stats.judge_agreement}
    assert agree[("schema", "schema")] == 8 and agree[("dialect_syntax", "dialect_syntax")] == 8
    assert agree[("execution", "dialect_syntax")] == 8  # runtime errors: the stand-in says dialect
    assert "Judge vs rule-based families" in snap.files["md"].read_text()


def test_judge_resumes_after_an_interruption(store, server):
    from polysql_ray.config import compose
    from polysql_ray.generation.registry import make_generator

    cfg = compose(["model=loopback_judge"])[0]["model"]
    real = make_generator(cfg)

    class Dies:
        model, calls = real.model, 0

        def fingerprint(self):
            return real.fingerprint()

        def chat(self, msgs):
            Dies.calls += 1
            if Dies.calls > 2:
                raise KeyboardInterrupt
            return real.chat(msgs)

    with pytest.raises(KeyboardInterrupt):
        run_judge(store, cfg, batch_size=10, generator=Dies())
    assert server.requests == 20
    run = run_judge(store, cfg, batch_size=10)
    assert (run.reused, run.judged, run.failures) == (20, 28, 48)
    assert server.requests == 48 and len(_judgements(store)) == 48


def test_judge_refuses_a_generator_that_cannot_chat(store):
    with pytest.raises(JudgeConfigError, match="cannot chat"):
        run_judge(store, {"name": "g", "generator": "gold"})


def test_judge_with_the_tiny_local_model(store, tmp_path):
    pytest.importorskip("torch", reason="hf judge needs torch")
    pytest.importorskip("transformers", reason="hf judge needs transformers")
    os.environ["HF_HUB_OFFLINE"] = "1"
    sys.path.insert(0, str(Path(__file__).parent))
    from tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny")
    cfg = {"name": "tiny-judge", "generator": "hf", "model_id": str(model), "device": "cpu",
           "dtype": "float32", "batch_size": 4, "max_model_len": 8192,
           "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "seed": 0}}
    run = run_judge(store, cfg, models=["m1"], dialects=["duckdb"], batch_size=4)
    assert run.failures == 12 and run.judged == 12 and run.errors == 0
    rows = pq.read_table(store / "judgements" / "tiny-judge.parquet").to_pylist()
    assert len(rows) == 12 and all(r["label"] in JUDGE_FAMILY for r in rows)  # gibberish: unparsed ok
    again = run_judge(store, cfg, models=["m1"], dialects=["duckdb"], batch_size=4)
    assert (again.judged, again.reused) == (0, 12)
