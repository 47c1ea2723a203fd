"""The generation stage and the generations store, through the real ``openai`` generator
against the real loopback HTTP server (benchmarks/openai_loopback_server.py; no torch needed),
and one end-to-end pipeline run on Ray (generate -> execute -> score)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from polysql_ray.datasets.registry import load_dataset
from polysql_ray.generation.base import GenStatus, Prediction
from polysql_ray.generation.openai import OpenAIGenerator, RetryPolicy
from polysql_ray.generation.prompts import Sampling, prompt_for
from polysql_ray.pipeline.generate import GenerationStage, close_generators
from polysql_ray.store.generations import GENERATION_SCHEMA, GenerationsStore, generation_key


def _load_server_module():
    path = REPO / "benchmarks" / "openai_loopback_server.py"
    spec = importlib.util.spec_from_file_location("openai_loopback_server", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


REPO = Path(__file__).resolve().parents[1]
loopback = _load_server_module()


@pytest.fixture(scope="module")
def server():
    with loopback.LoopbackServer(port=0, lifetime_s=120) as srv:
        yield srv


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The first 10 quickstart questions (built into a temporary folder)."""
    root = tmp_path_factory.mktemp("qs")
    exs = load_dataset({"name": "quickstart", "layout": "quickstart", "root": str(root), "split": "dev",
                        "source_engine": "sqlite", "gold_dialect": "sqlite", "limit": None, "db_ids": None})
    return exs[:10]


def _gen(server, seed=0) -> OpenAIGenerator:
    return OpenAIGenerator(model="loopback", model_id="stand-in", base_url=server.base_url, api_key_env=None,
                           sampling=Sampling(max_tokens=64, seed=seed), concurrency=2,
                           retry=RetryPolicy(max_retries=0, timeout_s=10))


def test_openai_generator_fills_prompt_sha256(server, examples):
    preds = _gen(server).generate(examples[:3], "duckdb", "11")
    for ex, p in zip(examples[:3], preds):
        assert p.status is GenStatus.OK, p.error
        assert p.prompt_sha256 == prompt_for(ex, "duckdb", "11").sha256
        assert p.pred_sql.lower().startswith("select count(*) from")


def test_store_append_lookup_and_rerun_generates_nothing(server, examples, tmp_path):
    store = GenerationsStore(tmp_path)
    gen = _gen(server)
    stage = GenerationStage(store)
    before = server.requests
    first = stage.predictions(gen, examples, "quickstart", "sqlite", "11")
    assert server.requests - before == len(examples)
    assert (stage.stats.generated, stage.stats.reused) == (len(examples), 0)
    assert [p.question_id for p in first] == [e.question_id for e in examples]
    files = store.files("loopback")
    assert len(files) == 1 and files[0].parent == tmp_path / "generations" / "loopback"
    table = pq.read_table(files[0])
    assert table.schema.equals(GENERATION_SCHEMA)
    assert table.num_rows == len(examples)
    row = table.slice(0, 1).to_pylist()[0]
    assert row["key"] == generation_key(gen.fingerprint(), first[0].prompt_sha256)
    assert (row["dataset"], row["dialect"], row["instruction_level"]) == ("quickstart", "sqlite", "11")

    # rerun with a fresh stage and a fresh generator instance: no request, same predictions
    stage2 = GenerationStage(GenerationsStore(tmp_path))
    before = server.requests
    again = stage2.predictions(_gen(server), examples, "quickstart", "sqlite", "11")
    assert server.requests == before
    assert (stage2.stats.generated, stage2.stats.reused) == (0, len(examples))
    assert [(p.question_id, p.pred_sql, p.prompt_sha256) for p in again] == \
        [(p.question_id, p.pred_sql, p.prompt_sha256) for p in first]
    assert store.count("loopback") == len(examples)

    # a partial cell: only the examples not stored are generated (another level = other prompts)
    stage3 = GenerationStage(store)
    stage3.predictions(gen, examples[:4], "quickstart", "sqlite", "12")
    before = server.requests
    full = stage3.predictions(gen, examples, "quickstart", "sqlite", "12")
    assert server.requests - before == len(examples) - 4
    assert (stage3.stats.generated, stage3.stats.reused) == (len(examples), 4)
    assert len(full) == len(examples) and all(p.status is GenStatus.OK for p in full)

    # another seed is another fingerprint: nothing reused
    stage4 = GenerationStage(store)
    stage4.predictions(_gen(server, seed=1), examples[:2], "quickstart", "sqlite", "11")
    assert (stage4.stats.generated, stage4.stats.reused) == (2, 0)


