"""Placement keys of the execution actors (``engines.<name>.resources``) are honoured, and a
resource that no node has is refused with one line instead of a run that waits forever."""
from __future__ import annotations

import pytest

from polysql_ray.errors import ConfigError
from polysql_ray.pipeline.cluster import check_fits


def _cfg(resources: dict) -> dict:
    return {"engines": {"sqlite": {"actors": 1, "num_cpus": 0.5, "resources": resources}},
            "pipeline": {"score_num_cpus": 0.25}}


def test_custom_resource_no_node_has_is_refused(ray_session):
    with pytest.raises(ConfigError, match=r"engines\.sqlite\.resources asks for 1 of custom resource 'near_pg'"):
        check_fits(_cfg({"near_pg": 1}), ["sqlite"])


def test_custom_resource_pins_the_execution_actor(ray_session, tmp_path):
    import ray

    from polysql_ray.pipeline.actors import ExecutionActor

    check_fits(_cfg({"polysql_test_node": 1}), ["sqlite"])  # the node has it: no error
    actor = ray.remote(ExecutionActor).options(num_cpus=0.5, resources={"polysql_test_node": 1}).remote(
        "sqlite", {}, {"timeout_s": 5})
    ray.get(actor.ping.remote(), timeout=600)
    # the actor holds the node's only unit of the resource while it lives (resource views are
    # eventually consistent: wait for the view to say so, within a generous bound)
    import time

    deadline = time.monotonic() + 300
    while ray.available_resources().get("polysql_test_node", 0.0) != 0.0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("polysql_test_node", 0.0) == 0.0
    ray.kill(actor)


def test_scoring_tasks_in_flight_follow_the_cluster_cpus():
    """pipeline.max_inflight_score=auto: one scoring task (one worker process) per CPU left
    after the busy ones (the driver, embedded engines' actors); none where no CPU is left (the
    driver scores every batch)."""
    from polysql_ray.pipeline.scheduler import inflight_scores

    assert [inflight_scores("auto", c) for c in (0.5, 2.0, 16.0, 64.0)] == [0, 2, 16, 64]
    assert [inflight_scores("auto", c, 1 + 1) for c in (1.0, 2.0, 4.0)] == [0, 0, 2]
    assert inflight_scores("auto", 16.0, 1 + 8) == 7
    assert inflight_scores(3, 64.0, 60) == 3  # a number is taken as given
    assert inflight_scores(0, 64.0) == 0      # none: the driver scores every batch
    with pytest.raises(ValueError, match="max_inflight_score"):
        inflight_scores(-1, 2.0)


def test_execution_actors_auto_follow_the_cluster_cpus():
    """engines.<name>.actors=auto (the sqlite/duckdb default): one actor per two CPUs, at least
    one; a number is taken as given; config validation accepts auto and refuses the rest."""
    from polysql_ray.config import validate
    from polysql_ray.pipeline.cluster import engine_actors

    cfg = {"engines": {"sqlite": {"actors": "auto"}, "duckdb": {"actors": 3}}}
    assert [engine_actors(cfg, "sqlite", c) for c in (1.0, 2.0, 3.0, 16.0)] == [1, 1, 1, 8]
    assert engine_actors(cfg, "duckdb", 64.0) == 3
    # heavy actors: at most a quarter of the cluster per engine (the two-node test's num_cpus=2
    # on 6 CPUs asked 3 x 2 x 2 engines = 12 before, and the fit check refused its own default)
    heavy = {"engines": {"sqlite": {"actors": "auto", "num_cpus": 2}}}
    assert [engine_actors(heavy, "sqlite", c) for c in (6.0, 16.0, 64.0)] == [1, 2, 8]
    assert engine_actors({"engines": {}}, "sqlite", 16.0) == 1  # absent: one, as before
    with pytest.raises(ConfigError, match=r"engines\.sqlite\.actors must be auto"):
        validate({"engines": {"sqlite": {"actors": "many"}}, "pipeline": {}})


def test_auto_actors_fit_and_an_oversized_number_is_still_refused(ray_session):
    """The fit check sizes auto as the scheduler does (so auto always leaves room for a scoring
    task), and still refuses a fixed number that reserves every CPU."""
    import ray

    cpus = ray.cluster_resources()["CPU"]
    auto = {"engines": {"sqlite": {"actors": "auto", "num_cpus": 0.5}}, "pipeline": {"score_num_cpus": 0.25}}
    check_fits(auto, ["sqlite"])
    over = {"engines": {"sqlite": {"actors": int(cpus) * 4, "num_cpus": 0.5}}, "pipeline": {"score_num_cpus": 0.25}}
    with pytest.raises(ConfigError, match="execution actors reserve"):
        check_fits(over, ["sqlite"])


def test_the_fit_check_counts_the_cpus_a_vllm_pool_holds(ray_session):
    """A vLLM pool on CPU actors holds ``num_actors`` x ``cpus_per_actor`` CPUs for the run (1
    each when unset: Ray's rule for an actor that names ``num_gpus``): on the 2-CPU test cluster
    an execution actor (0.5) and a scoring task (0.25) fit beside 2 x 0.25, not beside 2 x 1; the
    error names the model and the keys to lower. Building the generator starts no engine."""
    from polysql_ray.generation.vllm import VLLMGenerator

    cfg = _cfg({})
    small = VLLMGenerator("tiny-vllm", "/nowhere", num_actors=2, gpus_per_actor=0, cpus_per_actor=0.25)
    check_fits(cfg, ["sqlite"], {"tiny-vllm": small})
    assert small.ray_cpus() == 0.5
    for big in (VLLMGenerator("tiny-vllm", "/nowhere", num_actors=2, gpus_per_actor=0, cpus_per_actor=1),
                VLLMGenerator("tiny-vllm", "/nowhere", num_actors=2, gpus_per_actor=0)):
        assert big.ray_cpus() == 2
        with pytest.raises(ConfigError, match=r"the actor pool of model tiny-vllm 2 and a scoring task needs "
                                              r"0\.25, but the Ray cluster has 2: .*num_actors / cpus_per_actor"):
            check_fits(cfg, ["sqlite"], {"tiny-vllm": big})
    # in-process engines (use_ray: false) hold no Ray CPU
    check_fits(cfg, ["sqlite"], {"m": VLLMGenerator("m", "/nowhere", num_actors=4, use_ray=False)})
