"""Build a tiny, randomly initialised Llama model + tokenizer on local disk (test fixture helper).

No hub access: the tokenizer is trained here with the ``tokenizers`` library on a few SQL
strings, wrapped as ``PreTrainedTokenizerFast`` with a minimal chat template, and the model is
``LlamaForCausalLM(LlamaConfig(hidden_size=64, 2 layers))`` with random weights. Its output is
gibberish: tests assert shapes, statuses and token counts, never content.
"""
from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

CORPUS = [
    "SELECT count(*) FROM singer WHERE age > 30",
    "SELECT name, country FROM singer ORDER BY age DESC LIMIT 3",
    'CREATE TABLE "singer" ("Singer_ID" BIGINT, "Name" TEXT, PRIMARY KEY ("Singer_ID"));',
    "WITH t AS (SELECT 1 AS x) SELECT x FROM t",
    "Question: How many singers do we have? Answer with only the SQL query in a ```sql block.",
    "You are an expert data analyst who writes correct PostgreSQL queries.",
]


def build_tiny_model(path: str | Path, vocab_size: int = 512, seed: int = 0) -> Path:
    """Write a tiny Llama checkpoint + tokenizer to ``path`` and return it.

    Args:
        path: target directory (created).
        vocab_size: BPE vocabulary size to train (byte-level, so any text is encodable).
        seed: torch seed for the random weights.

    Returns:
        ``path`` as a Path, loadable with ``AutoModelForCausalLM``/``AutoTokenizer`` and by
        vLLM (``LLM(model=str(path))``).
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64,
                      max_position_embeddings=8192, bos_token_id=fast.bos_token_id,
                      eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = fast.pad_token_id
    model.save_pretrained(path)
    return path


if __name__ == "__main__":  # python tests/tiny_model.py DIR
    import sys

    print(build_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "tiny_llama"))
