"""Gradcheck cases for the mixture-of-experts router (ops/moe_router.py) and block
(blocks/moe.py), rows named moe_router and moe_block.

Router modes: softmax top-2 (Qwen3-MoE/OLMoE default), softmax top-3 renormalised (Mixtral),
sigmoid with group-limited choice, a correction bias and scaling (DeepSeek-V3). Block modes: the
same three routings over SwiGLU experts, plus DeepSeek-V3's shared expert and Qwen2-MoE's
sigmoid-gated one. Params are inputs under their block-local names ("mlp.router", ...).
router_bias is an input but not checked: it only chooses, its gradient is exactly 0 (a central
difference of a piecewise constant function is 0 too, or noise where it crosses a tie).
Shapes: B=2, T=3, C=6, E=6 (4 in the gated-shared mode), F_e=4.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.moe import init_moe, moe_backward, moe_forward
from glassformer.blocks.names import prefixed, sub_params
from glassformer.gradcheck.cases._block_params import WEIGHT_STD
from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.moe_router import router_backward, router_forward

B, T, C, F_E = 2, 3, 6, 4
PREFIX = "mlp."
BIAS_STD = 0.1   # a correction bias small enough to reorder only a few near-tied experts

ROUTINGS = {
    "softmax-top2": dict(n_experts=6, experts_per_token=2),
    "softmax-top3-norm": dict(n_experts=6, experts_per_token=3, norm_topk_prob=True),
    "sigmoid-grouped": dict(n_experts=6, experts_per_token=3, scoring="sigmoid",
                            norm_topk_prob=True, routed_scaling_factor=2.5, n_group=3,
                            topk_group=2, router_bias=True),
}
BLOCKS = {
    **ROUTINGS,
    "sigmoid-grouped-shared": dict(ROUTINGS["sigmoid-grouped"], shared_d_ff=5),
    "softmax-gated-shared": dict(n_experts=4, experts_per_token=2, norm_topk_prob=True,
                                 shared_d_ff=5, shared_gate=True),
    # gpt-oss: a trained router bias, experts with biases and the clamped SwiGLU (a low limit,
    # so the clamps cut some values: their zero gradient is checked too)
    "gpt-oss": dict(n_experts=4, experts_per_token=2, norm_topk_prob=True,
                    router_logit_bias=True, expert_mlp="swiglu_clamped", expert_bias=True),
}
GLU_LIMITS = {"gpt-oss": 0.3}


def _router_case(mode: str) -> GradcheckCase:
    moe = MoEConfig(expert_d_ff=F_E, **ROUTINGS[mode])
    options = dict(top_k=moe.experts_per_token, scoring=moe.scoring,
                   norm_topk_prob=moe.norm_topk_prob, scaling=moe.routed_scaling_factor,
                   n_group=moe.n_group, topk_group=moe.topk_group)

    def make(rng):
        inputs = {"logits": 2.0 * rng.standard_normal((B * T, moe.n_experts))}   # (N, E)
        if moe.router_bias:
            inputs["bias"] = BIAS_STD * rng.standard_normal(moe.n_experts)       # (E,)
        return inputs

    def forward(inp):
        return router_forward(inp["logits"], inp.get("bias"), **options)

    def backward(dweights, ctx):
        dlogits, _ = router_backward(dweights, ctx)
        return {"logits": dlogits}

    return GradcheckCase("moe_router", mode, make, forward, backward)


def block_case_config(mode: str) -> BlockConfig:
    """The BlockConfig of block mode `mode` (tests and explain reuse it)."""
    moe = MoEConfig(expert_d_ff=F_E, **BLOCKS[mode])
    return BlockConfig(d_model=C, n_head=1, norm="rms", mlp="swiglu", mlp_bias=False, moe=moe,
                       glu_limit=GLU_LIMITS.get(mode, 7.0))


def _block_case(mode: str) -> GradcheckCase:
    cfg = block_case_config(mode)

    def make(rng):
        params = init_moe(cfg, rng, std=WEIGHT_STD, out_std=WEIGHT_STD, dtype=np.float64)
        for name in params:   # biases start at 0: give them values the check can see
            if name == "router_bias" or name.rsplit(".", 1)[-1].startswith("b"):
                params[name] = BIAS_STD * rng.standard_normal(params[name].shape)
        return {"x": rng.standard_normal((B, T, C)), **prefixed(params, PREFIX)}  # (B, T, C)

    def forward(inp):
        return moe_forward(sub_params(inp, PREFIX), inp["x"], cfg)

    def backward(dy, ctx):
        grads, dx = moe_backward(dy, ctx)
        grads.pop("router_bias", None)  # exactly 0: it only chooses (module docstring)
        return {"x": dx, **prefixed(grads, PREFIX)}

    return GradcheckCase("moe_block", mode, make, forward, backward)


CASES = [_router_case(mode) for mode in ROUTINGS] + [_block_case(mode) for mode in BLOCKS]
