"""Gradcheck cases for the MLP block: GELU (erf), GELU (tanh), ReLU, SiLU and SwiGLU, each with and
without biases. Params are inputs under their block-local names ("mlp.w_up", ...), so x and every
parameter are checked. Shapes: B=2, T=3, C=8, F=12.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.mlp import init_mlp, mlp_backward, mlp_forward
from glassformer.blocks.names import prefixed, sub_params
from glassformer.gradcheck.cases._block_params import WEIGHT_STD, exercised
from glassformer.gradcheck.core import GradcheckCase

B, T, C, F = 2, 3, 8, 12
PREFIX = "mlp."


def _case(kind: str, bias: bool) -> GradcheckCase:
    cfg = BlockConfig(d_model=C, n_head=1, d_ff=F, mlp=kind, mlp_bias=bias)

    def make(rng):
        params = init_mlp(cfg, rng, std=WEIGHT_STD, out_std=WEIGHT_STD, dtype=np.float64)
        inputs = {"x": rng.standard_normal((B, T, C))}                   # (B, T, C)
        inputs.update(exercised(prefixed(params, PREFIX), rng))
        return inputs

    def forward(inp):
        return mlp_forward(sub_params(inp, PREFIX), inp["x"], cfg)

    def backward(dy, ctx):
        grads, dx = mlp_backward(dy, ctx)
        return {"x": dx, **prefixed(grads, PREFIX)}

    mode = kind if bias else f"{kind}-no-bias"
    return GradcheckCase("mlp_block", mode, make, forward, backward)


CASES = [_case(kind, bias) for kind in ("gelu", "gelu_tanh", "relu", "silu", "swiglu",
                                           "geglu_tanh")
         for bias in (True, False)]
