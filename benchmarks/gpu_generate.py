"""Benchmark: output tokens/s of our vLLM generator pool vs vLLM's own offline ``LLM.generate``.

Both sides get exactly the same prompts (our rendered prompts, chat-templated by the model's
tokenizer and passed as token ids), the same model, ``max_model_len``, dtype and greedy
seeded sampling. Printed: prompts, prompt tokens, output tokens and output tokens/s for each
side, and ours / baseline. Engine start-up is excluded from both timings (each side runs a
short warm-up first). The baseline runs in a child process so its GPU memory is freed before
our pool starts. Asserts nothing; needs a GPU machine with vLLM (``pip install 'polysql_ray[gpu]'``).

Usage::

    python benchmarks/gpu_generate.py Qwen/Qwen2.5-Coder-7B-Instruct [--num-prompts 512]
        [--prompts quickstart|synthetic] [--max-tokens 256] [--tp 1] [--num-actors 1]
    python benchmarks/gpu_generate.py MODEL --dry-run     # build prompts only (no GPU needed)
"""
from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polysql_ray.datasets.example import Example, SourceDatabase  # noqa: E402
from polysql_ray.generation.prompts import Sampling, render_all  # noqa: E402

SYNTH_TABLES = ("customers", "orders", "products", "stores", "employees", "payments")


def synthetic_examples(n: int, workdir: Path) -> list[Example]:
    """``n`` questions over a synthetic 6-table SQLite database written to ``workdir``."""
    db = workdir / "synthetic.sqlite"
    con = sqlite3.connect(db)
    for t in SYNTH_TABLES:
        con.execute(f'CREATE TABLE IF NOT EXISTS "{t}" ("{t}_id" INTEGER PRIMARY KEY, "name" TEXT, '
                    f'"amount" REAL, "created_at" TEXT, "store_id" INTEGER REFERENCES stores(stores_id))')
        con.executemany(f'INSERT OR IGNORE INTO "{t}" VALUES (?,?,?,?,?)',
                        [(i, f"{t}-{i}", i * 1.5, f"2024-01-{i % 28 + 1:02d}", i % 5) for i in range(50)])
    con.commit()
    con.close()
    src = SourceDatabase("synthetic", "synthetic", "sqlite", str(db))
    out = []
    for i in range(n):
        t = SYNTH_TABLES[i % len(SYNTH_TABLES)]
        q = (f"For each store, what is the total amount of {t} created after day {i % 28 + 1} of January 2024, "
             f"listing only stores whose total exceeds {i % 97}, highest total first?")
        out.append(Example("synthetic", str(i), "synthetic", q, "", "SELECT 1", "sqlite", "sqlite", src, position=i))
    return out


def quickstart_examples(n: int, workdir: Path) -> list[Example]:
    """The packaged quickstart benchmark's questions, repeated to ``n``."""
    from polysql_ray.datasets.registry import load_dataset

    base = load_dataset({"name": "quickstart", "layout": "quickstart", "root": str(workdir / "qs"),
                         "split": "dev", "source_engine": "sqlite", "gold_dialect": "sqlite",
                         "limit": None, "db_ids": None})
    out = []
    for i in range(n):
        ex = base[i % len(base)]
        out.append(Example(ex.dataset, f"{ex.question_id}#{i}", ex.db_id, ex.question, ex.evidence,
                           ex.gold_sql, ex.gold_dialect, ex.source_engine, ex.database, position=i))
    return out


def build_examples(args, workdir: Path) -> list[Example]:
    """The benchmark's examples: quickstart (falls back to synthetic when it cannot load)."""
    if args.prompts == "quickstart":
        try:
            return quickstart_examples(args.num_prompts, workdir)
        except Exception as e:  # noqa: BLE001 - fall back to synthetic, say why
            print(f"quickstart prompts unavailable ({type(e).__name__}: {e}); using synthetic")
    return synthetic_examples(args.num_prompts, workdir)


def sampling(args) -> Sampling:
    """Greedy, seeded sampling with the requested ``max_tokens`` (same on both sides)."""
    return Sampling(temperature=0.0, top_p=1.0, max_tokens=args.max_tokens, seed=0)


def run_baseline(args, messages_file: Path, out_file: Path) -> None:
    """Child process: plain vLLM ``LLM`` + ``LLM.generate`` on the same token-id prompts."""
    from vllm import LLM, SamplingParams

    messages = json.loads(messages_file.read_text())
    llm = LLM(model=args.model, revision=args.revision or None, tensor_parallel_size=args.tp,
              max_model_len=args.max_model_len, dtype=args.dtype,
              gpu_memory_utilization=args.gpu_memory_utilization, seed=0)
    tok = llm.get_tokenizer()
    prompts = [{"prompt_token_ids": tok(tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False),
                                        add_special_tokens=False)["input_ids"]} for m in messages]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens, seed=0)
    llm.generate(prompts[: min(8, len(prompts))], params, use_tqdm=False)  # warm-up
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - t0
    out_file.write_text(json.dumps({
        "wall_s": wall, "prompts": len(outs),
        "prompt_tokens": sum(len(o.prompt_token_ids) for o in outs),
        "output_tokens": sum(len(o.outputs[0].token_ids) for o in outs)}))


