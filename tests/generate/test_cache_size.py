"""Issue 49: the KV cache is sized by the request (prompt + max_new_tokens), never by the
model's declared context, and checked against the memory budget before it is allocated. A model
declaring 10^9 positions generates and chats with a cache of the conversation's size."""
import numpy as np
import pytest

import glassformer.generate.generate as generate_module
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tasks.chat import CACHE_STEP, ChatSession
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

HUGE = 10 ** 9
SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257}
CHATML = ("{% for message in messages %}"
          "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.fixture
def huge_context_model():
    """A tiny LLaMA whose config declares 10^9 positions (RoPE: no table sized by it)."""
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)
    tokenizer.config = TokenizerConfig(CHATML, {"eos_token": "<|im_end|>"})
    cfg = llama.LlamaConfig(vocab_size=258, max_seq_len=HUGE, n_layer=2, n_head=2, n_kv_head=1,
                            d_model=16)
    return Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_generate_sizes_its_cache_by_the_request(huge_context_model, monkeypatch):
    sizes = []
    real = generate_module.new_cache_for

    def recording(model, batch, positions, *, prompt):
        cache = real(model, batch, positions, prompt=prompt)
        sizes.append(cache.max_len)
        return cache

    monkeypatch.setattr(generate_module, "new_cache_for", recording)
    out = list(generate(huge_context_model, np.arange(5), max_new_tokens=4, temperature=0.0))
    assert len(out) == 4 and sizes == [5 + 4]


def test_a_cache_past_the_budget_is_one_line_naming_the_flag(huge_context_model):
    with pytest.raises(GlassformerError, match=r"KV cache of 1 row\(s\) x 100,000,005 positions"
                                               r".*--max-new-tokens"):
        next(generate(huge_context_model, np.arange(5), max_new_tokens=10 ** 8))


def test_chat_grows_its_cache_with_the_conversation(huge_context_model):
    session = ChatSession(huge_context_model, chat_template_of(huge_context_model.tokenizer),
                          [])
    "".join(step.text for step in session.send("hi", max_new_tokens=3, temperature=0.0))
    first = session.kv_cache
    assert first.max_len == CACHE_STEP
    long = "x" * (2 * CACHE_STEP)
    "".join(step.text for step in session.send(long, max_new_tokens=3, temperature=0.0))
    assert session.kv_cache.max_len >= session.turns[-1].prompt_tokens + 3
    assert session.kv_cache.max_len < 4 * CACHE_STEP
    assert session.turns[-1].reused_tokens > 0           # the grown cache kept the first turn


def test_a_grown_cache_keeps_its_filled_positions(huge_context_model):
    cache = huge_context_model.new_cache(1, 4)
    cache.k[0][:] = 1.0
    cache.advance(3)
    longer = cache.with_room(10)
    assert longer.max_len == 10 and longer.length == 3
    assert (longer.k[0][:, :, :3] == 1.0).all() and (longer.k[0][:, :, 3:] == 0.0).all()
    assert cache.with_room(4) is cache
