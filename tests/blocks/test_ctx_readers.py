"""The readers of a forward's ctx beside the blocks (blocks/attention.py: head_weights,
attention_inputs, merged_heads; blocks/residual.py: attention_weights, layer_input,
sub_block_outputs, residual_after): they hand back exactly what the forward computed."""
from __future__ import annotations

import numpy as np

from glassformer.blocks.attention import attention_inputs, merged_heads
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.residual import (attention_block_ctx, attention_weights, block_forward,
                                         init_block, layer_input, residual_after)

B, T, S, C = 2, 5, 3, 16
SOFTMAX_RTOL = 1e-5  # float32 weights: each row sums to 1 up to rounding


def test_pre_norm_stream_is_the_forward_output_to_the_bit():
    rng = np.random.default_rng(0)
    cfg = BlockConfig(d_model=C, n_head=4, n_kv_head=2)
    params = init_block(cfg, rng, std=0.3, out_std=0.3)
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    out, ctx = block_forward(params, x, cfg, causal=True)
    np.testing.assert_array_equal(residual_after(ctx, x, params), out)
    assert layer_input(ctx) is None  # a pre-norm layer keeps x-hat, not x
    weights = attention_weights(ctx)                                    # (B, H, T, S)
    assert weights.shape == (B, 4, T, T)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=SOFTMAX_RTOL)
    assert np.all(np.triu(weights[0, 0], k=1) == 0)                    # causal


def test_post_norm_layer_input_and_cross_attention():
    rng = np.random.default_rng(1)
    cfg = BlockConfig(d_model=C, n_head=4, norm_position="post")
    params = init_block(cfg, rng, std=0.3, out_std=0.3, cross=True)
    x = rng.standard_normal((B, T, C)).astype(np.float32)
    memory = rng.standard_normal((B, S, C)).astype(np.float32)
    _, ctx = block_forward(params, x, cfg, causal=True, memory=memory)
    np.testing.assert_array_equal(layer_input(ctx), x)
    queries, source = attention_inputs(attention_block_ctx(ctx, cross=True))
    np.testing.assert_array_equal(source, memory)
    assert queries.shape == (B, T, C)
    assert attention_weights(ctx, cross=True).shape == (B, 4, T, S)
    assert merged_heads(attention_block_ctx(ctx)).shape == (B, T, C)    # H*D = C here
