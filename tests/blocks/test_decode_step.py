"""blocks/decode_step.py: a decoded position through the fused layer equals the layers' own path
(block_forward, the reference), for LLaMA-style and GPT-2-style models, one row or a left-padded
batch with per-row positions, packed or unpacked weights. The composition is run with both kernel
modules: the NumPy twins (kernels/decode_numpy.py) and the compiled ones where numba is
installed; the logits and every cache column written must agree."""
from __future__ import annotations

import numpy as np
import pytest

import glassformer.models.common as common
from glassformer.blocks.kv_cache import KVCache
from glassformer.generate.generate import generate
from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import KERNELS_ENV, _compiled, numba_importable
from glassformer.models import gpt2, llama
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model

PATHS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]

CONFIGS = {
    "llama": lambda: llama.LlamaConfig(vocab_size=50, max_seq_len=32, n_layer=2, n_head=4,
                                       n_kv_head=2, d_model=32),
    "qwen2": lambda: llama.LlamaConfig(vocab_size=50, max_seq_len=32, n_layer=2, n_head=4,
                                       n_kv_head=1, d_model=32, qkv_bias=True),
    "gpt2": lambda: gpt2.GPT2Config(vocab_size=50, max_seq_len=32, n_layer=2, n_head=4,
                                    d_model=32),
    "gpt2_erf": lambda: gpt2.GPT2Config(vocab_size=50, max_seq_len=32, n_layer=2, n_head=4,
                                        d_model=32, activation="gelu"),
}


def make_model(name: str, packed: bool) -> Model:
    cfg = CONFIGS[name]()
    family = gpt2 if isinstance(cfg, gpt2.GPT2Config) else llama
    params = family.init_params(cfg, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    for key in params:  # non-trivial norms and biases, so a misplaced one shows
        if key.endswith((".b", ".w", "bq", "bk", "bv", "bo", "b_up", "b_down")):
            params[key] = params[key] + 0.1 * rng.standard_normal(params[key].shape,
                                                                 dtype=np.float32)
    if packed:
        lay_out_for_decoding(params)
    return Model(cfg, params)


def step_logits(model: Model, kernels, monkeypatch, ids, mask):
    """Prefill ids[:, :-1] (NumPy path), then one decoded step of ids[:, -1:] through `kernels`
    (None: the reference blocks). Returns (logits (B, V), the cache)."""
    monkeypatch.setattr(common, "decode_kernels", lambda: None)
    cache = model.new_cache(ids.shape[0], ids.shape[1] + 2)
    positions = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    key_mask = None if mask.all() else mask
    model.forward(ids[:, :-1], attention_mask=None if key_mask is None else key_mask[:, :-1],
                  positions=positions[:, :-1], kv_cache=cache, last_only=True)
    cache.advance(ids.shape[1] - 1)
    monkeypatch.setattr(common, "decode_kernels", lambda: kernels)
    logits, ctx = model.forward(ids[:, -1:], attention_mask=key_mask, positions=positions[:, -1:],
                                kv_cache=cache, last_only=True)
    return logits[:, -1], cache


def kernels_of(path: str):
    return decode_numpy if path == "numpy" else _compiled()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("rows", [2, 1])   # one row: a packed layer is one call (layer_step)
def test_fused_step_equals_the_blocks(monkeypatch, path, name, packed, rows):
    model = make_model(name, packed)
    ids = np.random.default_rng(2).integers(0, 50, (rows, 7))
    mask = np.ones(ids.shape, bool)
    mask[0, :3] = False                                  # row 0 left-padded
    expected, ref_cache = step_logits(model, None, monkeypatch, ids, mask)
    logits, cache = step_logits(model, kernels_of(path), monkeypatch, ids, mask)
    np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-4)
    for mine, theirs in zip(cache.k + cache.v, ref_cache.k + ref_cache.v):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("path", PATHS)
def test_generate_gives_the_same_greedy_tokens_on_both_paths(monkeypatch, path):
    model = make_model("llama", packed=True)
    prompt = np.array([[3, 1, 4, 1, 5]])
    monkeypatch.setenv(KERNELS_ENV, "numpy")
    expected = np.stack(list(generate(model, prompt, max_new_tokens=12, temperature=0.0)))
    monkeypatch.setenv(KERNELS_ENV, path)
    tokens = np.stack(list(generate(model, prompt, max_new_tokens=12, temperature=0.0)))
    np.testing.assert_array_equal(tokens, expected)


def test_other_layers_keep_the_blocks(monkeypatch):
    """A prompt (T > 1) or a forward without a cache never reaches the kernels."""
    def refuse():
        raise AssertionError("the fused step ran")
    model = make_model("llama", packed=True)
    monkeypatch.setattr(common, "decode_kernels", refuse)
    cache: KVCache = model.new_cache(1, 8)
    model.forward(np.array([[1, 2, 3]]), kv_cache=cache, last_only=True)   # a prompt
    model.forward(np.array([[1]]))                                          # no cache
