"""Tokens/s of vLLM three ways on the same prompts and sampling (CPU here; GPU: gpu_generate.py).

(a) **bare**: one ``vllm.LLM`` in one process, ``LLM.generate`` once per cell (as the pipeline
    asks), the prompts given as the same token ids our generator sends;
(b) **pool**: the project's :class:`~polysql_ray.generation.vllm.VLLMGenerator` (Ray actors):
    (b1) its API per cell after the pool started, and (b2) a whole sweep,
    ``python -m polysql_ray +sweep=tiny_vllm`` with every cell prefetched and generated in one
    call per cell (``pipeline.generation_batch_size=0``, as (a) calls), its generation window
    (run summary's ``generate[<model>]`` stage) minus the engines' start (logged);
(c) **ray.data.llm**: ``build_llm_processor`` with a ``vLLMEngineProcessorConfig``, if it runs.

Engine start-up is excluded everywhere (each side starts, warms up on 4 prompts, then is timed).
Each measurement runs in a child process (its memory is gone before the next one starts).
Prints one row per measurement (prompts, prompt/output tokens, wall, output tok/s, total tok/s)
and each pool's ratio to bare per engine. Asserts nothing.

Usage (with a Python that imports vLLM, e.g. ``$(.ci/vllm-env)/bin/python``)::

    PYTHONPATH=. python benchmarks/vllm_bench.py [--model DIR] [--max-tokens 32] [--actors 1,2]
        [--skip b2,c]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: one measurement: name, prompts, prompt tokens, output tokens, wall seconds (+ notes)
Row = dict


def cells_messages(model_dir: str, sweep: str = "tiny_vllm", overrides: tuple[str, ...] = ()) -> list[list]:
    """Chat messages per cell of ``sweep`` (grid order), rendered by ``render_all`` as every
    generator renders them."""
    from polysql_ray.config import compose
    from polysql_ray.datasets.registry import load_dataset
    from polysql_ray.generation.prompts import render_all

    cfg, _, _ = compose([f"+sweep={sweep}", f"model.model_id={model_dir}", *overrides])
    examples = load_dataset(cfg["dataset"])
    out = []
    for dialect in cfg["dialects"]:
        for level in cfg["instruction_levels"]:
            prompts, _ = render_all(examples, dialect, level, 0)
            out.append([p.messages for p in prompts if p is not None])
    return out


def _sampling(args) -> dict:
    return {"temperature": args.temperature, "top_p": 0.95 if args.temperature > 0 else 1.0,
            "max_tokens": args.max_tokens, "seed": 0}


def _engine_kw(args) -> dict:
    """The engine arguments every side gets, as the pool's :class:`VLLMEngine` builds them (on
    vLLM's CPU build: :func:`~polysql_ray.generation.vllm.cpu_engine_defaults` first)."""
    from vllm.platforms import current_platform

    from polysql_ray.generation.vllm import cpu_engine_defaults

    kw = dict(model=args.model, max_model_len=args.max_model_len, dtype=args.dtype, seed=0,
              tensor_parallel_size=args.tp, gpu_memory_utilization=args.gpu_memory_utilization)
    if str(current_platform.device_type) == "cpu":
        kw.update(cpu_engine_defaults(args.max_model_len))
    kw.update(json.loads(args.engine_args))
    return kw


def child_bare(args, cells: list[list]) -> Row:
    """(a): ``LLM.generate`` per cell in this process, token-id prompts as our engine builds them."""
    from vllm import LLM, SamplingParams

    llm = LLM(**_engine_kw(args))
    tok = llm.get_tokenizer()
    ids = [[{"prompt_token_ids": tok(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                                     add_special_tokens=False)["input_ids"]} for m in cell] for cell in cells]
    s = _sampling(args)
    params = SamplingParams(temperature=s["temperature"], top_p=s["top_p"], max_tokens=s["max_tokens"], seed=0)
    llm.generate(ids[0][:4], params, use_tqdm=False)  # warm-up
    wall, pt, ot, n = 0.0, 0, 0, 0
    for cell in ids:
        t0 = time.perf_counter()
        outs = llm.generate(cell, params, use_tqdm=False)
        wall += time.perf_counter() - t0
        n += len(outs)
        pt += sum(len(o.prompt_token_ids) for o in outs)
        ot += sum(len(o.outputs[0].token_ids) for o in outs)
    return {"name": "(a) bare LLM.generate", "engines": 1, "prompts": n, "prompt_tokens": pt,
            "output_tokens": ot, "wall_s": wall}


def _generator(args, actors: int):
    from polysql_ray.generation.prompts import Sampling
    from polysql_ray.generation.vllm import VLLMGenerator

    s = _sampling(args)
    return VLLMGenerator("bench", args.model, sampling=Sampling(**s), max_model_len=args.max_model_len,
                         tensor_parallel_size=args.tp, num_actors=actors, dtype=args.dtype,
                         gpus_per_actor=args.gpus_per_actor / actors if args.gpus_per_actor else 0,
                         gpu_memory_utilization=args.gpu_memory_utilization / actors
                         if args.gpus_per_actor and args.gpus_per_actor < actors else args.gpu_memory_utilization,
                         engine_args=json.loads(args.engine_args), env=json.loads(args.env))


