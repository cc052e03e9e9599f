"""The case every op of (x, w, optional b) shares, when its backward returns (dx, dw, db): linear
(x @ w + b) and layer norm (x-hat * w + b). The op files then list only their modes.

Inputs are named "x", "w" and "b" (explain's parts pass the same names to `find_case`'s case);
they are drawn in that order, b with w's last size.
"""
from __future__ import annotations

from typing import Callable

from glassformer.gradcheck.core import GradcheckCase


def weight_bias_case(op: str, mode: str, forward: Callable, backward: Callable, *,
                     x_shape: tuple[int, ...], w_shape: tuple[int, ...],
                     bias: bool) -> GradcheckCase:
    """forward(x, w, b) -> (out, ctx), b None without bias; backward(dout, ctx) -> (dx, dw, db).
    The gradients checked are x's, w's and (with bias) b's."""
    def make(rng):
        inputs = {"x": rng.standard_normal(x_shape), "w": rng.standard_normal(w_shape)}
        if bias:
            inputs["b"] = rng.standard_normal(w_shape[-1])
        return inputs

    def run_forward(inp):
        return forward(inp["x"], inp["w"], inp.get("b"))

    def run_backward(dout, ctx):
        dx, dw, db = backward(dout, ctx)
        grads = {"x": dx, "w": dw}
        if bias:
            grads["b"] = db
        return grads

    return GradcheckCase(op, mode, make, run_forward, run_backward)
