"""The attention block attends by tiles from TILED_FROM queries when training or prefilling a
KV cache: the same output and gradients as the whole op (float32), no weights kept."""
from __future__ import annotations

import math

import numpy as np
import pytest

import glassformer.blocks.attention as block
from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          head_weights, init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError
from glassformer.gradcheck.cases._block_params import exercised
from glassformer.kernels.choice import KERNELS_ENV, numba_importable
from glassformer.ops.attention import AttentionCtx
from glassformer.ops.tiled_attention import TiledAttentionCtx


# both paths: ops/tiled_attention.py, and its compiled twin kernels/prefill_numba.py
KERNELS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]


def _setup(t, **cfg_kwargs):
    cfg = BlockConfig(d_model=16, n_head=4, **cfg_kwargs)
    rng = np.random.default_rng(0)
    params = init_attention(cfg, rng, std=0.25, out_std=0.25, dtype=np.float64)
    params = {name: p.astype(np.float32) for name, p in exercised(params, rng).items()}
    x = rng.standard_normal((2, t, 16)).astype(np.float32)
    return cfg, params, x


@pytest.mark.parametrize("cfg_kwargs", [{"position": "rope", "n_kv_head": 2},
                                        {"position": "alibi", "n_kv_head": 1}],
                         ids=["rope-gqa", "alibi-mqa"])
@pytest.mark.parametrize("kernels", KERNELS)
def test_a_long_training_forward_is_tiled_and_equal(cfg_kwargs, kernels, monkeypatch):
    monkeypatch.setenv(KERNELS_ENV, kernels)
    cfg, params, x = _setup(block.TILED_FROM, **cfg_kwargs)
    y, ctx = attention_block_forward(params, x, cfg, causal=True, train=True)
    assert isinstance(ctx.attn, TiledAttentionCtx)
    with pytest.raises(GlassformerError, match="tiles"):
        head_weights(ctx)
    monkeypatch.setattr(block, "TILED_FROM", math.inf)             # the whole op, as before
    y_whole, ctx_whole = attention_block_forward(params, x, cfg, causal=True, train=True)
    assert isinstance(ctx_whole.attn, AttentionCtx)
    np.testing.assert_allclose(y, y_whole, atol=1e-5)
    dy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    grads, dx, _ = attention_block_backward(dy, ctx)
    grads_whole, dx_whole, _ = attention_block_backward(dy, ctx_whole)
    np.testing.assert_allclose(dx, dx_whole, atol=1e-5)
    assert grads.keys() == grads_whole.keys()
    for name in grads:   # float32 sums over 2 x 512 tokens: relative to the largest entry;
        # bk's true gradient is 0 (a shift of every score), so it is rounding noise on both sides
        scale = max(np.abs(grads_whole[name]).max(), 10.0)
        np.testing.assert_allclose(grads[name], grads_whole[name], atol=1e-5 * scale, err_msg=name)


def test_an_evaluation_forward_keeps_the_weights():
    cfg, params, x = _setup(block.TILED_FROM)
    _, ctx = attention_block_forward(params, x, cfg, causal=True)
    assert head_weights(ctx).shape == (2, 4, block.TILED_FROM, block.TILED_FROM)


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_long_prefill_after_a_short_one_is_tiled_and_equal(kernels, monkeypatch):
    """A 5-token prefill, then TILED_FROM tokens more: S > T, end-aligned causal tiles."""
    monkeypatch.setenv(KERNELS_ENV, kernels)
    cfg, params, x = _setup(block.TILED_FROM + 5, position="rope", n_kv_head=2, window=300)
    layout = KVLayout(cfg.kv_heads, cfg.dim_per_head, cfg.dim_per_head)
    outs = []
    for tiled_from in (block.TILED_FROM, math.inf):
        monkeypatch.setattr(block, "TILED_FROM", tiled_from)
        cache = KVCache.allocate(layout, n_layer=1, batch=2, max_len=x.shape[1], dtype=np.float32)
        attention_block_forward(params, x[:, :5], cfg, causal=True, kv_cache=cache)
        cache.advance(5)
        y, ctx = attention_block_forward(params, x[:, 5:], cfg, causal=True, kv_cache=cache)
        outs.append((y, type(ctx.attn)))
    assert outs[0][1] is TiledAttentionCtx and outs[1][1] is AttentionCtx
    np.testing.assert_allclose(outs[0][0], outs[1][0], atol=1e-5)
