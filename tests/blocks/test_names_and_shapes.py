"""Block-level plumbing: sub_params/prefixed invert each other, every `*_shapes(cfg)` lists
exactly the params its `init_*` makes (names, order, shapes), and the norm step follows the pair
convention: params as its own sub-dict, backward returning (grads, dx)."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.attention import attention_shapes, init_attention
from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.mlp import init_mlp, mlp_shapes
from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.norm import init_norm, norm_backward, norm_forward, norm_shapes
from glassformer.blocks.residual import block_shapes, init_block

CONFIGS = {
    "gpt2": dict(mlp="gelu_tanh"),
    "nanogpt-no-bias": dict(norm_bias=False, qkv_bias=False, out_bias=False, mlp_bias=False),
    "llama": dict(norm="rms", mlp="swiglu", position="rope", n_kv_head=2, qkv_bias=False,
                  out_bias=False, mlp_bias=False),
    "qwen2": dict(norm="rms", mlp="swiglu", position="rope", n_kv_head=1, out_bias=False,
                  mlp_bias=False),
    "bert": dict(norm_position="post", mlp="gelu"),
    # layer 0 sparse (MoE with a gated shared expert and a router bias), layer 1 dense
    "moe": dict(norm="rms", mlp="swiglu", position="rope", qkv_bias=False, out_bias=False,
                mlp_bias=False, moe=MoEConfig(n_experts=4, experts_per_token=2, expert_d_ff=6,
                                              router_bias=True, shared_d_ff=5, shared_gate=True,
                                              dense_layers=(1,))),
}


def _cfg(name: str) -> BlockConfig:
    return BlockConfig(d_model=8, n_head=4, d_ff=12, **CONFIGS[name])


def _layout(params: dict) -> list:
    """[(name, shape)] in dict order."""
    return [(name, value.shape) for name, value in params.items()]


def test_sub_params_and_prefixed_invert_each_other():
    params = {"attn.wq": 1, "attn.wk": 2, "mlp.w_up": 3, "attnx": 4}
    local = sub_params(params, "attn.")
    assert local == {"wq": 1, "wk": 2}
    assert prefixed(local, "attn.") == {"attn.wq": 1, "attn.wk": 2}


@pytest.mark.parametrize("name", CONFIGS)
def test_shapes_list_what_init_makes_in_init_order(name):
    cfg = _cfg(name)
    rng = np.random.default_rng(0)
    assert _layout(init_norm(cfg)) == list(norm_shapes(cfg).items())
    assert _layout(init_attention(cfg, rng, std=0.02, out_std=0.01)) == \
        list(attention_shapes(cfg).items())
    assert _layout(init_mlp(cfg, rng, std=0.02, out_std=0.01)) == list(mlp_shapes(cfg).items())
    for cross in (False, True):
        for layer in (0, 1):
            assert _layout(init_block(cfg, rng, cross=cross, layer=layer)) == \
                list(block_shapes(cfg, cross=cross, layer=layer).items())


def test_init_draws_weights_and_zeroes_biases():
    cfg = _cfg("gpt2")
    params = init_attention(cfg, np.random.default_rng(0), std=0.02, out_std=0.001)
    assert all(not params[b].any() for b in ("bq", "bk", "bv", "bo"))
    assert params["wo"].std() < params["wq"].std() / 4    # wo uses out_std, the others std


@pytest.mark.parametrize("name", ["gpt2", "nanogpt-no-bias", "llama"])
def test_norm_takes_its_own_params_and_returns_grads_first(name):
    cfg = _cfg(name)
    rng = np.random.default_rng(1)
    params = {key: value + rng.standard_normal(value.shape)
              for key, value in init_norm(cfg, np.float64).items()}
    x = rng.standard_normal((2, 3, cfg.d_model))
    y, ctx = norm_forward(params, x, cfg)
    grads, dx = norm_backward(np.ones_like(y), ctx)
    assert set(grads) == set(params) and dx.shape == x.shape
    assert all(grads[key].shape == params[key].shape for key in params)