def child_pool(args, cells: list[list], actors: int) -> Row:
    """(b1): the pool's API (``VLLMGenerator.chat``: the same engine call as ``generate``) per cell."""
    import ray

    ray.init(include_dashboard=False, log_to_driver=False)
    g = _generator(args, actors)
    try:
        g.start()
        g.chat(cells[0][:4])  # warm-up
        wall, pt, ot, n = 0.0, 0, 0, 0
        for cell in cells:
            t0 = time.perf_counter()
            preds = g.chat(cell)
            wall += time.perf_counter() - t0
            n += len(preds)
            pt += sum(p.prompt_tokens for p in preds)
            ot += sum(p.completion_tokens for p in preds)
    finally:
        g.close()
        ray.shutdown()
    return {"name": f"(b1) pool API, {actors} actor(s)", "engines": actors, "prompts": n, "prompt_tokens": pt,
            "output_tokens": ot, "wall_s": wall}


def run_sweep(args, actors: int, workdir: Path) -> Row:
    """(b2): ``python -m polysql_ray +sweep=...`` with all cells prefetched; the generation
    window minus the logged engine start, tokens from the generations store."""
    import duckdb

    out = workdir / f"sweep-{actors}"
    cmd = [sys.executable, "-m", "polysql_ray", f"+sweep={args.sweep}", f"results_dir={out}", "progress=false",
           f"model.model_id={args.model}", f"model.num_actors={actors}", f"model.max_model_len={args.max_model_len}",
           f"model.sampling.max_tokens={args.max_tokens}", f"model.sampling.temperature={args.temperature}",
           f"model.dtype={args.dtype}", f"model.gpus_per_actor={args.gpus_per_actor / actors if args.gpus_per_actor else 0}",
           "pipeline.generation_prefetch_cells=64", "pipeline.generation_batch_size=0", *args.sweep_override]
    p = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"sweep failed ({p.returncode}): {p.stderr[-2000:]}")
    ready = float(re.search(r"engine\(s\) ready in ([0-9.]+)s", p.stdout + p.stderr).group(1))
    summary = json.loads(sorted((out / "runs").glob("*/summary.json"))[-1].read_text())
    stage = next(v for k, v in summary["stages"].items() if k.startswith("generate["))
    n, pt, ot = duckdb.connect().sql(
        f"SELECT count(*), sum(prompt_tokens), sum(completion_tokens) FROM read_parquet('{out}/generations/**/*.parquet') "
        "WHERE status <> 'error'").fetchall()[0]
    return {"name": f"(b2) sweep, {actors} actor(s)", "engines": actors, "prompts": n, "prompt_tokens": int(pt),
            "output_tokens": int(ot), "wall_s": stage["last_end_s"] - stage["first_start_s"] - ready,
            "note": f"engine start {ready:.1f}s excluded; execution+scoring ran alongside"}


def child_raydata(args, cells: list[list]) -> Row:
    """(c): a ``ray.data.llm`` processor (``build_processor``; ``build_llm_processor`` in older
    Ray) over all prompts: chat template, tokenize, vLLM, detokenize stages. On CPU the engine
    stage asks for a CPU bundle instead of its default GPU one, and the cluster declares at
    least 8 logical CPUs (each stage actor takes 1)."""
    import ray
    import ray.data.llm as rdl

    build = getattr(rdl, "build_processor", None) or getattr(rdl, "build_llm_processor")
    # the processor runs 4 actor stages (chat template, tokenize, vLLM, detokenize) plus its map
    # tasks, each asking for 1 CPU: on a 2-core node they wait on each other forever (seen here:
    # the engine stage "pending" behind the chat-template and tokenizer actors), so the cluster
    # declares at least 8 logical CPUs; the stages other than the engine are light
    ray.init(include_dashboard=False, log_to_driver=False, num_cpus=max(8, os.cpu_count() or 1))
    kw = _engine_kw(args)
    model = kw.pop("model")
    kw.pop("seed", None)
    s = _sampling(args)
    extra = dict(json.loads(args.raydata_kwargs))
    if not args.gpus_per_actor:
        extra.setdefault("placement_group_config", {"bundle_per_worker": {"CPU": 1}})
    env = json.loads(args.env)
    if env:
        extra.setdefault("runtime_env", {"env_vars": env})
    cfg = rdl.vLLMEngineProcessorConfig(model_source=model, engine_kwargs=kw, concurrency=1, batch_size=64, **extra)
    proc = build(cfg, preprocess=lambda row: {"messages": row["messages"], "sampling_params": s},
                 postprocess=lambda row: {"n_in": row.get("num_input_tokens", 0),
                                          "n_out": row.get("num_generated_tokens", 0)})
    items = [{"messages": m} for cell in cells for m in cell]
    t0 = time.perf_counter()
    rows = proc(ray.data.from_items(items)).take_all()
    wall = time.perf_counter() - t0
    ray.shutdown()
    return {"name": "(c) ray.data.llm processor", "engines": 1, "prompts": len(rows),
            "prompt_tokens": sum(int(r["n_in"] or 0) for r in rows),
            "output_tokens": sum(int(r["n_out"] or 0) for r in rows), "wall_s": wall,
            "note": "includes its engine's start: a processor builds its engine for each dataset it runs"}


