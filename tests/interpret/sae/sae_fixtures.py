"""Shared by the SAE tests: tiny random causal LMs with a byte tokenizer (fast, no downloads)."""
import numpy as np

from glassformer.io.pretrained import save_pretrained
from glassformer.models import gpt2, llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer

D_MODEL = 16


def byte_tokenizer() -> BPETokenizer:
    return BPETokenizer({bytes([b]): b for b in range(256)}, [])


def tiny_llama(seed: int = 0) -> Model:
    cfg = llama.LlamaConfig(vocab_size=256, n_layer=3, n_head=4, n_kv_head=2, d_model=D_MODEL,
                            d_ff=32, max_seq_len=64)
    return Model(cfg, llama.init_params(cfg, np.random.default_rng(seed)), byte_tokenizer())


def tiny_gpt2(seed: int = 0) -> Model:
    cfg = gpt2.GPT2Config(vocab_size=256, n_layer=3, n_head=2, d_model=D_MODEL, max_seq_len=64)
    return Model(cfg, gpt2.init_params(cfg, np.random.default_rng(seed)), byte_tokenizer())


def saved_llama(folder) -> str:
    save_pretrained(tiny_llama(), folder)
    return str(folder)
