"""Shared by the evaluate tests: a tiny random LLaMA with a char tokenizer over the task files it reads (fast, no downloads)."""
from pathlib import Path

import numpy as np
import pytest

from glassformer.io.jsonl import read_text
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.char import CharTokenizer

DATA = Path(__file__).resolve().parents[4] / "shared" / "data" / "eval"
FILES = ("copa.jsonl", "arc_easy.jsonl", "winograd_wsc.jsonl", "lambada_openai.jsonl")


def tiny_model(seed: int = 0, max_seq_len: int = 256) -> Model:
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    text = "".join(read_text(DATA / name) for name in FILES) + "\n"
    tokenizer = CharTokenizer.from_text(text)
    cfg = llama.LlamaConfig(vocab_size=len(tokenizer.chars), max_seq_len=max_seq_len, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=16, d_ff=24)
    params = llama.init_params(cfg, np.random.default_rng(seed))
    return Model(cfg, {k: v.astype(np.float32) for k, v in params.items()}, tokenizer)