def test_error_generations_are_stored_but_retried(examples, tmp_path, server):
    store = GenerationsStore(tmp_path)
    dead = OpenAIGenerator(model="loopback", model_id="stand-in", base_url="http://127.0.0.1:9/v1",
                           api_key_env=None, sampling=Sampling(max_tokens=64), concurrency=1,
                           retry=RetryPolicy(max_retries=0, timeout_s=2))
    preds = GenerationStage(store).predictions(dead, examples[:2], "quickstart", "duckdb", "11")
    assert all(p.status is GenStatus.ERROR for p in preds)
    assert store.count("loopback") == 2          # kept for the audit trail ...
    live = GenerationStage(store)
    preds = live.predictions(_gen(server), examples[:2], "quickstart", "duckdb", "11")
    assert live.stats.generated == 2 and all(p.status is GenStatus.OK for p in preds)  # ... but retried


def test_store_rejects_prediction_without_prompt_sha(tmp_path):
    with pytest.raises(ValueError, match="prompt_sha256"):
        GenerationsStore(tmp_path).append("m", "fp", "d", "sqlite", "11", [Prediction("q1", "SELECT 1")])


def test_close_generators_calls_close_once_and_survives_failures():
    class Closable:
        def __init__(self, fail=False):
            self.closed, self.fail = 0, fail

        def close(self):
            self.closed += 1
            if self.fail:
                raise RuntimeError("boom")

    a, b = Closable(), Closable(fail=True)
    assert close_generators({"a": a, "b": b, "replay": object()}) == ["a"]
    assert (a.closed, b.closed) == (1, 1)


def test_pipeline_end_to_end_through_openai_loopback(server, ray_session, tmp_path, monkeypatch):
    from polysql_ray.config import compose
    from polysql_ray.pipeline.driver import run

    monkeypatch.setenv("POLYSQL_LOOPBACK_URL", server.base_url)
    cfg, loader, yaml = compose(["+sweep=openai_loopback", f"results_dir={tmp_path}", "progress=false",
                                 "instruction_levels=[\"11\"]"])
    before = server.requests
    stats, table = run(cfg, loader, yaml)
    n_questions = 34
    assert stats.cells == 2 and stats.items_scored == 2 * n_questions
    assert server.requests - before == 2 * n_questions
    rows = {r["dialect"]: r for r in table.to_pylist()}
    assert set(rows) == {"sqlite", "duckdb"}
    # the stand-in answers count(*) of a table: right for at least the plain count question
    assert all(r["correct"] >= 1 for r in rows.values()), rows
    gens = GenerationsStore(tmp_path)
    assert gens.count("loopback-openai") == 2 * n_questions, (
        "driver.run() must pass a GenerationStage(GenerationsStore(results_dir)) to generate() "
        "(see polysql_ray/pipeline/generate.py)")

    # rerun: nothing generated, nothing scored
    before = server.requests
    stats2, table2 = run(cfg, loader, yaml)
    assert server.requests == before
    assert stats2.items_scored == 0 and stats2.items_skipped == 2 * n_questions
    assert gens.count("loopback-openai") == 2 * n_questions
    assert table2.to_pylist() == table.to_pylist()
