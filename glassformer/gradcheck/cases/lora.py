"""Gradcheck cases for LoRA: the adapted linear with and without bias, with its adapter dropout,
with an rsLoRA scale, and the adapter path alone (as attention's joined product uses it).

B is drawn non-zero here (a fresh adapter's B is zero, which would make dA zero and hide a wrong
dA). W and the bias are frozen, so only x, A and B are checked. Dropout cases draw the same mask
on every forward call: each builds its generator from one fixed seed.
"""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.lora import (lora_backward, lora_delta_backward, lora_delta_forward,
                                  lora_forward, lora_scale)

_MASK_SEED = 4321  # fixed so that every forward call in one check drops the same elements
_C_IN, _C_OUT, _R = 5, 4, 3


def _inputs(rng, bias: bool) -> dict:
    inputs = {"x": rng.standard_normal((2, 3, _C_IN)),
              "w": rng.standard_normal((_C_IN, _C_OUT)),
              "a": rng.standard_normal((_C_IN, _R)),
              "b": rng.standard_normal((_R, _C_OUT))}
    if bias:
        inputs["bias"] = rng.standard_normal(_C_OUT)
    return inputs


def _case(mode, *, bias=False, dropout=0.0, scale=2.0):
    def make(rng):
        return _inputs(rng, bias)

    def forward(inp):
        rng = np.random.default_rng(_MASK_SEED) if dropout else None
        return lora_forward(inp["x"], inp["w"], inp.get("bias"), inp["a"], inp["b"],
                            scale=scale, dropout=dropout, train=dropout > 0.0, rng=rng)

    def backward(dout, ctx):
        dx, dw, dbias, da, db = lora_backward(dout, ctx)
        assert dw is None and dbias is None  # the base is frozen
        return {"x": dx, "a": da, "b": db}

    return GradcheckCase("lora", mode, make, forward, backward)


def _delta_case():
    def make(rng):
        return _inputs(rng, False)

    def forward(inp):
        return lora_delta_forward(inp["x"], inp["a"], inp["b"], scale=0.5)

    def backward(dout, ctx):
        dx, da, db = lora_delta_backward(dout, ctx)
        return {"x": dx, "a": da, "b": db}

    return GradcheckCase("lora", "adapter-only", make, forward, backward)


CASES = [
    _case("no-bias"),
    _case("bias", bias=True),
    _case("dropout-0.3", bias=True, dropout=0.3),
    _case("rslora", scale=lora_scale(16, _R, rslora=True)),
    _delta_case(),
]
