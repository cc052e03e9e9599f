"""Fixtures of the alignment tests (DPO, GRPO, --adapter): a tiny random LLaMA with a byte
tokenizer and a ChatML template, saved as an HF folder (no downloads)."""
import numpy as np
import pytest

from align_fixtures import tiny_tokenizer
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory):
    """A tiny LLaMA (2 layers, C=16, GQA 2:1, 64 positions) as an HF folder."""
    folder = tmp_path_factory.mktemp("tiny_base")
    tokenizer = tiny_tokenizer()
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=64, n_layer=2,
                            n_head=2, n_kv_head=1, d_model=16)
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return folder


