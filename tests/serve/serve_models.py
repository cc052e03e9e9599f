"""Tiny models for the serve tests: a random LLaMA with a byte-level tokenizer and ChatML
specials (as tests/tasks/test_chat_session.py builds it), the same with DeepSeek-V3's latent
attention (MLA: its KV cache keeps a latent R and a RoPE key Dr, two widths), the same as a
Qwen3.5-shaped hybrid (a recurrent state per row beside the KV columns), and a tiny BERT
sentence encoder."""
import numpy as np

from glassformer.io.pretrained import save_pretrained
from glassformer.models import bert, deepseek_v3, llama, qwen3_5, qwen3_next
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


def byte_tokenizer(n_bytes: int = 128) -> BPETokenizer:
    """One token per byte and the ChatML specials after them."""
    specials = {name: n_bytes + i for i, name in enumerate(SPECIAL_NAMES)}
    return BPETokenizer({bytes([b]): b for b in range(n_bytes)}, [], special_tokens=specials)


def sharpened(params: dict) -> dict:
    """Matrices 6x larger than init, so greedy choices are not near-ties."""
    return {key: (value * 6.0).astype(np.float32) if value.ndim == 2 else value
            for key, value in params.items()}


def tiny_chat_model(max_seq_len: int = 256, seed: int = 0, n_bytes: int = 128) -> Model:
    """One token per byte, ASCII only by default: every reply is then text that tokenizes back
    to its ids. n_bytes=256 reads any UTF-8 (Chinese takes 3 tokens a character)."""
    tokenizer = byte_tokenizer(n_bytes)
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=max_seq_len, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=32)
    return Model(cfg, sharpened(llama.init_params(cfg, np.random.default_rng(seed))), tokenizer)


def tiny_mla_chat_model(max_seq_len: int = 256, seed: int = 0) -> Model:
    """tiny_chat_model's tokenizer on a DeepSeek-V3 (MLA) decoder: its cache per token and
    layer is the latent (R = 8) in `k` and the RoPE key (Dr = 4) in `v`."""
    tokenizer = byte_tokenizer()
    cfg = deepseek_v3.DeepseekV3Config(
        vocab_size=tokenizer.vocab_size, max_seq_len=max_seq_len, n_layer=2, n_head=4,
        d_model=32, d_ff=48, q_lora_rank=12, kv_lora_rank=8, qk_nope_head_dim=6,
        qk_rope_head_dim=4, v_head_dim=6)
    params = deepseek_v3.FAMILY.init_params(cfg, np.random.default_rng(seed))
    return Model(cfg, sharpened(params), tokenizer)


def tiny_hybrid_chat_model(max_seq_len: int = 256, seed: int = 0) -> Model:
    """tiny_chat_model's tokenizer on a Qwen3.5-shaped hybrid: Gated DeltaNet layers 0-2 (a
    fixed state per row each) and gated full attention in layer 3 (keys and values by column);
    chunks of 4 tokens, so a prompt runs several chunks of the delta rule."""
    tokenizer = byte_tokenizer()
    cfg = qwen3_5.Qwen35Config(vocab_size=tokenizer.vocab_size, max_seq_len=max_seq_len,
                               n_layer=4, full_layers=(3,), chunk_size=4)
    params = qwen3_next.init_params(cfg, np.random.default_rng(seed))
    return Model(cfg, sharpened(params), tokenizer)


def tiny_encoder(seed: int = 0) -> Model:
    tokenizer = WordPieceTokenizer({word: i for i, word in enumerate(WORDS)})
    cfg = bert.BertConfig(vocab_size=len(WORDS), max_seq_len=16, n_layer=1, n_head=2,
                          d_model=16, d_ff=32)
    return Model(cfg, bert.init_params(cfg, np.random.default_rng(seed)), tokenizer)


def save_chat_model(path, max_seq_len: int = 256, n_bytes: int = 128, model: Model | None = None):
    """The tiny chat model (or `model`) with TEMPLATE, saved as an HF folder at `path`."""
    model = model or tiny_chat_model(max_seq_len=max_seq_len, n_bytes=n_bytes)
    model.tokenizer.config = TokenizerConfig(TEMPLATE, {"eos_token": "<|im_end|>"})
    save_pretrained(model, path)
    return path


# Qwen3-style: the generation prompt opens <think> unless enable_thinking is false, which closes it
# (as Qwen3's own template does, there with an empty thinking)
THINKING_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% else %}{{ '<think>\\n' }}{% endif %}{% endif %}")


def thinking_model() -> Model:
    """tiny_chat_model with <think> and </think> as control tokens and THINKING_TEMPLATE."""
    names = SPECIAL_NAMES + ("<think>", "</think>")
    tokenizer = BPETokenizer({bytes([b]): b for b in range(128)}, [],
                             special_tokens={name: 128 + i for i, name in enumerate(names)})
    tokenizer.config = TokenizerConfig(THINKING_TEMPLATE, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=128, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=32)
    return Model(cfg, sharpened(llama.init_params(cfg, np.random.default_rng(0))), tokenizer)
