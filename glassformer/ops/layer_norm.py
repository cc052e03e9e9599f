"""Layer normalization (Ba et al. 2016) over the last axis, with a learned scale and shift.

    mean = (1/C) sum_c x_c
    var  = (1/C) sum_c (x_c - mean)^2          biased: divide by C, not C - 1
    rstd = 1 / sqrt(var + eps)                 eps inside the square root
    xhat = (x - mean) * rstd
    y    = xhat * w + b                        x (..., C), w (C,), b (C,) -> y (..., C)

Matches `torch.nn.functional.layer_norm(x, (C,), w, b, eps)` (and GPT-2 / BERT's LayerNorm):
biased variance and eps inside the sqrt are the two places a hand-written version usually drifts.

Backward, with g = dy * w (the gradient reaching xhat) and means over the last axis:

    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dw = sum of dy * xhat                      over every leading position: (C,)
    db = sum of dy                             over every leading position: (C,)

The two subtracted means are the paths through `mean` and through `rstd`: moving one x_c shifts
the row's mean and its spread, which moves every xhat in the row. Derivation:
docs/derivations/layer_norm.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import ShapeError
from glassformer.ops._check import check_float, check_same_dtype, check_shape
from glassformer.ops._rows import row_sum
from glassformer.ops._scalars import check_eps


class LayerNormCtx(NamedTuple):
    """Saved for backward.

    xhat:     the normalized input (..., C). Backward needs it for dw and for dx; keeping it costs
              one array the size of x. (llm.c keeps mean and rstd instead and recomputes
              xhat = (x - mean) * rstd, trading that memory for one more pass over x.)
    rstd:     1 / sqrt(var + eps), shape (..., 1), the per-row factor in dx.
    w:        the scale (C,), since the gradient reaching xhat is dy * w.
    has_bias: whether to return db.
    """
    xhat: np.ndarray
    rstd: np.ndarray
    w: np.ndarray
    has_bias: bool


def check_layer_norm_inputs(x, w, b) -> None:
    """The forward's input checks (also kernels/train_numba.py's, which must fail alike)."""
    check_float("x", x)
    check_float("w", w)
    sizes: dict = {}
    check_shape("x", x, ("...", "C"), sizes)
    check_shape("w", w, ("C",), sizes)
    if sizes["C"] == 0:
        raise ShapeError(f"expected x with at least one feature to normalize (C >= 1), "
                         f"got {x.shape}")
    if b is not None:
        check_float("b", b)
        check_shape("b", b, ("C",), sizes)
    check_same_dtype(x=x, w=w, b=b)


def layer_norm_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                       eps: float = 1e-5) -> tuple[np.ndarray, LayerNormCtx]:
    """y = (x - mean) / sqrt(var + eps) * w + b over the last axis. x (..., C) -> y (..., C).

    >>> y, ctx = layer_norm_forward(np.array([[1.0, 3.0]]), np.ones(2), eps=0.0)
    >>> y.tolist(), ctx.rstd.tolist()
    ([[-1.0, 1.0]], [[1.0]])
    """
    check_layer_norm_inputs(x, w, b)
    eps = check_eps("eps", eps)  # note: a Python float, so float32 + eps stays float32
    mean = row_sum(x, 1.0 / x.shape[-1])            # (..., C) -> (..., 1)
    centered = x - mean                             # (..., C)
    # biased variance: a row dot of centered with itself over C (vecdot: no squared temporary)
    var = np.vecdot(centered, centered)[..., None] * (1.0 / x.shape[-1])
    rstd = 1.0 / np.sqrt(var + eps)                 # (..., 1)
    xhat = centered
    xhat *= rstd                                    # (..., C), in place: centered is not kept
    y = xhat * w
    if b is not None:
        y += b
    return y, LayerNormCtx(xhat=xhat, rstd=rstd, w=w, has_bias=b is not None)


def layer_norm_backward(dy: np.ndarray, ctx: LayerNormCtx
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Returns (dx, dw, db) shaped like x, w, b; db is None when the forward had no bias."""
    width = ctx.w.shape[0]
    inv_width = 1.0 / width
    g = dy * ctx.w                                          # (..., C): gradient reaching xhat
    g_mean = row_sum(g, inv_width)                          # (..., 1): path through mean
    # (..., C) . (..., C) -> (..., 1): path through rstd (vecdot: a row dot, no temporary)
    gx_mean = np.vecdot(g, ctx.xhat)[..., None] * inv_width
    dx = ctx.xhat * gx_mean                                 # (..., C), then in place:
    dx += g_mean
    np.subtract(g, dx, out=dx)                              # g - mean(g) - xhat * mean(g xhat)
    dx *= ctx.rstd
    dy_rows = dy.reshape(-1, width)                         # (..., C) -> (N, C)
    xhat_rows = ctx.xhat.reshape(-1, width)                 # (..., C) -> (N, C)
    dw = np.einsum("nc,nc->c", dy_rows, xhat_rows)          # (N, C) -> (C,)
    db = dy_rows.sum(axis=0) if ctx.has_bias else None      # (N, C) -> (C,)
    return dx, dw, db
