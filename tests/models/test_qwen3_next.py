"""Qwen3-Next / Qwen3.5 hybrid family, without transformers: shapes and dtypes, float64 finite
differences on every kind of param, cached decoding (a state per linear layer, keys and values
per full layer) equal to one forward, per-row state bytes that do not grow with the context, and
bad configs in one line."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.delta_state import HybridCache
from glassformer.blocks.kv_cache import KVCache
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.models import qwen3_next
from glassformer.models.model import Model
from glassformer.models.qwen3_next import Qwen3NextConfig

FD_TOL = 1e-6   # float64 central differences against backward, relative


def tiny(**overrides):
    return Qwen3NextConfig(**{"vocab_size": 31, "n_layer": 4, "full_layers": (1, 3),
                              "chunk_size": 4, **overrides})


def noisy_params(cfg, dtype=np.float64):
    rng = np.random.default_rng(0)
    params = qwen3_next.init_params(cfg, rng)
    return {k: (v + 0.05 * rng.standard_normal(v.shape)).astype(dtype) for k, v in params.items()}


def test_shapes_and_dtype():
    cfg = tiny()
    params = qwen3_next.init_params(cfg, np.random.default_rng(0))
    assert {k: v.shape for k, v in params.items()} == qwen3_next.param_shapes(cfg)
    logits, ctx = qwen3_next.forward(params, np.zeros((2, 5), np.int64), cfg)
    assert logits.shape == (2, 5, 31) and logits.dtype == np.float32
    grads = qwen3_next.backward(np.ones_like(logits), ctx)
    assert set(grads) == set(params)
    assert all(grads[k].dtype == np.float32 for k in grads)


@pytest.mark.parametrize("name", ["blocks.0.linear.a_log", "blocks.0.linear.dt_bias",
                                  "blocks.0.linear.conv", "blocks.0.linear.wk",
                                  "blocks.0.linear.norm", "blocks.1.attn.w_gate",
                                  "blocks.1.attn.q_norm", "blocks.3.mlp.router",
                                  "blocks.2.norm1.w", "tok_emb"])
def test_backward_matches_finite_differences(name):
    cfg = tiny(n_experts=4, shared_d_ff=6)
    params = noisy_params(cfg)
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 31, (2, 9))
    mask = np.ones((2, 9), bool)
    mask[1, :2] = False
    logits, ctx = qwen3_next.forward(params, ids, cfg, key_mask=mask)
    weight = rng.standard_normal(logits.shape)
    grad = qwen3_next.backward(weight, ctx)[name]
    eps = 1e-6
    for _ in range(3):
        idx = tuple(int(rng.integers(0, n)) for n in params[name].shape)
        values = []
        for sign in (1, -1):
            changed = dict(params)
            changed[name] = params[name].copy()
            changed[name][idx] += sign * eps
            values.append(float((qwen3_next.forward(changed, ids, cfg, key_mask=mask)[0]
                                 * weight).sum()))
        numeric = (values[0] - values[1]) / (2 * eps)
        assert abs(numeric - grad[idx]) <= FD_TOL * max(1.0, abs(numeric)), (name, idx)


def test_head_rows_give_those_rows_and_their_gradients():
    cfg = tiny()
    params = noisy_params(cfg)
    ids = np.random.default_rng(5).integers(0, 31, (2, 6))
    rows = (np.array([0, 1, 1]), np.array([2, 0, 5]))
    full, full_ctx = qwen3_next.forward(params, ids, cfg)
    some, ctx = qwen3_next.forward(params, ids, cfg, head_rows=rows)
    np.testing.assert_allclose(some, full[rows], atol=1e-12)
    dfull = np.zeros_like(full)
    dfull[rows] = 1.0
    want = qwen3_next.backward(dfull, full_ctx)
    got = qwen3_next.backward(np.ones_like(some), ctx)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], atol=1e-10)
    with pytest.raises(GlassformerError, match="LoRA adapters"):
        qwen3_next.forward({**params, "blocks.0.linear.wq.lora_A": np.zeros((64, 2))}, ids, cfg)


def test_cached_decoding_equals_one_forward():
    cfg = tiny(n_experts=4, shared_d_ff=6)
    model = Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))
    ids = np.random.default_rng(2).integers(0, 31, (2, 11))
    whole = model(ids)
    cache = model.new_cache(2, 16)
    assert isinstance(cache, HybridCache)
    steps = [model.forward(ids[:, :6], kv_cache=cache)[0]]
    cache.advance(6)
    for t in range(6, 11):
        steps.append(model.forward(ids[:, t:t + 1], kv_cache=cache)[0])
        cache.advance(1)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), whole, atol=1e-5)


def test_generate_greedy_equals_recomputing():
    cfg = tiny()
    model = Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))
    ids = np.random.default_rng(3).integers(0, 31, (1, 5))
    cached = list(generate(model, ids, max_new_tokens=6, temperature=0.0))
    seq = ids
    for token in cached:
        assert int(np.argmax(model(seq)[0, -1])) == int(token[0])
        seq = np.concatenate([seq, token[:, None]], axis=1)


def test_state_bytes_per_row_do_not_grow_with_context():
    """By arithmetic (bytes_for), not RSS: a linear layer's state is the same at 1k and 32k, and
    only the full layers' keys and values grow."""
    cfg = tiny(max_seq_len=32768)
    model = Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))
    kv, state = qwen3_next.kv_layout(cfg), qwen3_next.state_layout(cfg)
    linear_types = tuple("linear_attention" for _ in range(cfg.n_layer))
    at_1k = HybridCache.hybrid_bytes(kv, state, linear_types, rows=1, context=1024)
    at_32k = HybridCache.hybrid_bytes(kv, state, linear_types, rows=1, context=32768)
    assert at_1k == at_32k == cfg.n_layer * state.floats_per_row() * 4
    full = sum(kind == "full_attention" for kind in cfg.layer_types())
    grown = model.cache_bytes(1, 32768) - model.cache_bytes(1, 1024)
    assert grown == KVCache.bytes_for(kv, layers=full, rows=1, context=32768 - 1024)
    small = model.new_cache(1, 8)
    assert model.cache_bytes(1, 8) == sum(a.nbytes for a in small.k + small.v) + sum(
        s.conv.nbytes + s.recurrent.nbytes for s in small.states.values())


