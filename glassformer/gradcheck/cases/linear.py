"""Gradcheck cases for the linear op: with and without bias, one row, 2-d and batched 3-d inputs."""
from __future__ import annotations

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.linear import linear_backward, linear_forward


def _case(mode, *, shape, c_out, bias):
    c_in = shape[-1]

    def make(rng):
        inputs = {"x": rng.standard_normal(shape), "w": rng.standard_normal((c_in, c_out))}
        if bias:
            inputs["b"] = rng.standard_normal(c_out)
        return inputs

    def forward(inp):
        return linear_forward(inp["x"], inp["w"], inp.get("b"))

    def backward(dout, ctx):
        dx, dw, db = linear_backward(dout, ctx)
        grads = {"x": dx, "w": dw}
        if bias:
            grads["b"] = db
        return grads

    return GradcheckCase("linear", mode, make, forward, backward)


CASES = [
    _case("bias", shape=(4, 3), c_out=5, bias=True),                # (N, C_in) -> (N, C_out)
    _case("no-bias", shape=(4, 3), c_out=5, bias=False),
    # Batched (B, T, C_in): dW and db sum over every leading position, not only the last rows.
    _case("batched-bias", shape=(2, 3, 4), c_out=5, bias=True),
    _case("batched-no-bias", shape=(2, 3, 4), c_out=5, bias=False),
    _case("one-row", shape=(3,), c_out=2, bias=True),               # (C_in,) -> (C_out,)
]
