"""Gradcheck cases for SwiGLU: (B, T, F) inputs, and a 1-d (F,) pair."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.swiglu import swiglu_backward, swiglu_forward


def _case(mode, shape):
    def make(rng):
        return {"gate": 2.0 * rng.standard_normal(shape), "up": rng.standard_normal(shape)}

    def forward(inp):
        return swiglu_forward(inp["gate"], inp["up"])

    def backward(dout, ctx):
        dgate, dup = swiglu_backward(dout, ctx)
        return {"gate": dgate, "up": dup}

    return GradcheckCase("swiglu", mode, make, forward, backward)


CASES = [
    _case("batched", (2, 3, 5)),
    _case("one-row", (6,)),
]
