"""Gradcheck cases for layer norm: with and without bias, two eps values, 2-d and 3-d inputs."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward


def _case(mode, *, shape, bias, eps):
    width = shape[-1]

    def make(rng):
        inputs = {"x": rng.standard_normal(shape), "w": rng.standard_normal(width)}
        if bias:
            inputs["b"] = rng.standard_normal(width)
        return inputs

    def forward(inp):
        return layer_norm_forward(inp["x"], inp["w"], inp.get("b"), eps=eps)

    def backward(dout, ctx):
        dx, dw, db = layer_norm_backward(dout, ctx)
        grads = {"x": dx, "w": dw}
        if bias:
            grads["b"] = db
        return grads

    return GradcheckCase("layer_norm", mode, make, forward, backward)


CASES = [
    _case("bias", shape=(2, 3, 5), bias=True, eps=1e-5),
    _case("no-bias", shape=(2, 3, 5), bias=False, eps=1e-5),
    # A large eps makes the eps term matter in rstd, so a misplaced eps would show.
    _case("bias-eps-0.5", shape=(4, 6), bias=True, eps=0.5),
    _case("one-row", shape=(7,), bias=True, eps=1e-12),
]
