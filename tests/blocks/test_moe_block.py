"""The mixture-of-experts router and block: float64 gradcheck of every mode, float32 parity
(forward and every gradient) with transformers' own MoE blocks (Mixtral, Qwen3-MoE, DeepSeek-V3,
Qwen2-MoE), dtypes, the ctx readers, the dispatch plan, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.moe import (chosen_experts, chosen_weights, dispatch_plan, expert_load,
                                    init_moe, moe_backward, moe_forward, moe_output, moe_shapes,
                                    router_logits, router_probs)
from glassformer.errors import GlassformerError, ShapeError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases.moe import CASES
from glassformer.ops.moe_router import router_backward, router_forward

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6
# float32 against torch float32: ~10 ops deep, different summation orders; observed ~1e-6.
TORCH_RTOL = 1e-5

# family -> (our MoEConfig, HF block family): each routing HF implements
PARITY = {
    "mixtral": MoEConfig(n_experts=5, experts_per_token=2, expert_d_ff=11, norm_topk_prob=True),
    "qwen3_moe": MoEConfig(n_experts=6, experts_per_token=3, expert_d_ff=9),
    "qwen3_moe-norm": MoEConfig(n_experts=6, experts_per_token=3, expert_d_ff=9,
                                norm_topk_prob=True),
    "deepseek_v3": MoEConfig(n_experts=8, experts_per_token=3, expert_d_ff=7, scoring="sigmoid",
                             norm_topk_prob=True, routed_scaling_factor=2.5, n_group=4,
                             topk_group=2, router_bias=True, shared_d_ff=14),
    "qwen2_moe": MoEConfig(n_experts=4, experts_per_token=2, expert_d_ff=6, shared_d_ff=10,
                           shared_gate=True),
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.name}-{c.mode}")
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _setup(moe, dtype, *, b=2, t=5, c=12, seed=0):
    cfg = BlockConfig(d_model=c, n_head=1, norm="rms", mlp="swiglu", mlp_bias=False, moe=moe)
    rng = np.random.default_rng(seed)
    params = init_moe(cfg, rng, std=1.0 / math.sqrt(c), out_std=1.0 / math.sqrt(c),
                      dtype=np.float64)
    if "router_bias" in params:
        params["router_bias"] = 0.1 * rng.standard_normal(params["router_bias"].shape)
    params = {name: p.astype(dtype) for name, p in params.items()}
    return cfg, params, rng.standard_normal((b, t, c)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["mixtral", "deepseek_v3", "qwen2_moe"])
def test_dtype_kept_and_every_param_has_a_gradient(name, dtype):
    cfg, params, x = _setup(PARITY[name], dtype)
    y, ctx = moe_forward(params, x, cfg)
    grads, dx = moe_backward(np.ones_like(y), ctx)
    assert y.dtype == dx.dtype == dtype and dx.shape == x.shape
    assert list(params) == list(moe_shapes(cfg))
    assert sorted(grads) == sorted(params)
    assert all(grads[n].shape == params[n].shape and grads[n].dtype == dtype for n in params)
    if "router_bias" in grads:
        assert not grads["router_bias"].any()  # it only chooses


def test_readers_and_output_rebuild():
    cfg, params, x = _setup(PARITY["qwen3_moe"], np.float32)
    y, ctx = moe_forward(params, x, cfg)
    n, k = x.shape[0] * x.shape[1], cfg.moe.experts_per_token
    assert router_logits(ctx).shape == router_probs(ctx).shape == (n, cfg.moe.n_experts)
    np.testing.assert_array_equal(router_logits(ctx), x.reshape(n, -1) @ params["router"])
    np.testing.assert_allclose(router_probs(ctx).sum(axis=1), 1.0, rtol=1e-6)
    indices = chosen_experts(ctx)
    assert indices.shape == (n, k) and chosen_weights(ctx).shape == (n, k)
    # best first, and the weights are the chosen probabilities (no renormalisation here)
    chosen = np.take_along_axis(router_probs(ctx), indices, axis=1)
    assert (np.diff(chosen, axis=1) <= 0).all()
    np.testing.assert_array_equal(chosen_weights(ctx), chosen)
    load = expert_load(ctx)
    np.testing.assert_allclose(load, np.bincount(indices.ravel(), minlength=6) / (n * k))
    np.testing.assert_array_equal(moe_output(ctx), y)


def test_a_router_logit_gradient_adds_to_the_routing_path():
    """drouter_logits G (a balance loss's dL/dlogits) adds x^T G to the router's gradient and
    G R^T to dx, on top of the block's own."""
    cfg, params, x = _setup(PARITY["qwen3_moe"], np.float64)
    y, ctx = moe_forward(params, x, cfg)
    dy = np.random.default_rng(4).standard_normal(y.shape)
    g = np.random.default_rng(5).standard_normal(router_logits(ctx).shape)   # (N, E)
    plain, dx_plain = moe_backward(dy, ctx)
    extra, dx_extra = moe_backward(dy, ctx, drouter_logits=g)
    rows = x.reshape(-1, x.shape[-1])
    np.testing.assert_allclose(extra["router"] - plain["router"], rows.T @ g, atol=1e-12)
    np.testing.assert_allclose((dx_extra - dx_plain).reshape(rows.shape),
                               g @ params["router"].T, atol=1e-12)


def test_dispatch_groups_slots_by_expert_in_token_order():
    indices = np.array([[2, 0], [0, 1], [2, 1]])
    plan = dispatch_plan(indices, 4)
    assert plan.bounds.tolist() == [0, 2, 4, 6, 6]
    assert indices.reshape(-1)[plan.order].tolist() == [0, 0, 1, 1, 2, 2]
    assert plan.token.tolist() == [0, 1, 1, 2, 0, 2]


def test_unchosen_experts_get_zero_gradient():
    moe = MoEConfig(n_experts=6, experts_per_token=1, expert_d_ff=4)
    cfg, params, x = _setup(moe, np.float64, b=1, t=2)
    y, ctx = moe_forward(params, x, cfg)
    grads, _ = moe_backward(np.ones_like(y), ctx)
    unused = np.setdiff1d(np.arange(6), chosen_experts(ctx))
    assert unused.size >= 4
    assert not grads["experts.w_up"][unused].any()


def test_router_gradient_reaches_only_the_chosen_scores():
    logits = np.random.default_rng(3).standard_normal((4, 5))
    _, ctx = router_forward(logits, top_k=2, scoring="sigmoid")
    dlogits, _ = router_backward(np.ones((4, 2)), ctx)
    chosen = np.zeros((4, 5), bool)
    np.put_along_axis(chosen, ctx.indices, True, axis=1)
    assert not dlogits[~chosen].any() and dlogits[chosen].all()


def test_bad_configs_and_inputs_are_one_line():
    with pytest.raises(GlassformerError, match="experts_per_token=5 must be between 1 and "
                                               "n_experts=4"):
        MoEConfig(n_experts=4, experts_per_token=5, expert_d_ff=8)
    with pytest.raises(GlassformerError, match="scoring must be one of"):
        MoEConfig(n_experts=4, experts_per_token=2, expert_d_ff=8, scoring="relu")
    with pytest.raises(GlassformerError, match="n_group=3 must divide n_experts=4"):
        MoEConfig(n_experts=4, experts_per_token=2, expert_d_ff=8, n_group=3)
    cfg, params, _ = _setup(PARITY["mixtral"], np.float32)
    with pytest.raises(ShapeError, match=r"expected x of shape \(B, T, C=12\), got \(2, 3\)"):
        moe_forward(params, np.zeros((2, 3), np.float32), cfg)
    with pytest.raises(GlassformerError, match="top_k must be between 1"):
        router_forward(np.zeros((2, 3)), top_k=4)


def test_a_layer_with_moe_gradchecks_and_its_readers_work():
    """block_forward's sparse layer (layer 0) against central differences, dense layer 1 kept."""
    from glassformer.blocks.residual import (block_backward, block_forward, init_block,
                                             moe_block_ctx, residual_after)
    from glassformer.gradcheck.core import gradcheck
    moe = MoEConfig(n_experts=3, experts_per_token=2, expert_d_ff=3, dense_layers=(1,))
    cfg = BlockConfig(d_model=4, n_head=2, d_ff=5, norm="rms", norm_bias=False, mlp="swiglu",
                      mlp_bias=False, qkv_bias=False, out_bias=False, position="rope", moe=moe)
    rng = np.random.default_rng(0)
    params = init_block(cfg, rng, std=0.5, out_std=0.5, dtype=np.float64, layer=0)
    inputs = {"x": rng.standard_normal((2, 3, 4)), **params}

    def forward(inp):
        return block_forward({k: v for k, v in inp.items() if k != "x"}, inp["x"], cfg,
                             causal=True, positions=np.arange(3), layer=0)

    def backward(dout, ctx):
        grads, dx, _ = block_backward(dout, ctx)
        return {"x": dx, **grads}

    errors = gradcheck(forward, backward, inputs)
    assert max(errors.values()) < GRADCHECK_TOL, errors
    y, ctx = forward(inputs)
    assert moe_block_ctx(ctx) is not None
    np.testing.assert_allclose(residual_after(ctx, inputs["x"], params), y, rtol=1e-12)
    dense = init_block(cfg, rng, dtype=np.float64, layer=1)
    _, dense_ctx = block_forward(dense, inputs["x"], cfg, causal=True, positions=np.arange(3),
                                 layer=1)
    assert moe_block_ctx(dense_ctx) is None and "mlp.w_up" in dense


torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from torchref import moe as torch_moe  # noqa: E402  (needs torch and transformers)


@pytest.mark.parametrize("name", PARITY)
def test_matches_transformers_blocks(name):
    cfg, params, x = _setup(PARITY[name], np.float32, b=3, t=7, c=13, seed=1)
    y, ctx = moe_forward(params, x, cfg)
    dy = np.random.default_rng(2).standard_normal(y.shape).astype(np.float32)
    grads, dx = moe_backward(dy, ctx)
    grads.pop("router_bias", None)  # a buffer in HF: no gradient there
    block = torch_moe.hf_block(name.split("-")[0], cfg.moe, cfg.d_model)
    y_ref, theirs = torch_moe.run(block, params, x, dy)
    np.testing.assert_allclose(y, y_ref, rtol=TORCH_RTOL, atol=TORCH_RTOL * np.abs(y_ref).max())
    ours = {**grads, "x": dx}
    assert sorted(ours) == sorted(theirs)
    for key, ref in theirs.items():
        np.testing.assert_allclose(ours[key], ref, rtol=TORCH_RTOL,
                                   atol=TORCH_RTOL * np.abs(ref).max(), err_msg=key)
