"""Gradcheck cases for RMS norm: two eps values, 1-d to 3-d inputs."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.rms_norm import rms_norm_backward, rms_norm_forward


def _case(mode, *, shape, eps):
    def make(rng):
        return {"x": rng.standard_normal(shape), "w": rng.standard_normal(shape[-1])}

    def forward(inp):
        return rms_norm_forward(inp["x"], inp["w"], eps=eps)

    def backward(dout, ctx):
        dx, dw = rms_norm_backward(dout, ctx)
        return {"x": dx, "w": dw}

    return GradcheckCase("rms_norm", mode, make, forward, backward)


CASES = [
    _case("eps-1e-6", shape=(2, 3, 5), eps=1e-6),
    # A large eps makes the eps term matter in rstd, so a misplaced eps would show.
    _case("eps-0.5", shape=(4, 6), eps=0.5),
    _case("one-row", shape=(7,), eps=1e-5),
]