def in_child(args, what: str, workdir: Path, actors: int = 1) -> Row:
    """Run ``child_<what>`` in a fresh process; returns its row (or an ``error`` row)."""
    out = workdir / f"{what}-{actors}.json"
    cmd = [sys.executable, __file__, "--child", what, "--child-out", str(out), "--child-actors", str(actors),
           *args.passthrough]
    p = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    if p.returncode != 0 or not out.exists():
        tail = [ln for ln in (p.stderr or "").splitlines() if ln.strip()][-1:] or ["no output"]
        return {"name": what, "error": tail[0][:300]}
    return json.loads(out.read_text())


def print_table(rows: list[Row]) -> None:
    """One line per row, then each pool's output tokens/s per engine over bare's."""
    print(f"{'measurement':34s} {'prompts':>7s} {'prompt_tok':>10s} {'out_tok':>8s} {'wall_s':>8s} "
          f"{'out_tok/s':>10s} {'tot_tok/s':>10s}")
    bare = next((r for r in rows if r["name"].startswith("(a)") and "error" not in r), None)
    for r in rows:
        if "error" in r:
            print(f"{r['name']:34s} did not run: {r['error']}")
            continue
        w = max(r["wall_s"], 1e-9)
        print(f"{r['name']:34s} {r['prompts']:7d} {r['prompt_tokens']:10d} {r['output_tokens']:8d} {w:8.2f} "
              f"{r['output_tokens'] / w:10.1f} {(r['prompt_tokens'] + r['output_tokens']) / w:10.1f}"
              + (f"   ({r['note']})" if r.get("note") else ""))
    if bare:
        b = bare["output_tokens"] / bare["wall_s"]
        for r in rows:
            if "error" not in r and not r["name"].startswith("(a)"):
                x = r["output_tokens"] / r["wall_s"]
                print(f"ratio {r['name']} / bare: {x / b:.3f} in all, {x / b / r['engines']:.3f} per engine")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="model dir (default: build the tiny test model)")
    ap.add_argument("--sweep", default="tiny_vllm", help="sweep whose cells give the prompts")
    ap.add_argument("--sweep-override", action="append", default=[], help="extra override of the (b2) sweep")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="> 0: seeded random sampling (on CPU the engines run without chunked prefill, README)")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--gpus-per-actor", type=float, default=0.0, help="GPUs of the whole pool (0: CPU)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--engine-args", default='{"enforce_eager": true}', help="JSON: extra vllm.LLM kwargs")
    ap.add_argument("--env", default='{"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}',
                    help="JSON: env of every engine process")
    ap.add_argument("--raydata-kwargs", default='{"log_engine_metrics": false}',
                    help="JSON: extra vLLMEngineProcessorConfig kwargs (engine metrics off: vLLM's Ray "
                         "metrics logger imports ray.serve, whose deps the vLLM venv lacks)")
    ap.add_argument("--actors", default="1,2", help="pool sizes to measure")
    ap.add_argument("--skip", default="", help="comma list of a,b1,b2,c to leave out")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--child-actors", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    return args


def main(argv=None) -> list[Row]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    os.environ.update(json.loads(args.env))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.child:
        cells = cells_messages(args.model, args.sweep)
        fn = {"bare": lambda: child_bare(args, cells), "pool": lambda: child_pool(args, cells, args.child_actors),
              "raydata": lambda: child_raydata(args, cells)}[args.child]
        Path(args.child_out).write_text(json.dumps(fn()))
        return []
    with tempfile.TemporaryDirectory(prefix="vllm_bench_") as tmp:
        work = Path(tmp)
        if args.model is None:
            sys.path.insert(0, str(REPO / "tests"))
            from tiny_model import build_tiny_model

            args.model = str(build_tiny_model(work / "tiny"))
            argv += ["--model", args.model]
        args.passthrough = [a for a in argv]
        cells = cells_messages(args.model, args.sweep)
        print(f"model={args.model} cells={len(cells)} prompts={sum(map(len, cells))} max_tokens={args.max_tokens} "
              f"temperature={args.temperature} seed=0 dtype={args.dtype} tp={args.tp}")
        skip = set(filter(None, args.skip.split(",")))
        actors = [int(x) for x in args.actors.split(",") if x]
        rows = []
        if "a" not in skip:
            rows.append(in_child(args, "bare", work))
        for n in actors:
            if "b1" not in skip:
                rows.append(in_child(args, "pool", work, n))
            if "b2" not in skip:
                try:
                    rows.append(run_sweep(args, n, work))
                except Exception as exc:  # noqa: BLE001 - printed as a row
                    rows.append({"name": f"(b2) sweep, {n} actor(s)", "error": str(exc)[-300:]})
        if "c" not in skip:
            rows.append(in_child(args, "raydata", work))
        print_table(rows)
        return rows


if __name__ == "__main__":
    main()