def run_ours(args, examples: list[Example]) -> dict:
    """Our :class:`VLLMGenerator` pool (Ray actors) on the same examples."""
    import ray

    from polysql_ray.generation.vllm import VLLMGenerator

    ray.init(ignore_reinit_error=True, include_dashboard=False)
    g = VLLMGenerator("bench", args.model, revision=args.revision, sampling=sampling(args),
                      max_model_len=args.max_model_len, tensor_parallel_size=args.tp,
                      num_actors=args.num_actors, dtype=args.dtype,
                      gpu_memory_utilization=args.gpu_memory_utilization)
    try:
        g.generate(examples[: min(8, len(examples))], args.dialect, args.level)  # start + warm-up
        t0 = time.perf_counter()
        preds = g.generate(examples, args.dialect, args.level)
        wall = time.perf_counter() - t0
    finally:
        g.close()
    statuses: dict[str, int] = {}
    for p in preds:
        statuses[p.status.value] = statuses.get(p.status.value, 0) + 1
    return {"wall_s": wall, "prompts": len(preds), "prompt_tokens": sum(p.prompt_tokens for p in preds),
            "output_tokens": sum(p.completion_tokens for p in preds), "statuses": statuses}


def parse_args(argv=None):
    """Command-line arguments (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", help="hub id or local model directory")
    ap.add_argument("--revision", default="")
    ap.add_argument("--num-prompts", type=int, default=512)
    ap.add_argument("--prompts", choices=("quickstart", "synthetic"), default="quickstart")
    ap.add_argument("--dialect", default="postgres")
    ap.add_argument("--level", default="11")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--tp", type=int, default=1, help="tensor_parallel_size")
    ap.add_argument("--num-actors", type=int, default=1)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--dry-run", action="store_true", help="build and count prompts only")
    ap.add_argument("--baseline-child", nargs=2, metavar=("MESSAGES_JSON", "OUT_JSON"), help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    """Print tokens/s for vLLM's offline LLM.generate, our pool, and their ratio."""
    args = parse_args(argv)
    if args.baseline_child:
        run_baseline(args, Path(args.baseline_child[0]), Path(args.baseline_child[1]))
        return
    with tempfile.TemporaryDirectory(prefix="gpu_generate_") as tmp:
        work = Path(tmp)
        examples = build_examples(args, work)
        prompts, errors = render_all(examples, args.dialect, args.level)
        if errors:
            print(f"{len(errors)} prompts could not be built, e.g. {next(iter(errors.values()))}")
        ok = [e for e, p in zip(examples, prompts) if p is not None]
        chars = sum(len(p.text) for p in prompts if p is not None)
        print(f"model={args.model} prompts={len(ok)} ({args.prompts}, {args.dialect}, level {args.level}) "
              f"prompt chars={chars} max_tokens={args.max_tokens} tp={args.tp} actors={args.num_actors}")
        if args.dry_run:
            return
        msgs_file, base_file = work / "messages.json", work / "baseline.json"
        msgs_file.write_text(json.dumps([p.messages for p in prompts if p is not None]))
        child = [sys.executable, __file__, args.model, "--revision", args.revision, "--tp", str(args.tp),
                 "--max-model-len", str(args.max_model_len), "--dtype", args.dtype,
                 "--max-tokens", str(args.max_tokens),
                 "--gpu-memory-utilization", str(args.gpu_memory_utilization),
                 "--baseline-child", str(msgs_file), str(base_file)]
        subprocess.run(child, check=True, env=dict(os.environ))
        base = json.loads(base_file.read_text())
        ours = run_ours(args, ok)
    rows = (("vLLM LLM.generate", base), ("polysql_ray vllm pool", ours))
    for name, r in rows:
        print(f"{name:24s} prompts={r['prompts']:5d} prompt_tok={r['prompt_tokens']:8d} "
              f"out_tok={r['output_tokens']:8d} wall={r['wall_s']:8.2f}s "
              f"out_tok/s={r['output_tokens'] / r['wall_s']:10.1f}")
    print(f"statuses (ours): {ours['statuses']}")
    if base["prompt_tokens"] != ours["prompt_tokens"]:
        print(f"WARNING: prompt tokens differ ({base['prompt_tokens']} vs {ours['prompt_tokens']})")
    ratio = (ours["output_tokens"] / ours["wall_s"]) / (base["output_tokens"] / base["wall_s"])
    print(f"ratio ours/baseline (output tokens/s) = {ratio:.3f}")


if __name__ == "__main__":
    main()
