"""Attention block: float64 gradcheck of every mode, float32 parity with a torch mirror (forward
and every gradient), dtypes, GQA by broadcast (no per-head copy), KV-cache decoding, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.errors import GlassformerError, ShapeError
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases._block_params import exercised, key_mask
from glassformer.gradcheck.cases.attention_block import CASES

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6
# Cached decoding computes the same float64 sums in other groupings (row by row): ~1e-15.
CACHE_ATOL = 1e-12


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _setup(dtype, *, b=2, t=3, c=16, n_head=4, seed=0, **cfg_kwargs):
    cfg = BlockConfig(d_model=c, n_head=n_head, **cfg_kwargs)
    rng = np.random.default_rng(seed)
    std = 1.0 / math.sqrt(c)
    params = init_attention(cfg, rng, std=std, out_std=std, dtype=np.float64)
    params = {name: p.astype(dtype) for name, p in exercised(params, rng).items()}
    x = rng.standard_normal((b, t, c)).astype(dtype)
    return cfg, params, x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cfg_kwargs", [{}, {"position": "rope", "n_kv_head": 2},
                                        {"position": "alibi", "n_kv_head": 1}],
                         ids=["plain", "rope-gqa", "alibi-mqa"])
def test_dtype_is_kept(dtype, cfg_kwargs):
    cfg, params, x = _setup(dtype, **cfg_kwargs)
    memories = [None]
    if cfg.position == "none":           # RoPE and ALiBi are for self-attention
        memories.append(x[:, :2] + 1)
    for mem in memories:
        y, ctx = attention_block_forward(params, x, cfg, causal=mem is None, memory=mem)
        grads, dx, dmemory = attention_block_backward(np.ones_like(y), ctx)
        assert y.dtype == dx.dtype == dtype
        assert all(g.dtype == dtype for g in grads.values())
        assert dmemory is None if mem is None else dmemory.dtype == dtype


@pytest.mark.parametrize("cfg_kwargs", [{}, {"qkv_bias": False, "out_bias": False}],
                         ids=["bias", "no-bias"])
def test_backward_returns_a_gradient_for_every_param(cfg_kwargs):
    cfg, params, x = _setup(np.float64, **cfg_kwargs)
    y, ctx = attention_block_forward(params, x, cfg, causal=True)
    grads, _, _ = attention_block_backward(np.ones_like(y), ctx)
    assert sorted(grads) == sorted(params)
    assert all(grads[name].shape == params[name].shape for name in params)


def test_key_bias_gradient_is_zero_without_rope_and_not_with_it():
    """Softmax ignores a constant added to a row of scores, and q . bk is one: d bk = 0.
    RoPE turns each key by its own angle, so the bias is no longer a constant shift."""
    for position, is_zero in (("none", True), ("rope", False)):
        cfg, params, x = _setup(np.float64, position=position)
        y, ctx = attention_block_forward(params, x, cfg, causal=True)
        dy = np.random.default_rng(1).standard_normal(y.shape)
        grads, _, _ = attention_block_backward(dy, ctx)
        scale = np.abs(grads["bq"]).max()
        assert (np.abs(grads["bk"]).max() < 1e-12 * scale) == is_zero


@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_gqa_broadcasts_kv_heads_instead_of_copying(n_kv_head):
    """Queries are viewed as (B, K, G, T, D) and keys/values stay (B, K, 1, S, D)."""
    cfg, params, x = _setup(np.float32, n_kv_head=n_kv_head, position="rope")
    b, t = x.shape[:2]
    group, d = cfg.n_head // n_kv_head, cfg.dim_per_head
    _, ctx = attention_block_forward(params, x, cfg, causal=True)
    assert ctx.attn.q.shape == (b, n_kv_head, group, t, d)
    assert ctx.attn.k.shape == (b, n_kv_head, 1, t, d)
    assert ctx.attn.v.shape == (b, n_kv_head, 1, t, d)
    assert ctx.attn.softmax.probs.shape == (b, n_kv_head, group, t, t)


@pytest.mark.parametrize("cfg_kwargs", [{"position": "rope", "n_kv_head": 2},
                                        {"position": "alibi", "n_kv_head": 1}],
                         ids=["rope-gqa", "alibi-mqa"])
def test_cached_decoding_matches_a_full_forward(cfg_kwargs):
    """A 3-token prefill then two 1-token steps through a KV cache equal one causal forward."""
    cfg, params, x = _setup(np.float64, t=5, **cfg_kwargs)
    full, _ = attention_block_forward(params, x, cfg, causal=True)
    layout = KVLayout(cfg.kv_heads, cfg.dim_per_head, cfg.dim_per_head)
    cache = KVCache.allocate(layout, n_layer=1, batch=2, max_len=6, dtype=np.float64)
    pieces = []
    for start, end in ((0, 3), (3, 4), (4, 5)):
        y, ctx = attention_block_forward(params, x[:, start:end], cfg, causal=True,
                                         kv_cache=cache)
        cache.advance(end - start)
        pieces.append(y)
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=0, atol=CACHE_ATOL)
    with pytest.raises(GlassformerError, match="inference only"):
        attention_block_backward(np.ones_like(y), ctx)


def test_error_wrong_x_shape_names_legend_letters():
    cfg, params, _ = _setup(np.float32, c=16)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=16\), got \(4, 5, 12\)"):
        attention_block_forward(params, np.zeros((4, 5, 12), np.float32), cfg, causal=True)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=16\), got \(5, 16\)"):
        attention_block_forward(params, np.zeros((5, 16), np.float32), cfg, causal=True)
    with pytest.raises(GlassformerError, match="x to have dtype float32 or float64"):
        attention_block_forward(params, np.zeros((2, 5, 16), np.int64), cfg, causal=True)


def test_error_wrong_memory_shape():
    cfg, params, x = _setup(np.float32, c=16)
    with pytest.raises(ShapeError, match=r"expected memory of shape \(B=2, S, C=16\), "
                                         r"got \(3, 4, 16\)"):
        attention_block_forward(params, x, cfg, causal=False,
                                memory=np.zeros((3, 4, 16), np.float32))


def test_error_rope_with_cross_attention():
    cfg, params, x = _setup(np.float32, position="rope")
    with pytest.raises(GlassformerError, match="RoPE applies to self-attention only"):
        attention_block_forward(params, x, cfg, causal=False, memory=x)


torch = pytest.importorskip("torch")
import torch_blocks  # noqa: E402  (needs torch)

# name: (config overrides, forward options); n_head is 4, the other sizes are drawn per test.
PARITY_MODES = {
    "causal": ({}, dict(causal=True)),
    "no-bias": ({"qkv_bias": False, "out_bias": False}, dict(causal=True)),
    "padding": ({}, dict(causal=False, padding=True)),
    "causal-padding": ({}, dict(causal=True, padding=True)),
    "cross": ({}, dict(causal=False, cross=True, padding=True)),
    "gqa": ({"n_kv_head": 2}, dict(causal=True)),
    "mqa": ({"n_kv_head": 1}, dict(causal=True)),
    "rope-offset": ({"position": "rope", "n_kv_head": 2}, dict(causal=True, offset=True)),
    "rope-per-row": ({"position": "rope", "n_kv_head": 2, "qkv_bias": False},
                     dict(causal=True, per_row=True)),
    "alibi": ({"position": "alibi"}, dict(causal=True)),
    "alibi-gqa-padding": ({"position": "alibi", "n_kv_head": 2},
                          dict(causal=True, padding=True)),
}


def _parity_inputs(mode, seed):
    """Random shapes: B 1..3, T 2..7, S 2..7 (cross), D in {4, 8, 16}, C = 4 D."""
    cfg_kwargs, opts = PARITY_MODES[mode]
    rng = np.random.default_rng(seed)
    b, t, s = (int(n) for n in (rng.integers(1, 4), rng.integers(2, 8), rng.integers(2, 8)))
    d = int(rng.choice([4, 8, 16]))
    cfg, params, x = _setup(np.float32, b=b, t=t, c=4 * d, seed=seed, **cfg_kwargs)
    inputs = {"x": x}
    kwargs = {"causal": opts["causal"]}
    n_keys = t
    if opts.get("cross"):
        inputs["memory"] = rng.standard_normal((b, s, 4 * d)).astype(np.float32)
        n_keys = s
    if opts.get("padding"):
        # >= 2 real keys: with one, every weight row is one-hot and dq is exactly 0 here but
        # rounding noise in torch (nothing to compare)
        lengths = rng.integers(2, n_keys + 1, size=b)
        kwargs["key_mask"] = key_mask(list(lengths), n_keys)
    if opts.get("offset"):
        kwargs["positions"] = np.arange(3, 3 + t)
    if opts.get("per_row"):
        kwargs["positions"] = rng.integers(0, 20, size=(b, 1)) + np.arange(t)   # (B, T)
    return cfg, params, inputs, kwargs


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", PARITY_MODES)
def test_matches_torch(mode, seed):
    cfg, params, inputs, kwargs = _parity_inputs(mode, seed)
    y, ctx = attention_block_forward(params, inputs["x"], cfg, memory=inputs.get("memory"),
                                     **kwargs)
    dy = np.random.default_rng(seed + 100).standard_normal(y.shape).astype(np.float32)
    grads, dx, dmemory = attention_block_backward(dy, ctx)
    ours = {**{"attn." + name: g for name, g in grads.items()}, "x": dx}
    if dmemory is not None:
        ours["memory"] = dmemory

    pmap = torch_blocks.ParamMap()
    module = torch_blocks.TorchAttention({"attn." + n: p for n, p in params.items()}, cfg, pmap,
                                         "attn.")
    y_ref, theirs = torch_blocks.run(module, pmap, inputs, dy, **kwargs)
    torch_blocks.assert_close(y, y_ref, "y")
    torch_blocks.assert_grads_match(ours, theirs, key_bias_is_zero=cfg.position != "rope")
