"""RMS normalization (Zhang & Sennrich 2019) over the last axis, with a learned scale, no shift.

    ms   = (1/C) sum_c x_c^2                   mean square; no mean is subtracted
    rstd = 1 / sqrt(ms + eps)                  eps inside the square root
    xhat = x * rstd
    y    = xhat * w                            x (..., C), w (C,) -> y (..., C)

Matches Hugging Face `LlamaRMSNorm` (`weight * x * rsqrt(mean(x^2) + eps)`), with one
deviation: HF casts x to float32 for the statistics and back to the input dtype before the scale.
We compute in the input dtype throughout. For float32 input the two are the same computation;
for float64 input ours stays float64 where HF would round through float32 (and bf16 input is
widened to float32 on load, never reaches this op).

Backward, with g = dy * w (the gradient reaching xhat) and means over the last axis:

    dx = rstd * (g - xhat * mean(g * xhat))
    dw = sum of dy * xhat                      over every leading position: (C,)

It is layer norm's formula without the mean(g) term, because no mean was subtracted. Derivation:
docs/derivations/rms_norm.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.ops._check import check_float, check_same_dtype, check_shape
from glassformer.ops._scalars import check_eps


class RMSNormCtx(NamedTuple):
    """Saved for backward.

    xhat: the normalized input (..., C), needed for dw and dx (kept rather than recomputed from
          x and rstd: one array the size of x, in exchange for one fewer pass in backward).
    rstd: 1 / sqrt(mean(x^2) + eps), shape (..., 1), the per-row factor in dx.
    w:    the scale (C,), since the gradient reaching xhat is dy * w.
    """
    xhat: np.ndarray
    rstd: np.ndarray
    w: np.ndarray


def check_rms_norm_inputs(x, w) -> None:
    """The forward's input checks (also kernels/train_numba.py's, which must fail alike)."""
    check_float("x", x)
    check_float("w", w)
    sizes: dict = {}
    check_shape("x", x, ("...", "C"), sizes)
    check_shape("w", w, ("C",), sizes)
    check_same_dtype(x=x, w=w)


def rms_norm_forward(x: np.ndarray, w: np.ndarray, *, eps: float = 1e-6
                     ) -> tuple[np.ndarray, RMSNormCtx]:
    """y = x / sqrt(mean(x^2) + eps) * w over the last axis. x (..., C), w (C,) -> y (..., C).

    >>> y, ctx = rms_norm_forward(np.array([[3.0, 4.0]]), np.ones(2), eps=0.0)
    >>> ctx.rstd.round(6).tolist()
    [[0.282843]]
    """
    check_rms_norm_inputs(x, w)
    eps = check_eps("eps", eps)  # note: a Python float, so float32 + eps stays float32
    # (..., C) -> (..., 1): a row dot of x with itself (vecdot: no squared temporary)
    mean_square = np.vecdot(x, x)[..., None] * (1.0 / x.shape[-1])
    rstd = 1.0 / np.sqrt(mean_square + eps)            # (..., 1)
    xhat = x * rstd                                    # (..., C)
    y = xhat * w
    return y, RMSNormCtx(xhat=xhat, rstd=rstd, w=w)


def rms_norm_backward(dy: np.ndarray, ctx: RMSNormCtx) -> tuple[np.ndarray, np.ndarray]:
    """Returns (dx, dw) shaped like x and w."""
    width = ctx.w.shape[0]
    g = dy * ctx.w                                          # (..., C): gradient reaching xhat
    # (..., C) . (..., C) -> (..., 1): path through rstd (vecdot: a row dot, no temporary)
    gx_mean = np.vecdot(g, ctx.xhat)[..., None] * (1.0 / width)
    dx = ctx.xhat * gx_mean                                 # (..., C), then in place:
    np.subtract(g, dx, out=dx)                              # g - xhat * mean(g xhat)
    dx *= ctx.rstd
    dy_rows = dy.reshape(-1, width)                         # (..., C) -> (N, C)
    xhat_rows = ctx.xhat.reshape(-1, width)                 # (..., C) -> (N, C)
    dw = np.einsum("nc,nc->c", dy_rows, xhat_rows)          # (N, C) -> (C,)
    return dx, dw
