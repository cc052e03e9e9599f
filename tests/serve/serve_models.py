"""Tiny models for the serve tests: a random LLaMA with a byte-level tokenizer and ChatML
specials (as tests/tasks/test_chat_session.py builds it), and a tiny BERT sentence encoder."""
import numpy as np

from glassformer.io.pretrained import save_pretrained
from glassformer.models import bert, llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

SPECIAL_NAMES = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")   # ids right after the bytes
# ChatML that refuses one message, so a template that raises can be tested
TEMPLATE = ("{% for message in messages %}{% if message['content'] == 'boom' %}"
            "{{ raise_exception('boom is not allowed') }}{% endif %}"
            "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat"]


def tiny_chat_model(max_seq_len: int = 256, seed: int = 0, n_bytes: int = 128) -> Model:
    """One token per byte, ASCII only by default: every reply is then text that tokenizes back
    to its ids. n_bytes=256 reads any UTF-8 (Chinese takes 3 tokens a character)."""
    specials = {name: n_bytes + i for i, name in enumerate(SPECIAL_NAMES)}
    tokenizer = BPETokenizer({bytes([b]): b for b in range(n_bytes)}, [],
                             special_tokens=specials)
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


def save_chat_model(path, max_seq_len: int = 256, n_bytes: int = 128):
    """The tiny chat model with TEMPLATE, saved as an HF folder at `path`."""
    model = tiny_chat_model(max_seq_len=max_seq_len, n_bytes=n_bytes)
    model.tokenizer.config = TokenizerConfig(TEMPLATE, {"eos_token": "<|im_end|>"})
    save_pretrained(model, path)
    return path
