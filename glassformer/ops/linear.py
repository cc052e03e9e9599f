"""Linear (fully connected) layer: y = x W + b.

Weights are stored (in, out), the layout of the math above; checkpoint layouts that store
(out, in), as torch's nn.Linear does, are transposed once on load in `io/hf_names.py`.

Backward, for x of shape (..., C_in):

    dx = dy W^T            (..., C_out) @ (C_out, C_in) -> (..., C_in)
    dW = x^T dy            summed over every leading position: (C_in, C_out)
    db = sum of dy         over every leading position: (C_out,)

A frozen weight (a LoRA run's base model: ops/lora.py) is run with `frozen=True`: its ctx keeps W
but not x, and its backward computes dx only (dW and db are None), one product instead of two.

Matches `torch.nn.functional.linear(x, W.T, b)`.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_same_dtype, check_shape, check_weight


class LinearCtx(NamedTuple):
    """Saved for backward: the input (for dW) and the weight (for dx); `has_bias` for db."""
    x: np.ndarray | None   # None when frozen: no dW will be computed, so x is not kept
    w: np.ndarray
    has_bias: bool
    frozen: bool = False   # the weight (and bias) take no gradient


def linear_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                   frozen: bool = False) -> tuple[np.ndarray, LinearCtx]:
    """y = x @ w (+ b). x (..., C_in), w (C_in, C_out), b (C_out,) -> y (..., C_out).

    frozen: w and b take no gradient; backward returns (dx, None, None).

    >>> y, _ = linear_forward(np.ones((2, 3)), np.ones((3, 4)))
    >>> y.shape
    (2, 4)
    """
    check_float("x", x)
    check_weight("w", w)   # or a QuantizedMatrix: ops/quant/
    sizes: dict = {}
    check_shape("w", w, ("C_in", "C_out"), sizes)
    check_shape("x", x, ("...", "C_in"), sizes)
    if b is not None:
        check_float("b", b)
        check_shape("b", b, ("C_out",), sizes)
    check_same_dtype(x=x, w=w, b=b)
    # One 2-D matmul over every position: BLAS is fastest on a single tall matrix.
    rows = x.reshape(-1, sizes["C_in"])                     # (..., C_in) -> (N, C_in)
    y = rows @ w                                            # (N, C_in) @ (C_in, C_out) -> (N, C_out)
    if b is not None:
        y += b
    y = y.reshape(x.shape[:-1] + (sizes["C_out"],))         # (N, C_out) -> (..., C_out)
    return y, LinearCtx(x=None if frozen else x, w=w, has_bias=b is not None, frozen=frozen)


def linear_backward(dy: np.ndarray, ctx: LinearCtx
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Returns (dx, dw, db); db is None when the forward had no bias, dw and db when frozen."""
    c_in, c_out = ctx.w.shape
    # Flatten every leading position into one axis so each product is a single 2-D matmul.
    dy_rows = dy.reshape(-1, c_out)     # (..., C_out) -> (N, C_out)
    dx_rows = dy_rows @ ctx.w.T         # (N, C_out) @ (C_out, C_in) -> (N, C_in)
    dx = dx_rows.reshape(dy.shape[:-1] + (c_in,))                 # -> (..., C_in)
    if ctx.frozen:
        return dx, None, None
    x_rows = ctx.x.reshape(-1, c_in)    # (..., C_in) -> (N, C_in)
    dw = x_rows.T @ dy_rows             # (C_in, N) @ (N, C_out) -> (C_in, C_out)
    db = dy_rows.sum(axis=0) if ctx.has_bias else None
    return dx, dw, db
