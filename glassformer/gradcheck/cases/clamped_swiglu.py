"""Gradcheck cases for gpt-oss's clamped SwiGLU: inside the clamps, and spread wide enough that
some gates and ups are cut (their gradient is 0 there)."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.clamped_swiglu import clamped_swiglu_backward, clamped_swiglu_forward


def _case(mode, spread, limit):
    def make(rng):
        return {"gate": spread * rng.standard_normal((2, 3, 5)),
                "up": spread * rng.standard_normal((2, 3, 5))}

    def forward(inp):
        return clamped_swiglu_forward(inp["gate"], inp["up"], alpha=1.702, limit=limit)

    def backward(dout, ctx):
        dgate, dup = clamped_swiglu_backward(dout, ctx)
        return {"gate": dgate, "up": dup}

    return GradcheckCase("clamped_swiglu", mode, make, forward, backward)


CASES = [
    _case("inside", 1.0, 7.0),
    _case("clamped", 2.0, 1.0),
]