def test_state_bytes_measured_after_1k_and_32k_tokens():
    """Measured, not computed: a linear-only model's HybridCache after a prefill of 1,024 and of
    32,768 tokens holds the same bytes per row (the arrays' own .nbytes, bench/window_rss.py)."""
    from bench.window_rss import DELTA_LENGTHS, delta_state_bytes
    measured = delta_state_bytes()
    assert tuple(measured) == DELTA_LENGTHS == (1024, 32768)
    assert measured[1024] == measured[32768] > 0

def test_a_continued_prompt_reuses_the_state_and_a_cut_back_starts_over():
    """Turn 2 extends turn 1 (prompt + reply): only its new tokens are prefilled, and its tokens
    equal a fresh run's. A cut back cannot forget a recurrent state: it empties the cache."""
    cfg = tiny()
    model = Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))
    rng = np.random.default_rng(4)
    first = rng.integers(0, 31, (1, 5))
    cache = model.new_cache(1, 32)
    reply = np.stack(list(generate(model, first, max_new_tokens=4, temperature=0.0,
                                   kv_cache=cache)), axis=1)
    assert cache.length == 5 + 3            # the last reply token is sampled, not yet fed
    second = np.concatenate([first, reply, rng.integers(0, 31, (1, 3))], axis=1)
    cache.keep(cache.length)               # a continued chat keeps everything
    reused = list(generate(model, second, max_new_tokens=5, temperature=0.0, kv_cache=cache))
    fresh = list(generate(model, second, max_new_tokens=5, temperature=0.0))
    np.testing.assert_array_equal(np.stack(reused), np.stack(fresh))
    cache.keep(4)
    assert cache.length == 0 and not any(s.recurrent.any() for s in cache.states.values())
    with pytest.raises(GlassformerError, match="cannot keep 99 positions"):
        cache.keep(99)


def test_a_linear_only_model_continues_from_a_cache_handed_to_generate():
    """No full-attention layer: the cache has no keys or values, only states; its rows are the
    batch it was made for (a mismatch is one line)."""
    cfg = tiny(full_layers=())
    model = Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))
    ids = np.random.default_rng(5).integers(0, 31, (1, 6))
    cache = model.new_cache(1, 16)
    assert cache.rows == 1 and not cache.k
    reused = list(generate(model, ids, max_new_tokens=4, temperature=0.0, kv_cache=cache))
    fresh = list(generate(model, ids, max_new_tokens=4, temperature=0.0))
    np.testing.assert_array_equal(np.stack(reused), np.stack(fresh))
    with pytest.raises(GlassformerError, match="holds a batch of 1 but the prompt has 2 rows"):
        list(generate(model, np.repeat(ids, 2, axis=0), max_new_tokens=1,
                      kv_cache=model.new_cache(1, 16)))


@pytest.mark.parametrize("overrides,message", [
    ({"full_layers": (4,)}, "full_layers names layer 4"),
    ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
    ({"linear_v_heads": 3}, "multiple of linear_num_key_heads"),
    ({"partial_rotary_factor": 0.1}, "partial_rotary_factor"),
])
def test_bad_configs_in_one_line(overrides, message):
    with pytest.raises(GlassformerError, match=message):
        tiny(**overrides)
