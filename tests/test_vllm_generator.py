"""The ``vllm`` generator's import-free parts: lazy import, clear errors, sharding, placement,
fingerprint, model configs. The real engine runs in tests/test_vllm_e2e.py (vLLM's CPU build,
its own venv)."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"

from polysql_ray.datasets.example import Example, SourceDatabase  # noqa: E402
from polysql_ray.generation.prompts import Sampling  # noqa: E402
from polysql_ray.generation.vllm import VLLMGenerator, vllm_available  # noqa: E402

HAS_VLLM = vllm_available()


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "toy.sqlite"
    con = sqlite3.connect(db)
    con.executescript('CREATE TABLE singer ("Singer_ID" INTEGER PRIMARY KEY, "Name" TEXT);')
    con.close()
    src = SourceDatabase("toy", "toy", "sqlite", str(db))
    return [Example("toy", str(i), "toy", f"Question number {i} about singers?", "", "SELECT 1", "sqlite",
                    "sqlite", src) for i in range(5)]


def test_module_imports_without_vllm_and_fingerprint_is_stable():
    a = VLLMGenerator("m", "Qwen/Qwen2.5-Coder-7B-Instruct", revision="abc", sampling=Sampling(seed=1))
    b = VLLMGenerator("m", "Qwen/Qwen2.5-Coder-7B-Instruct", revision="abc", sampling=Sampling(seed=2))
    assert a.fingerprint() == VLLMGenerator("m", "Qwen/Qwen2.5-Coder-7B-Instruct", revision="abc",
                                            sampling=Sampling(seed=1)).fingerprint()
    assert a.fingerprint() != b.fingerprint() and "@abc" in a.fingerprint()
    assert a.gpus_per_actor == 1


def test_shards_are_contiguous_and_cover_everything():
    g = VLLMGenerator("m", "x", num_actors=3)
    g._engines = [object()] * 3
    shards = g._shards(8)
    assert [list(s) for s in shards] == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [list(s) for s in g._shards(2)] == [[0], [1]]


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed: the missing-vLLM error path cannot be shown")
def test_missing_vllm_is_a_clear_error(examples):
    g = VLLMGenerator("m", "x", use_ray=False)
    with pytest.raises(ImportError, match="polysql_ray\\[gpu\\]"):
        g.generate(examples, "sqlite", "11")


def test_cpu_pool_asks_ray_for_no_gpu_and_failures_are_one_line():
    """conf/model/tiny_vllm.yaml: 2 CPU actors, num_gpus=0; an engine failure is infrastructure
    (GeneratorUnavailable, printed as one line by the CLI) whose cause is the remote error's last line."""
    from polysql_ray.errors import user_error_message
    from polysql_ray.generation.base import GeneratorUnavailable
    from polysql_ray.generation.vllm import _cause_line

    g = VLLMGenerator("m", "x", num_actors=2, gpus_per_actor=0)
    assert g.actor_options() == {"num_gpus": 0, "max_restarts": 0}
    assert VLLMGenerator("m", "x", cpus_per_actor=0.5).actor_options()["num_cpus"] == 0.5
    remote = ("ray::VLLMEngine.__init__() (pid=1, ip=127.0.0.1)\n  File \"/x/vllm/config.py\", line 9, in f\n"
              "    raise ValueError(msg)\nValueError: User-specified max_model_len (100000) is greater than "
              "the derived max_model_len (8192)\n")
    assert _cause_line(RuntimeError(remote)).startswith("ValueError: User-specified max_model_len (100000)")
    died = ("The actor died unexpectedly before finishing this task.\n\tclass_name: VLLMEngine\n\tpid: 9837\n"
            "\tip: 192.0.2.2\nThe actor is dead because its worker process has died. Worker exit type: "
            "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
            "file. There are some potential root causes. (1) The process is killed by SIGKILL by OOM killer")
    assert _cause_line(RuntimeError(died)) == ("its process (pid 9837) exited: Worker unexpectedly exits with a "
                                               "connection error code 2.")
    pyd = ("ray::VLLMEngine.__init__() (pid=1)\n  File \"/x/vllm/engine/arg_utils.py\", line 9, in f\n"
           "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
           "  Value error, User-specified max_model_len (100000) is greater than the derived max_model_len "
           "(8192). [type=value_error, input_value=ArgsKwargs(()), input_type=ArgsKwargs]\n"
           "    For further information visit https://errors.pydantic.dev/2.12/v/value_error\n")
    assert _cause_line(RuntimeError(pyd)) == (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig Value error, "
        "User-specified max_model_len (100000) is greater than the derived max_model_len (8192).")
    err = g._unavailable("engine failed to start", RuntimeError(remote))
    assert isinstance(err, GeneratorUnavailable) and "\n" not in str(err)
    assert user_error_message(err) == str(err) and "rerun" in str(err)
    assert g._engines == []  # the pool was stopped


MODEL_CONFIGS = {
    "qwen2_5_coder_7b": ("vllm", "Qwen/Qwen2.5-Coder-7B-Instruct"),
    "llama3_1_8b": ("vllm", "meta-llama/Llama-3.1-8B-Instruct"),
    "qwen2_5_coder_32b": ("vllm", "Qwen/Qwen2.5-Coder-32B-Instruct"),
    "openai_endpoint": ("openai", "Qwen/Qwen2.5-Coder-7B-Instruct"),
    "tiny_hf": ("hf", "/tmp/tiny-model-dir"),
    "tiny_vllm": ("vllm", "/tmp/tiny-model-dir"),
}


@pytest.mark.parametrize("stem", sorted(MODEL_CONFIGS))
def test_model_configs_build_their_generator(stem, monkeypatch):
    """Each conf/model/*.yaml of issue 4 resolves and builds its generator (no engine started)."""
    from omegaconf import OmegaConf

    from polysql_ray.generation.hf import HFGenerator
    from polysql_ray.generation.openai import OpenAIGenerator

    monkeypatch.setenv("POLYSQL_TINY_MODEL", "/tmp/tiny-model-dir")
    cfg = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "conf" / "model" / f"{stem}.yaml"),
                                 resolve=True)
    kind, model_id = MODEL_CONFIGS[stem]
    for key in ("name", "generator", "model_id", "revision", "max_model_len", "sampling", "chat_template"):
        assert key in cfg, (stem, key)
    # greedy everywhere except tiny_vllm, which samples (T=0.8, seeded) so that the e2e test
    # shows seeded determinism on CPU (tests/test_vllm_e2e.py)
    assert cfg["generator"] == kind and cfg["sampling"]["temperature"] == (0.8 if stem == "tiny_vllm" else 0.0)
    assert cfg["sampling"].get("seed") is not None or cfg["sampling"]["temperature"] == 0.0
    cls = {"vllm": VLLMGenerator, "openai": OpenAIGenerator, "hf": HFGenerator}[kind]
    g = cls.from_config(cfg)
    assert g.model == cfg["name"] and g.model_id == model_id
    assert g.fingerprint().startswith(f"{kind}:{model_id}@")
    if stem == "tiny_vllm":
        assert g.num_actors == 2 and g.gpus_per_actor == 0 and g.actor_options()["num_gpus"] == 0
        assert g.num_actors * g.cpus_per_actor <= 0.5  # leaves a 2-CPU cluster room to execute and score
    if stem == "qwen2_5_coder_32b":
        assert g.tensor_parallel_size in (2, 4) and g.gpus_per_actor == g.tensor_parallel_size
