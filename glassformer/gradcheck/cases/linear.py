"""Gradcheck cases for the linear op: with and without bias, one row, 2-d and batched 3-d inputs."""
from __future__ import annotations

from glassformer.gradcheck.cases._weight_bias import weight_bias_case
from glassformer.ops.linear import linear_backward, linear_forward


def _case(mode, *, shape, c_out, bias):
    return weight_bias_case("linear", mode, linear_forward, linear_backward, x_shape=shape,
                            w_shape=(shape[-1], c_out), bias=bias)


CASES = [
    _case("bias", shape=(4, 3), c_out=5, bias=True),                # (N, C_in) -> (N, C_out)
    _case("no-bias", shape=(4, 3), c_out=5, bias=False),
    # Batched (B, T, C_in): dW and db sum over every leading position, not only the last rows.
    _case("batched-bias", shape=(2, 3, 4), c_out=5, bias=True),
    _case("batched-no-bias", shape=(2, 3, 4), c_out=5, bias=False),
    _case("one-row", shape=(3,), c_out=2, bias=True),               # (C_in,) -> (C_out,)
]
