"""The ``hf`` generator with a tiny random Llama built locally (no hub access).

The model's output is gibberish: the tests assert shapes, statuses, token counts and
determinism, never content.
"""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("torch", reason="hf generator needs torch (pip install torch==2.13.0)")
pytest.importorskip("transformers", reason="hf generator needs transformers")

sys.path.insert(0, str(Path(__file__).parent))
from tiny_model import build_tiny_model  # noqa: E402

from polysql_ray.datasets.example import Example, SourceDatabase  # noqa: E402
from polysql_ray.generation.base import GenStatus  # noqa: E402
from polysql_ray.generation.hf import HFGenerator, fold_system  # noqa: E402
from polysql_ray.generation.prompts import Sampling, prompt_for  # noqa: E402

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "llama"))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "toy.sqlite"
    con = sqlite3.connect(db)
    con.executescript('CREATE TABLE singer ("Singer_ID" INTEGER PRIMARY KEY, "Name" TEXT, "Age" INT);'
                      "INSERT INTO singer VALUES (1, 'Joe', 52);")
    con.commit()
    con.close()
    src = SourceDatabase("toy", "toy", "sqlite", str(db))
    qs = ["How many singers?", "Name of the oldest singer?", "Average age of all singers in the table?"]
    return [Example("toy", str(i), "toy", q, "", "SELECT 1", "sqlite", "sqlite", src) for i, q in enumerate(qs)]


_LOADED: dict = {}


def gen(tiny, **kw):
    """A generator; the loaded tokenizer/model are shared between tests to keep them fast."""
    kw.setdefault("sampling", Sampling(max_tokens=MAX_TOKENS))
    g = HFGenerator(model="tiny", model_id=tiny, **kw)
    if tiny in _LOADED:
        g._tok, g._lm = _LOADED[tiny]
        g.max_model_len = kw.get("max_model_len") or g._lm.config.max_position_embeddings
    else:
        g._load()
        _LOADED[tiny] = (g._tok, g._lm)
    return g


def test_generates_one_prediction_per_example(tiny, examples):
    g = gen(tiny, batch_size=2)
    preds = g.generate(examples, "duckdb", "11")
    assert [p.question_id for p in preds] == ["0", "1", "2"]
    for ex, p in zip(examples, preds):
        assert p.status in (GenStatus.OK, GenStatus.NO_SQL, GenStatus.TRUNCATED)
        assert isinstance(p.raw_output, str)
        assert 1 <= p.completion_tokens <= MAX_TOKENS
        assert p.latency_s > 0
        # prompt tokens = the chat-templated prompt, counted without padding
        text = g._tok.apply_chat_template(prompt_for(ex, "duckdb", "11").messages,
                                          add_generation_prompt=True, tokenize=False)
        assert p.prompt_tokens == len(g._tok(text, add_special_tokens=False)["input_ids"])
        if p.status != GenStatus.OK:
            assert p.pred_sql == "" and p.error
    # longer question -> longer prompt
    assert preds[2].prompt_tokens > preds[0].prompt_tokens


def test_greedy_is_deterministic(tiny, examples):
    a = gen(tiny, batch_size=3).generate(examples, "sqlite", "21")
    b = gen(tiny, batch_size=3).generate(examples, "sqlite", "21")
    assert [p.raw_output for p in a] == [p.raw_output for p in b]
    assert [p.completion_tokens for p in a] == [p.completion_tokens for p in b]


def test_seeded_sampling_is_reproducible(tiny, examples):
    s = Sampling(temperature=1.0, top_p=0.9, max_tokens=MAX_TOKENS, seed=3)
    a = gen(tiny, sampling=s).generate(examples[:2], "mysql", "12")
    b = gen(tiny, sampling=s).generate(examples[:2], "mysql", "12")
    assert [p.raw_output for p in a] == [p.raw_output for p in b]


def test_prompt_longer_than_max_model_len_is_error(tiny, examples):
    preds = gen(tiny, max_model_len=40).generate(examples[:1], "postgres", "11")
    assert preds[0].status == GenStatus.ERROR and "exceeds max_model_len 40" in preds[0].error


def test_fold_system_and_fingerprint(tiny):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert fold_system(msgs) == [{"role": "user", "content": "S\n\nU"}]
    assert msgs[1]["content"] == "U"
    a, b = gen(tiny), gen(tiny, sampling=Sampling(max_tokens=MAX_TOKENS, seed=1))
    assert a.fingerprint() == gen(tiny).fingerprint() and a.fingerprint() != b.fingerprint()
    assert a.fingerprint().startswith("hf:")
