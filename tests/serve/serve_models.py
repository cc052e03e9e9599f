"""Tiny models for the serve tests: a random LLaMA with a byte-level tokenizer and ChatML
specials (as tests/tasks/test_chat_session.py builds it), and a tiny BERT sentence encoder."""
import numpy as np

from glassformer.models import bert, llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

SPECIALS = {"<|im_start|>": 128, "<|im_end|>": 129, "<|endoftext|>": 130}
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat"]


def tiny_chat_model(max_seq_len: int = 256, seed: int = 0) -> Model:
    """One token per ASCII byte: every reply is ASCII text that tokenizes back to its ids."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(128)}, [], special_tokens=SPECIALS)
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=max_seq_len, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=32)
    params = llama.init_params(cfg, np.random.default_rng(seed))
    for key in params:  # sharper than init, so greedy choices are not near-ties
        if params[key].ndim == 2:
            params[key] = (params[key] * 6.0).astype(np.float32)
    return Model(cfg, params, tokenizer)


def tiny_encoder(seed: int = 0) -> Model:
    tokenizer = WordPieceTokenizer({word: i for i, word in enumerate(WORDS)})
    cfg = bert.BertConfig(vocab_size=len(WORDS), max_seq_len=16, n_layer=1, n_head=2,
                          d_model=16, d_ff=32)
    return Model(cfg, bert.init_params(cfg, np.random.default_rng(seed)), tokenizer)
